package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/internal/tooltest"
	"github.com/softroce/softroce/wire"
)

// rdmacmCapture is what testdata/captures/write_bw_rdmacm.pcap (ib_write_bw
// -R of perftest 4.5+0.17 on kernel rxe, at the repository's root) holds: the
// CM REQs and REPs, and the side channel's SEND payloads per direction.
type rdmacmCapture struct {
	reqs   []*mad.REQ
	reps   []*mad.REP
	client [][]byte // SEND payloads 10.77.0.12 -> 10.77.0.11 on the side-channel QP
	server [][]byte
	order  string // "c16 s16 ..." in wire order
}

func readRdmacmCapture(t testing.TB) *rdmacmCapture {
	t.Helper()
	return readCMPcap(t, filepath.Join(tooltest.CapturesDir, "write_bw_rdmacm.pcap"), netip.MustParseAddr("10.77.0.12"))
}

// readCMPcap reads a perftest -R session from a pcap; client is the
// client's IP address.
func readCMPcap(t testing.TB, path string, client netip.Addr) *rdmacmCapture {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := capture.ReadAll(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	type sendPkt struct {
		destQP     uint32
		fromClient bool
		payload    []byte
	}
	c := &rdmacmCapture{}
	var sends []sendPkt
	var reqs []*mad.REQ
	answered := map[uint32]bool{} // REQ LocalCommIDs a REP answered
	for _, cp := range pkts {
		if !cp.Src.Addr().Is4() {
			continue
		}
		var p wire.Packet
		if err := p.Parse(cp.Payload); err != nil {
			t.Fatal(err)
		}
		if p.BTH.DestQP == 1 {
			m, err := mad.ParseMessage(p.Payload)
			if err != nil {
				t.Fatal(err)
			}
			switch m := m.(type) {
			case *mad.REQ:
				reqs = append(reqs, m)
			case *mad.REP:
				if !answered[m.RemoteCommID] { // a resent REP once
					answered[m.RemoteCommID] = true
					c.reps = append(c.reps, m)
				}
			}
			continue
		}
		if p.BTH.Opcode == wire.RCSendOnly {
			sends = append(sends, sendPkt{p.BTH.DestQP, cp.Src.Addr() == client, bytes.Clone(p.Payload)})
		}
	}
	// The connections made: a REQ a REP answered, once (a client that came
	// before the server listened had its first REQ rejected, and a REQ may
	// be resent).
	seen := map[uint32]bool{}
	for _, m := range reqs {
		if answered[m.LocalCommID] && !seen[m.LocalCommID] {
			seen[m.LocalCommID] = true
			c.reqs = append(c.reqs, m)
		}
	}
	if len(c.reqs) == 0 || len(c.reps) == 0 {
		return c
	}
	// The side channel is the first connection: the client's QP from its
	// REQ, the server's from its REP.
	var sideRep *mad.REP
	for _, r := range c.reps {
		if r.RemoteCommID == c.reqs[0].LocalCommID {
			sideRep = r
		}
	}
	var order []string
	for _, sp := range sends {
		switch {
		case sp.fromClient && sideRep != nil && sp.destQP == sideRep.LocalQPN:
			c.client = append(c.client, sp.payload)
			order = append(order, "c"+strconv.Itoa(len(sp.payload)))
		case !sp.fromClient && sp.destQP == c.reqs[0].LocalQPN:
			c.server = append(c.server, sp.payload)
			order = append(order, "s"+strconv.Itoa(len(sp.payload)))
		}
	}
	c.order = strings.Join(order, " ")
	return c
}

// equalCMMsg compares side-channel messages, ignoring the padding of an
// address message (bytes 20..23: perftest leaves its stack garbage there,
// as the capture shows in some messages; softroce sends zeros).
func equalCMMsg(a, b []byte) bool {
	if len(a) != cmDestLen || len(b) != cmDestLen {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(a[:20], b[:20]) && bytes.Equal(a[24:], b[24:])
}

// fakePipe replays the peer's messages and records ours.
type fakePipe struct {
	in   [][]byte
	sent [][]byte
	log  []string
	self string
	peer string
}

func (f *fakePipe) send(_ context.Context, msg []byte) error {
	f.sent = append(f.sent, bytes.Clone(msg))
	f.log = append(f.log, f.self+strconv.Itoa(len(msg)))
	return nil
}

func (f *fakePipe) recv(_ context.Context, in []byte) (int, error) {
	if len(f.in) == 0 {
		return 0, io.EOF
	}
	m := f.in[0]
	f.in = f.in[1:]
	f.log = append(f.log, f.peer+strconv.Itoa(len(m)))
	return copy(in, m), nil
}

// The captured client's messages, decoded: its test QP address.
var capturedCMClientDest = oob.PerftestDest{OutReads: 1, QPN: 0x25, PSN: 0x91a325, RKey: 0x169f, VAddr: 0x556b92696000,
	GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77, 14: 0, 15: 12}}
var capturedCMServerDest = oob.PerftestDest{OutReads: 1, QPN: 0x25, PSN: 0xba3886, RKey: 0x157e, VAddr: 0x55c9baba9000,
	GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77, 14: 0, 15: 11}}

