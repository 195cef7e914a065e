package oob

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/softroce/softroce/wire"
)

var perftestCaptures = []struct {
	name string
	test PerftestTest
}{
	{"send_bw.pcap", SendBW}, {"write_bw.pcap", WriteBW}, {"read_bw.pcap", ReadBW}, {"atomic_bw.pcap", AtomicBW},
	{"send_lat.pcap", SendLat}, {"write_lat.pcap", WriteLat}, {"read_lat.pcap", ReadLat}, {"atomic_lat.pcap", AtomicLat},
}

// ownDest returns the first address message a side sent in a capture.
func ownDest(t *testing.T, c *capture, fromClient bool) PerftestDest {
	t.Helper()
	s := c.stream(fromClient)
	const setup = PerftestVersionLen + 4 + 4 + 2
	d, err := ParsePerftestDest(s[setup : setup+PerftestDestGIDLen])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// ownReport returns the BW report a side sent (its 8-byte turns), if any.
func ownReport(c *capture, fromClient bool) (BWReport, bool) {
	var v []uint64
	for _, tn := range c.turns {
		if tn.fromClient == fromClient && len(tn.data) == 8 {
			v = append(v, binary.BigEndian.Uint64(tn.data))
		}
	}
	if len(v) != 5 {
		return BWReport{}, false
	}
	return BWReport{Size: v[0], Iters: v[1], BWPeak: math.Float64frombits(v[2]), BWAvg: math.Float64frombits(v[3]),
		MsgRateAvg: math.Float64frombits(v[4])}, true
}

// TestPerftestCaptureShape checks each capture against PerftestPlan: the
// sizes and order of every message, the version/system/MTU values and that
// every address message re-encodes identically.
func TestPerftestCaptureShape(t *testing.T) {
	for _, tc := range perftestCaptures {
		t.Run(tc.name, func(t *testing.T) {
			c := readCapture(t, tc.name)
			plan := tc.test.Plan()
			// Expected per-side message sizes (one QP).
			sizes := []int{16, 4, 4, 2}
			for range 3 + plan.SyncBeforeTraffic {
				sizes = append(sizes, PerftestDestGIDLen)
			}
			if plan.Report {
				sizes = append(sizes, PerftestDestGIDLen, 8, 8, 8, 8, 8)
			}
			if plan.Close {
				sizes = append(sizes, PerftestDestGIDLen, 5)
			}
			for _, fromClient := range []bool{true, false} {
				s := c.stream(fromClient)
				total := 0
				for _, n := range sizes {
					total += n
				}
				if len(s) != total {
					t.Fatalf("client=%v sent %d bytes, plan says %d", fromClient, len(s), total)
				}
				off := 0
				for i, n := range sizes {
					m := s[off : off+n]
					off += n
					switch {
					case i == 0:
						if want := append([]byte(PerftestVersion), make([]byte, 12)...); !bytes.Equal(m, want) {
							t.Errorf("version %q", m)
						}
					case i == 1 && binary.BigEndian.Uint32(m) != 4096, i == 2 && binary.BigEndian.Uint32(m) != 64:
						t.Errorf("system data %x", m)
					case i == 3 && string(m) != "3\x00":
						t.Errorf("MTU %q", m)
					case n == PerftestDestGIDLen:
						d, err := ParsePerftestDest(m)
						if err != nil {
							t.Fatalf("message %d: %v", i, err)
						}
						if enc := d.Append(nil, true); !bytes.Equal(enc, m) {
							t.Errorf("re-encoding\n got %q\nwant %q", enc, m)
						}
					case n == 5 && string(m) != "done\x00":
						t.Errorf("done %q", m)
					}
				}
			}
			// The data packets use the exchanged values.
			cli, srv := ownDest(t, &c, true), ownDest(t, &c, false)
			if cli.GID != gid(clientIP) || srv.GID != gid(serverIP) {
				t.Errorf("GIDs %x %x", cli.GID, srv.GID)
			}
			qpn, psn, ok := c.firstRequest(clientIP)
			if !ok || qpn != srv.QPN || psn != cli.PSN {
				t.Errorf("client's first packet QP %#x PSN %#x; exchanged %+v / %+v", qpn, psn, cli, srv)
			}
			for _, f := range c.roce {
				if f.src == clientIP && f.pkt.Mask&wire.HasRETH != 0 {
					if f.pkt.RETH.RKey != srv.RKey || f.pkt.RETH.VA < srv.VAddr {
						t.Errorf("RETH %+v does not target the server's buffer %+v", f.pkt.RETH, srv)
					}
					break
				}
			}
		})
	}
}

func TestPerftestValues(t *testing.T) {
	c := readCapture(t, "write_bw.pcap")
	want := PerftestDest{OutReads: 1, QPN: 0x19, PSN: 0x4a4880, RKey: 0x7f0, VAddr: 0x560cc82d4000, GID: gid(clientIP)}
	if diff := cmp.Diff(want, ownDest(t, &c, true)); diff != "" {
		t.Errorf("client (-want +got):\n%s", diff)
	}
	want = PerftestDest{OutReads: 1, QPN: 0x19, PSN: 0xf725bc, RKey: 0x7b2, VAddr: 0x556b0c2a6000, GID: gid(serverIP)}
	if diff := cmp.Diff(want, ownDest(t, &c, false)); diff != "" {
		t.Errorf("server (-want +got):\n%s", diff)
	}
	rep, ok := ownReport(&c, true)
	if !ok || rep.Size != 4096 || rep.Iters != 50 || math.Abs(rep.BWPeak-13.55) > 0.005 ||
		math.Abs(rep.BWAvg-12.92) > 0.005 || math.Abs(rep.MsgRateAvg-0.003309) > 1e-6 {
		t.Errorf("client report %+v", rep)
	}
	c = readCapture(t, "read_bw.pcap")
	if d := ownDest(t, &c, true); d.OutReads != 0x80 || d.RKey != 0xa18 || d.VAddr != 0x55f04212a000 || d.PSN != 0x4d93e1 {
		t.Errorf("read_bw client %+v", d)
	}
}

// TestPerftestReplay runs PerftestConn.Run in each role against the other
// role's captured bytes: everything we send must equal the capture.
func TestPerftestReplay(t *testing.T) {
	for _, tc := range perftestCaptures {
		c := readCapture(t, tc.name)
		for _, asClient := range []bool{true, false} {
			role := "server"
			if asClient {
				role = "client"
			}
			t.Run(tc.name+"/"+role, func(t *testing.T) {
				cc, sc := tcpPair(t)
				ours, peer := sc, cc
				if asClient {
					ours, peer = cc, sc
				}
				errc := make(chan error, 1)
				go func() { errc <- replay(peer, c.turns, !asClient) }()
				local := ownDest(t, &c, asClient)
				peerDest := ownDest(t, &c, !asClient)
				rep, _ := ownReport(&c, asClient)
				peerRep, hasReport := ownReport(&c, !asClient)
				var order []string
				var gotRep BWReport
				s := &PerftestSession{
					Test: tc.test, Sys: SysData{4096, 64}, MTU: 3, Local: []PerftestDest{local},
					Connect: func(sys SysData, mtu int, remote []PerftestDest) error {
						order = append(order, "connect")
						if sys != (SysData{4096, 64}) || mtu != 3 || remote[0] != peerDest {
							t.Errorf("connect got %+v %d %+v", sys, mtu, remote)
						}
						return nil
					},
					Ready:   func() error { order = append(order, "ready"); return nil },
					Traffic: func() (BWReport, error) { order = append(order, "traffic"); return rep, nil },
					Report:  func(r BWReport) { order = append(order, "report"); gotRep = r },
				}
				if err := NewPerftestConn(ours, asClient).Run(testCtx(t), s); err != nil {
					t.Fatal(err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				want := []string{"connect", "ready", "traffic"}
				if hasReport {
					want = append(want, "report")
					if math.Float64bits(gotRep.BWPeak) != math.Float64bits(peerRep.BWPeak) || gotRep.Size != peerRep.Size {
						t.Errorf("report %+v, want %+v", gotRep, peerRep)
					}
				}
				if diff := cmp.Diff(want, order); diff != "" {
					t.Errorf("hook order (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestPerftestLoopback runs our client against our server for every tool.
func TestPerftestLoopback(t *testing.T) {
	for _, test := range []PerftestTest{SendBW, WriteBW, ReadBW, AtomicBW, SendLat, WriteLat, ReadLat, AtomicLat} {
		t.Run(test.String(), func(t *testing.T) {
			cc, sc := tcpPair(t)
			ctx := testCtx(t)
			mk := func(qpn uint32, mtu int, sys SysData) (*PerftestSession, *[]PerftestDest, *BWReport) {
				var remote []PerftestDest
				var rep BWReport
				local := []PerftestDest{{QPN: qpn, PSN: qpn * 3, RKey: qpn + 1, VAddr: uint64(qpn) << 20, OutReads: 1},
					{QPN: qpn + 1, PSN: 7, GID: gid(clientIP)}}
				return &PerftestSession{Test: test, Sys: sys, MTU: mtu, Local: local,
					Connect: func(s SysData, m int, r []PerftestDest) error {
						if s != (SysData{8192, 128}) || m != 3 {
							t.Errorf("negotiated %+v mtu %d", s, m)
						}
						remote = append([]PerftestDest(nil), r...)
						return nil
					},
					Traffic: func() (BWReport, error) { return BWReport{Size: 4096, Iters: uint64(qpn), BWPeak: 1.5}, nil },
					Report:  func(r BWReport) { rep = r },
				}, &remote, &rep
			}
			cs, crem, crep := mk(0x100, 5, SysData{4096, 128})
			ss, srem, srep := mk(0x200, 3, SysData{8192, 64})
			errc := make(chan error, 1)
			go func() { errc <- NewPerftestConn(sc, false).Run(ctx, ss) }()
			if err := NewPerftestConn(cc, true).Run(ctx, cs); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ss.Local, *crem); diff != "" {
				t.Errorf("client saw (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(cs.Local, *srem); diff != "" {
				t.Errorf("server saw (-want +got):\n%s", diff)
			}
			if test.Plan().Report && (crep.Iters != 0x200 || srep.Iters != 0x100 || srep.BWPeak != 1.5) {
				t.Errorf("reports %+v %+v", crep, srep)
			}
		})
	}
}

func TestPerftestOldPeer(t *testing.T) {
	// A 5.2 peer: no system data, a 4-byte MTU message and 4-byte iterations.
	cc, sc := tcpPair(t)
	ctx := testCtx(t)
	go func() {
		var buf [16]byte
		_, _ = sc.Read(buf[:16])
		_, _ = sc.Write(append([]byte("5.2"), make([]byte, 13)...))
		_, _ = sc.Read(buf[:4])
		_, _ = sc.Write([]byte("2\x00\x00\x00"))
		_, _ = sc.Read(buf[:8])
		_, _ = sc.Write(make([]byte, 8))
		_, _ = sc.Read(buf[:4])
		_, _ = sc.Write([]byte{0, 0, 0, 9})
		for range 3 {
			_, _ = sc.Read(buf[:8])
			_, _ = sc.Write(make([]byte, 8))
		}
	}()
	c := NewPerftestConn(cc, true)
	sys, mtu, err := c.Setup(ctx, SysData{4096, 64}, 3)
	if err != nil || c.RemoteVersion != "5.2" || sys != (SysData{4096, 64}) || mtu != 2 {
		t.Fatalf("setup: %q %+v %d %v", c.RemoteVersion, sys, mtu, err)
	}
	rep, err := c.ExchangeBWReport(ctx, BWReport{Iters: 5})
	if err != nil || rep.Iters != 9 {
		t.Errorf("report %+v %v", rep, err)
	}
}

func TestPerftestDestFormats(t *testing.T) {
	d := PerftestDest{LID: 1, OutReads: 0x80, QPN: 0x19, PSN: 0x4a4880, RKey: 0x7f0, VAddr: 0x560cc82d4000, GID: gid(clientIP), SRQN: 5}
	short := d.Append(nil, false)
	if len(short) != PerftestDestLen || string(short) != "0001:0080:000019:4a4880:000007f0:0000560cc82d4000:00000005\x00" {
		t.Errorf("no-GID form %q", short)
	}
	got, err := ParsePerftestDest(short)
	want := d
	want.GID = [16]byte{}
	if err != nil || got != want {
		t.Errorf("no-GID parse %+v %v", got, err)
	}
	long := d.Append(nil, true)
	if len(long) != PerftestDestGIDLen {
		t.Errorf("GID form %d bytes", len(long))
	}
	if got, err := ParsePerftestDest(long); err != nil || got != d {
		t.Errorf("GID parse %+v %v", got, err)
	}
	for _, s := range []string{"", "0000", "0000:0001:000019:4a4880:000007f0:0000560cc82d4000", // 6 fields
		"0000:0001:000019:4a4880:000007f0:0000560cc82d4000:00:00:00",  // partial GID
		"0000:0001:000019:4a4880:000007f0:0000560cc82d40000:00000000", // 17-digit vaddr
		"0000:0001:000019:4a4880:000007f0:0000560cc82d4000:0000000x",
		"0000:0001:000019:4a4880:000007f0:0000560cc82d4000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c:00000000:00:00",
	} {
		if _, err := ParsePerftestDest([]byte(s)); !errors.Is(err, ErrPerftestMsg) {
			t.Errorf("%q: %v", s, err)
		}
	}
	for s, v := range map[string]float64{"6.06": 6.06, "5.33": 5.33, "5.2-rc1": 5.2, "": 0, "x": 0, "4.": 4} {
		if got := atof(s); got != v {
			t.Errorf("atof(%q) = %v", s, got)
		}
	}
	if SendBW.String() != "send_bw" || AtomicLat.String() != "atomic_lat" || PerftestTest(99).String() != "perftest(99)" {
		t.Error("PerftestTest.String")
	}
}

func TestPerftestErrors(t *testing.T) {
	cc, sc := tcpPair(t)
	ctx := testCtx(t)
	go func() {
		var buf [16]byte
		_, _ = sc.Read(buf[:])
		_, _ = sc.Write(bytes.Repeat([]byte{'7'}, 16)) // no NUL
	}()
	c := NewPerftestConn(cc, true)
	if _, err := c.ExchangeVersions(ctx, PerftestVersion); !errors.Is(err, ErrVersion) {
		t.Errorf("version: %v", err)
	}
	if _, err := c.ExchangeVersions(ctx, "0123456789abcdef"); !errors.Is(err, ErrVersion) {
		t.Errorf("long version: %v", err)
	}
	// A peer that hangs up mid-handshake.
	cc, sc = tcpPair(t)
	sc.Close()
	c = NewPerftestConn(cc, false)
	if _, err := c.HandShake(ctx, &PerftestDest{}); err == nil {
		t.Error("handshake with a closed peer succeeded")
	}
	// Cancellation.
	cc, _ = tcpPair(t)
	ctx2, cancel := context.WithCancel(context.Background())
	cancel()
	if err := NewPerftestConn(cc, true).Run(ctx2, &PerftestSession{Local: make([]PerftestDest, 1)}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: %v", err)
	}
	if err := NewPerftestConn(cc, true).Run(ctx, &PerftestSession{}); !errors.Is(err, ErrCount) {
		t.Errorf("no QPs: %v", err)
	}
}

// TestPerftestCloseAfterPeerReset: perftest writes "done" and closes without
// reading ours, so ours can meet a reset; the exchange is over by then, and
// Close must not report it as a failure (a softroce client against
// ib_write_bw under loss printed "Failed to close connection" and exited 1).
func TestPerftestCloseAfterPeerReset(t *testing.T) {
	cc, sc := tcpPair(t)
	ctx := testCtx(t)
	errc := make(chan error, 1)
	go func() {
		s := NewPerftestConn(sc, false)
		if _, err := s.HandShake(ctx, &PerftestDest{QPN: 2}); err != nil {
			errc <- err
			return
		}
		// Close at once with SO_LINGER 0: the kernel sends a reset, as it
		// does when unread data (our "done") sits in a closed socket.
		if err := sc.(*net.TCPConn).SetLinger(0); err != nil {
			errc <- err
			return
		}
		errc <- sc.Close()
	}()
	if err := NewPerftestConn(cc, true).Close(ctx, &PerftestDest{QPN: 1}); err != nil {
		t.Fatalf("Close after the peer reset the connection: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