// TestPerftestCMCaptureDest checks the 56-byte address message against
// the captured ones, both ways.
func TestPerftestCMCaptureDest(t *testing.T) {
	c := readRdmacmCapture(t)
	for _, x := range []struct {
		msgs [][]byte
		d    oob.PerftestDest
	}{{c.client, capturedCMClientDest}, {c.server, capturedCMServerDest}} {
		var addrs int
		for _, m := range x.msgs {
			if len(m) != cmDestLen || bytes.Equal(m, make([]byte, cmDestLen)) {
				continue
			}
			addrs++
			if got := appendCMDest(nil, &x.d, 1); !equalCMMsg(got, m) {
				t.Errorf("encoded\n%x\ncaptured\n%x", got, m)
			}
			d, gi, err := parseCMDest(m)
			if err != nil || gi != 1 {
				t.Fatalf("parse: %v, gid index %d", err, gi)
			}
			if diff := cmp.Diff(x.d, d); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
		}
		if addrs != 5 { // 3 before the traffic, 1 before the report, 1 closing
			t.Errorf("%d address messages, want 5", addrs)
		}
	}
}

// TestPerftestCMCaptureSession replays the captured server's messages to
// a client cmSide running write_bw's session (and the client's to a
// server), and compares every message sent with the capture's, byte for
// byte (the BW report's values are the captured ones).
func TestPerftestCMCaptureSession(t *testing.T) {
	c := readRdmacmCapture(t)
	if c.order != cmWriteBWOrder {
		t.Fatalf("capture order\n%s\nwant\n%s", c.order, cmWriteBWOrder)
	}
	rep := func(msgs [][]byte) oob.BWReport {
		m := msgs[len(msgs)-6:]
		return oob.BWReport{Size: binary.BigEndian.Uint64(m[0]), Iters: binary.BigEndian.Uint64(m[1]),
			BWPeak: math.Float64frombits(binary.BigEndian.Uint64(m[2])), BWAvg: math.Float64frombits(binary.BigEndian.Uint64(m[3])),
			MsgRateAvg: math.Float64frombits(binary.BigEndian.Uint64(m[4]))}
	}
	if r := rep(c.client); r.Size != 4096 || r.Iters != 20 {
		t.Fatalf("captured client report %+v", r)
	}
	for _, client := range []bool{true, false} {
		t.Run(map[bool]string{true: "client", false: "server"}[client], func(t *testing.T) {
			fp := &fakePipe{in: c.server, self: "c", peer: "s"}
			want, local, peerRep := c.client, capturedCMClientDest, rep(c.client)
			if !client {
				fp = &fakePipe{in: c.client, self: "s", peer: "c"}
				want, local, peerRep = c.server, capturedCMServerDest, rep(c.server)
			}
			ctx := context.Background()
			s := newCMSide(fp, client, 1)
			sys, mtu, err := s.Setup(ctx, oob.SysData{CycleBuffer: cycleBuffer, CacheLineSize: cacheLine}, 3)
			if err != nil || mtu != 3 || sys.CycleBuffer != 4096 || sys.CacheLineSize != 64 {
				t.Fatalf("Setup: %v %v %v", sys, mtu, err)
			}
			var zero oob.PerftestDest
			for range 2 { // around the traffic connection
				if _, err := s.HandShake(ctx, &zero); err != nil {
					t.Fatal(err)
				}
			}
			rem, err := s.Connect(ctx, []oob.PerftestDest{local}, func([]oob.PerftestDest) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			wantRem := capturedCMServerDest
			if !client {
				wantRem = capturedCMClientDest
			}
			if diff := cmp.Diff(wantRem, rem[0]); diff != "" {
				t.Errorf("remote (-want +got):\n%s", diff)
			}
			if _, err := s.HandShake(ctx, &local); err != nil {
				t.Fatal(err)
			}
			got, err := s.ExchangeBWReport(ctx, peerRep)
			if err != nil {
				t.Fatal(err)
			}
			if other := rep(map[bool][][]byte{true: c.server, false: c.client}[client]); got != other {
				t.Errorf("report %+v, want %+v", got, other)
			}
			if err := s.Close(ctx, &local); err != nil {
				t.Fatal(err)
			}
			if len(fp.in) != 0 {
				t.Errorf("%d captured messages left", len(fp.in))
			}
			if l := strings.Join(fp.log, " "); l != cmWriteBWOrder {
				t.Errorf("order\n%s\nwant\n%s", l, cmWriteBWOrder)
			}
			if len(fp.sent) != len(want) {
				t.Fatalf("%d messages sent, want %d", len(fp.sent), len(want))
			}
			for i := range want {
				if !equalCMMsg(fp.sent[i], want[i]) {
					t.Errorf("message %d:\n%x\ncaptured\n%x", i, fp.sent[i], want[i])
				}
			}
		})
	}
}

// cmWriteBWOrder is the captured write_bw -R side channel: the SEND sizes
// of client (c) and server (s) in order.
const cmWriteBWOrder = "c16 s16 c4 s4 c4 s4 c2 s2 c56 s56 c56 s56 c56 s56 c56 s56 c56 s56 c56 s56 c8 s8 c8 s8 c8 s8 c8 s8 c8 s8 c56 s56"

// TestPerftestCMCaptureParams checks the connection parameters perftest
// gives rdma_cm (side channel and test QP) against the captured REQs/REPs.
func TestPerftestCMCaptureParams(t *testing.T) {
	c := readRdmacmCapture(t)
	if len(c.reqs) != 2 || len(c.reps) != 2 {
		t.Fatalf("%d REQs, %d REPs, want 2 each", len(c.reqs), len(c.reps))
	}
	cfg := &config{tool: tools[1], rdmaCM: true, conn: "RC", numQP: 1, outReads: -1, txDepth: -1, rxDepth: -1, cqMod: -1,
		iters: 20, itersSet: true, size: 4096, sizeSet: true, atomicType: "FETCH_AND_ADD", qpTimeout: 14, ibPort: 1, gidx: 1}
	if msg := cfg.finish(); msg != "" {
		t.Fatal(msg)
	}
	for i, p := range [...]struct{ rr, id, retry, rnr uint8 }{
		{cmCommParam(7).ResponderResources, cmCommParam(7).InitiatorDepth, cmCommParam(7).RetryCount, cmCommParam(7).RNRRetryCount},
		{cfg.cmParam().ResponderResources, cfg.cmParam().InitiatorDepth, cfg.cmParam().RetryCount, cfg.cmParam().RNRRetryCount},
	} {
		q, r := c.reqs[i], c.reps[i]
		if q.ResponderResources != p.rr || q.InitiatorDepth != p.id || q.RetryCount != p.retry || q.RNRRetryCount != p.rnr {
			t.Errorf("connection %d: REQ rr %d id %d retry %d rnr %d, ours %+v", i, q.ResponderResources, q.InitiatorDepth,
				q.RetryCount, q.RNRRetryCount, p)
		}
		if r.ResponderResources != p.rr || r.InitiatorDepth != p.id || r.RNRRetryCount != p.rnr {
			t.Errorf("connection %d: REP rr %d id %d rnr %d, ours %+v", i, r.ResponderResources, r.InitiatorDepth, r.RNRRetryCount, p)
		}
		if ps, port, ok := mad.ParseServiceID(q.ServiceID); !ok || ps != mad.PortSpaceTCP || port != oob.DefaultPort {
			t.Errorf("connection %d: service ID %#x, want TCP port %d", i, q.ServiceID, oob.DefaultPort)
		}
		_, user, err := mad.ParseCMAHeader(q.PrivateData)
		if err != nil || !bytes.Equal(user, make([]byte, len(user))) {
			t.Errorf("connection %d: REQ user private data %x (%v), want none", i, user, err)
		}
		if !bytes.Equal(r.PrivateData, make([]byte, len(r.PrivateData))) {
			t.Errorf("connection %d: REP private data %x, want none", i, r.PrivateData)
		}
	}
	// read_bw and atomic_bw ask for their outstanding reads both ways.
	rd := &config{tool: tools[2], outReads: 16}
	if p := rd.cmParam(); p.ResponderResources != 16 || p.InitiatorDepth != 16 || p.RetryCount != 7 || p.RNRRetryCount != 7 {
		t.Errorf("read_bw param %+v", p)
	}
}

// FuzzParseCMDest: any 56 bytes decode, and what they decode to
// re-encodes to a message that decodes the same.
func FuzzParseCMDest(f *testing.F) {
	f.Add(appendCMDest(nil, &capturedCMClientDest, 1))
	f.Add(make([]byte, cmDestLen))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, gi, err := parseCMDest(b)
		if err != nil {
			if len(b) >= cmDestLen {
				t.Fatalf("%d bytes refused: %v", len(b), err)
			}
			return
		}
		d2, gi2, err := parseCMDest(appendCMDest(nil, &d, gi))
		if err != nil || d2 != d || gi2 != gi {
			t.Fatalf("round trip: %+v %d -> %+v %d (%v)", d, gi, d2, gi2, err)
		}
	})
}

// TestPerftestRdmaCMBinary runs each benchmark with -R as two processes on
// loopback: the side channel and the test QP are rdma_cm connections to
// the server's port -p; the banner says so and the addresses print without
// RKey/VAddr, as perftest's.
func TestPerftestRdmaCMBinary(t *testing.T) {
	bin := tooltest.Binary(t)
	for _, tc := range []struct {
		tool, title string
		args        []string
		size, iters int
		serverRes   bool
	}{
		{"write_bw", "RDMA_Write BW Test", []string{"-s", "4096", "-n", "20"}, 4096, 20, true},
		{"read_bw", "RDMA_Read BW Test", []string{"-s", "4096", "-n", "20"}, 4096, 20, true},
		{"send_bw", "Send BW Test", []string{"-s", "2048", "-n", "20"}, 2048, 20, true},
		{"atomic_bw", "Atomic FETCH_AND_ADD BW Test", []string{"-n", "20"}, 8, 20, true},
		{"write_lat", "RDMA_Write Latency Test", []string{"-s", "64", "-n", "10"}, 64, 10, true},
		{"send_lat", "Send Latency Test", []string{"-s", "64", "-n", "10"}, 64, 10, true},
		{"read_lat", "RDMA_Read Latency Test", []string{"-s", "64", "-n", "10"}, 64, 10, false},
		{"atomic_lat", "Atomic FETCH_AND_ADD Latency Test", []string{"-n", "10"}, 8, 10, false},
		{"write_bw", "RDMA_Write BW Test", []string{"-s", "1000", "-n", "20", "-q", "3"}, 1000, 60, true}, // #iterations: -n × -q, as perftest
		{"read_bw", "RDMA_Read BW Test", []string{"-s", "8192", "-n", "10", "-q", "2", "-o", "4", "-e"}, 8192, 20, true},
		{"send_bw", "Send BW Test", []string{"-s", "512", "-n", "20", "-q", "2", "-e"}, 512, 40, true},
		// -z: only the side channel over rdma_cm, the QPs connected as without it.
		{"write_bw", "RDMA_Write BW Test", []string{"-z", "-s", "4096", "-n", "20"}, 4096, 20, true},
		{"send_lat", "Send Latency Test", []string{"-z", "-c", "UC", "-s", "64", "-n", "10"}, 64, 10, true},
	} {
		t.Run(tc.tool+strings.Join(tc.args, ""), func(t *testing.T) {
			sa, ca := tooltest.LoopPair()
			port := strconv.Itoa(tooltest.FreeTCPPort(t))
			z := tc.args[0] == "-z"
			flag := []string{"-R"}
			if z {
				flag = nil
			}
			pcap := filepath.Join(t.TempDir(), "c.pcap")
			s, c := tooltest.RunPair(t, 60*time.Second,
				append(append([]string{bin, tc.tool, "-d", sa, "-p", port}, flag...), tc.args...),
				append(append(append([]string{bin, tc.tool, "-d", ca, "-p", port, "--pcap", pcap}, flag...), tc.args...), sa))
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", s, c)
			}
			if tc.tool == "write_bw" && !z && len(tc.args) == 4 {
				// On the wire as the captured ib_write_bw -R: the same CM
				// parameters and the same side-channel messages.
				got, want := readCMPcap(t, pcap, netip.MustParseAddr(ca)), readRdmacmCapture(t)
				// Per direction: the --pcap tee may record a SEND after the
				// answer it provoked.
				sizes := func(ms [][]byte) (out []int) {
					for _, m := range ms {
						out = append(out, len(m))
					}
					return out
				}
				if diff := cmp.Diff(sizes(want.client), sizes(got.client)); diff != "" {
					t.Errorf("client's side-channel messages (-captured +ours):\n%s", diff)
				}
				if diff := cmp.Diff(sizes(want.server), sizes(got.server)); diff != "" {
					t.Errorf("server's side-channel messages (-captured +ours):\n%s", diff)
				}
				for i, m := range got.client[:3] { // version, system data (the MTU is loopback's)
					if !bytes.Equal(m, want.client[i]) {
						t.Errorf("client message %d: %x, captured %x", i, m, want.client[i])
					}
				}
				if len(got.reqs) != 2 || len(got.reps) != 2 {
					t.Fatalf("%d REQs, %d REPs, want 2 each", len(got.reqs), len(got.reps))
				}
				for i := range got.reqs {
					g, w := got.reqs[i], want.reqs[i]
					if g.ServiceID != w.ServiceID-uint64(oob.DefaultPort)+uint64(tooltest.Atoi(t, port)) || g.ResponderResources != w.ResponderResources ||
						g.InitiatorDepth != w.InitiatorDepth || g.RetryCount != w.RetryCount || g.RNRRetryCount != w.RNRRetryCount ||
						g.TransportType != w.TransportType || g.SRQ != w.SRQ {
						t.Errorf("REQ %d: %+v\ncaptured %+v", i, g, w)
					}
					_, gu, _ := mad.ParseCMAHeader(g.PrivateData)
					if !bytes.Equal(gu, make([]byte, len(gu))) {
						t.Errorf("REQ %d private data %x", i, gu)
					}
					gp, wp := got.reps[i], want.reps[i]
					if gp.ResponderResources != wp.ResponderResources || gp.InitiatorDepth != wp.InitiatorDepth ||
						gp.RNRRetryCount != wp.RNRRetryCount || !bytes.Equal(gp.PrivateData, wp.PrivateData) {
						t.Errorf("REP %d: %+v\ncaptured %+v", i, gp, wp)
					}
				}
			}
			cmLines := " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n" + resultLine
			waiting := " Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP\n" + resultLine
			if z {
				cmLines = " rdma_cm QPs\t : OFF\n Data ex. method : rdma_cm\n" + resultLine
				waiting = ""
			}
			if !strings.HasPrefix(s.Stdout, waitingBanner+resultLine+"                    "+tc.title+"\n") ||
				!strings.Contains(s.Stdout, cmLines+waiting+" local address: ") {
				t.Errorf("server banner:\n%s", s.Stdout)
			}
			if !strings.HasPrefix(c.Stdout, resultLine+"                    "+tc.title+"\n") ||
				!strings.Contains(c.Stdout, cmLines+" local address: ") {
				t.Errorf("client banner:\n%s", c.Stdout)
			}
			lat := strings.Contains(tc.tool, "lat")
			for _, x := range []struct {
				who        string
				r          tooltest.ProcResult
				self, peer string
				results    bool
			}{{"server", s, sa, ca, tc.serverRes}, {"client", c, ca, sa, true}} {
				tooltest.MustMatch(t, x.who, x.r,
					`(?m)^ local address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN 0x[0-9a-f]{1,6}$`,
					`(?m)^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:`+regexp.QuoteMeta(strings.ReplaceAll(tooltest.PtGIDTail(x.self), ".", ":"))+`$`,
					`(?m)^ remote address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN 0x[0-9a-f]{1,6}$`,
					`(?m)^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:`+regexp.QuoteMeta(strings.ReplaceAll(tooltest.PtGIDTail(x.peer), ".", ":"))+`$`)
				if !x.results {
					continue
				}
				if lat {
					tooltest.MustMatch(t, x.who, x.r, fmt.Sprintf(latLineRE, tc.size, tc.iters))
				} else {
					tooltest.MustMatch(t, x.who, x.r, fmt.Sprintf(bwLineRE, tc.size, tc.iters))
				}
				if !strings.HasSuffix(x.r.Stdout, resultLine) {
					t.Errorf("%s: output does not end with the result line:\n%s", x.who, x.r.Stdout)
				}
			}
		})
	}
}

// TestPerftestRdmaCMRefused: what softroce's -R does not do is refused
// with a message, before any connection.
func TestPerftestRdmaCMRefused(t *testing.T) {
	for _, args := range [][]string{{"-R", "-c", "UC"}, {"-R", "-c", "UD"}} {
		var o, e strings.Builder
		if code := runPerftest(tools[0], args, &o, &e); code != cli.ExitUsage || !strings.Contains(e.String(), "-R (rdma_cm)") {
			t.Errorf("%q: exit %d, stderr %q", args, code, e.String())
		}
	}
}

// TestPerftestCMOutputMatchesCapture prints, in runConfig's order, what a -R
// run of write_bw prints with the captured run's values, and compares it
// with ib_write_bw -R's output over kernel rxe, byte for byte.
func TestPerftestCMOutputMatchesCapture(t *testing.T) {
	for _, side := range []string{"server", "client"} {
		t.Run(side, func(t *testing.T) {
			c := &config{tool: tools[1], ibPort: 1, numQP: 1, gidx: 1, conn: "RC", iters: 20, itersSet: true, size: 4096,
				sizeSet: true, rdmaCM: true, atomicType: "FETCH_AND_ADD", txDepth: -1, rxDepth: -1, cqMod: -1, outReads: -1, qpTimeout: 14}
			local, remote := capturedCMServerDest, capturedCMClientDest
			if side == "client" {
				c.server = "10.77.0.11"
				local, remote = remote, local
			}
			if msg := c.finish(); msg != "" {
				t.Fatal(msg)
			}
			var b strings.Builder
			if c.isServer() {
				b.WriteString(waitingBanner)
			}
			c.printBanner(&b, "rxe0", 3)
			if c.isServer() {
				printCMWaiting(&b)
			}
			c.printDest(&b, "local", &local)
			c.printDest(&b, "remote", &remote)
			b.WriteString(resultLine)
			c.printResultHeader(&b)
			c.printResult(&b, sizeResult{bw: oob.BWReport{Size: 4096, Iters: 20, BWPeak: 0.40, BWAvg: 0.40, MsgRateAvg: 0.000103}})
			b.WriteString(resultLine)
			want, err := os.ReadFile(filepath.Join("testdata", "perftest_write_bw_rdmacm_"+side+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(b.String(), "\n")); d != "" {
				t.Errorf("(-perftest +softroce):\n%s", d)
			}
		})
	}
}

// shortCMTimeout makes the CM of the tools run in this process resend an
// unanswered MAD after 100 ms, not ib_cm's 6.1 s: a REQ that reaches a
// device whose CM is not attached yet is lost, and an in-process client
// and server start together.
func shortCMTimeout(t *testing.T) {
	old := toolkit.CMConfig
	toolkit.CMConfig = &cm.Config{Timeout: 100 * time.Millisecond}
	t.Cleanup(func() { toolkit.CMConfig = old })
}

// TestPerftestRdmaCMClientFirst: a client started before the server keeps
// asking until the server is up: while the server's device is not up its
// REQs are lost and the CM resends them; while the device's CM runs but
// nothing listens they are rejected and the client retries. In process,
// with the tools' CM resending every 100 ms rather than ib_cm's 6.1 s.
func TestPerftestRdmaCMClientFirst(t *testing.T) {
	shortCMTimeout(t)
	sa, ca := tooltest.LoopPair()
	port := strconv.Itoa(tooltest.FreeTCPPort(t))
	args := []string{"-R", "-p", port, "-n", "10"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := openLoopDevice(t, "cli0", ca)
	var so, co strings.Builder
	done := make(chan error, 1)
	go func() {
		err := Run(ctx, cli, "send_lat", append(args, sa), &co)
		if err != nil {
			cancel() // the server's Run waits for nothing more
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // REQs to no device: lost, resent
	srv := openLoopDevice(t, "srv0", sa)
	ag, err := cm.Attach(srv, toolkit.AgentConfig())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // REQs to a CM with no listener: rejected, retried
	if err := ag.Close(); err != nil {
		t.Fatal(err)
	}
	serr := Run(ctx, srv, "send_lat", args, &so)
	if cerr := <-done; cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, co.String(), serr, so.String())
	}
	if re := fmt.Sprintf(latLineRE, 2, 10); !regexp.MustCompile(re).MatchString(co.String()) {
		t.Errorf("client output does not match %q:\n%s", re, co.String())
	}
}
