package verbs

// Replays of captures of the Linux kernel's rdma_rxe (the repository's
// testdata/captures; see its README for the tool command lines). softroce
// plays the server (10.77.0.11): every packet the client sent is fed to a
// device, whose ICRC check runs in full against the captured IP header, and every response softroce's responder emits (ACK,
// NAK, READ response, ATOMIC ACK) must match the kernel's byte for byte,
// ICRC aside (it covers the IPv4 Identification, which differs).

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

type capPkt struct {
	src, dst netip.AddrPort
	ipHdr    []byte
	roce     []byte
	p        wire.Packet
}

var (
	serverIP = netip.MustParseAddr("10.77.0.11")
	clientIP = netip.MustParseAddr("10.77.0.12")
)

// readCapture returns the RoCEv2 packets of a capture in the repository's
// testdata/captures.
func readCapture(t *testing.T, name string) []capPkt {
	f, err := os.Open(filepath.Join("..", "testdata", "captures", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := capture.ReadAll(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []capPkt
	for _, cp := range pkts {
		if !cp.Src.Addr().Is4() {
			continue
		}
		c := capPkt{src: cp.Src, dst: cp.Dst, ipHdr: cp.IPHdr, roce: cp.Payload}
		if err := c.p.Parse(c.roce); err != nil {
			t.Fatalf("%s: captured packet does not parse: %v", name, err)
		}
		out = append(out, c)
	}
	return out
}

// forceKey gives mr the key and address the kernel's MR had.
func forceKey(d *Device, mr *MR, key uint32, iova uint64) {
	d.keys.mu.Lock()
	d.keys.mrs.set(mr.index, nil)
	mr.index = key >> 8
	d.keys.mrs.set(mr.index, mr)
	d.keys.mrs.next = max(d.keys.mrs.next, mr.index+1)
	d.keys.mu.Unlock()
	mr.mu.Lock()
	mr.key, mr.iova = key, iova
	mr.mu.Unlock()
}

func TestReplayKernelCaptures(t *testing.T) {
	for _, c := range []struct {
		file string
		typ  QPType
		recv int // receive completions expected (the client's SEND messages)
	}{
		{"rc_pingpong.pcap", QPTypeRC, 10},
		{"rc_pingpong_small.pcap", QPTypeRC, 5},
		{"write_bw.pcap", QPTypeRC, 0},
		{"write_lat.pcap", QPTypeRC, 0},
		{"read_bw.pcap", QPTypeRC, 0},
		{"read_lat.pcap", QPTypeRC, 0},
		{"send_bw.pcap", QPTypeRC, 50},
		{"send_lat.pcap", QPTypeRC, 20},
		{"atomic_bw.pcap", QPTypeRC, 0},
		{"atomic_lat.pcap", QPTypeRC, 0},
		{"uc_pingpong.pcap", QPTypeUC, 10},
		{"ud_pingpong.pcap", QPTypeUD, 10},
	} {
		t.Run(c.file, func(t *testing.T) { replay(t, c.file, c.typ, c.recv) })
	}
}

func replay(t *testing.T, file string, typ QPType, wantRecv int) {
	pkts := readCapture(t, file)
	// Find the QPs, the client's first request PSN and the memory the client touches.
	var srvQPN, cliQPN, firstPSN, qkey uint32
	var rkey uint32
	var lo, hi uint64 = ^uint64(0), 0
	var srvSport uint16
	haveFirst := false
	for _, c := range pkts {
		m := c.p.Mask
		if c.src.Addr() == clientIP && m&wire.IsRequest != 0 {
			srvQPN = c.p.BTH.DestQP
			if !haveFirst {
				firstPSN, haveFirst = c.p.BTH.PSN, true
			}
			if m&wire.HasDETH != 0 {
				qkey = c.p.DETH.QKey
			}
			var va, n uint64
			switch {
			case m&wire.HasRETH != 0:
				va, n, rkey = c.p.RETH.VA, uint64(c.p.RETH.Length), c.p.RETH.RKey
			case m&wire.HasAtomicETH != 0:
				va, n, rkey = c.p.AtomicETH.VA, 8, c.p.AtomicETH.RKey
			}
			if n > 0 {
				lo, hi = min(lo, va), max(hi, va+n)
			}
		}
		if c.src.Addr() == serverIP {
			cliQPN = c.p.BTH.DestQP
			srvSport = c.src.Port()
		}
	}
	if typ == QPTypeUD {
		for _, c := range pkts {
			if c.src.Addr() == serverIP {
				cliQPN = c.p.DETH.SrcQP
			}
		}
	}
	ea, eb, err := pipe.New(pipe.Config{Addr: netip.AddrPortFrom(serverIP, 4791), QueueLen: 1 << 14},
		pipe.Config{Addr: netip.AddrPortFrom(clientIP, 4791)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(ea, &Config{MAC: [6]byte{0x52, 0x54, 0, 0x77, 0, 0x11}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if g := d.gids[0]; g.String() != "fe80::5054:ff:fe77:11" {
		t.Errorf("GID 0 %v, want fe80::5054:ff:fe77:11 as the kernel's", g)
	}
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(4096, nil, nil)
	srvQP := &QP{}
	// Create QPs until the captured QPN is reached (kernel numbering starts at 0x11 too).
	for srvQP.qpn != srvQPN {
		srvQP, err = pd.CreateQP(&QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 1024}})
		if err != nil || srvQP.qpn > srvQPN {
			t.Fatalf("cannot get QPN %#x: %v", srvQPN, err)
		}
	}
	buf := make([]byte, max(int(hi-lo), 1<<16))
	mr, _ := pd.RegMR(buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	if hi > lo {
		forceKey(d, mr, rkey, lo)
	}
	// Seed server memory with what the kernel returned: READ response
	// payloads and the first original value of each atomic target.
	seeded := map[uint64]bool{}
	var reqs []capPkt
	for _, c := range pkts {
		if c.src.Addr() == clientIP && c.p.Mask&(wire.IsRead|wire.IsAtomic) != 0 {
			reqs = append(reqs, c)
		}
	}
	for _, c := range pkts {
		if c.src.Addr() != serverIP {
			continue
		}
		m := c.p.Mask
		if m&wire.IsReadResponse != 0 && len(c.p.Payload) > 0 {
			for _, r := range reqs {
				if r.p.Mask&wire.IsRead == 0 {
					continue
				}
				k := int(wire.PSNDiff(c.p.BTH.PSN, r.p.BTH.PSN))
				if k >= 0 && k*1024 < int(r.p.RETH.Length) {
					copy(buf[r.p.RETH.VA-lo+uint64(k)*1024:], c.p.Payload)
					break
				}
			}
		}
		if c.p.BTH.Opcode == wire.RCAtomicAcknowledge {
			for _, r := range reqs {
				if r.p.BTH.PSN == c.p.BTH.PSN && r.p.Mask&wire.IsAtomic != 0 && !seeded[r.p.AtomicETH.VA] {
					seeded[r.p.AtomicETH.VA] = true
					binary.NativeEndian.PutUint64(buf[r.p.AtomicETH.VA-lo:], c.p.AtomicAckETH.Orig)
				}
			}
		}
	}
	peer := &side{qp: &QP{qpn: cliQPN}, dev: &Device{gids: makeGIDs(clientIP, [6]byte{})}, port: 4791}
	o := pairOpts{typ: typ, pmtu: wire.MTU1024}
	defaults(&o)
	connect(t, &side{qp: srvQP}, peer, o)
	srvQP.mu.Lock()
	srvQP.resp.ePSN = firstPSN
	srvQP.attr.QKey = qkey
	srvQP.attr.MaxDestRdAtomic = 16
	srvQP.mu.Unlock()
	if typ != QPTypeUD && srvQP.SourcePort() != srvSport {
		t.Errorf("UDP source port %d, kernel used %d", srvQP.SourcePort(), srvSport)
	}
	// Each receive WQE has a buffer of its own, so every message's landing
	// place can be checked.
	const nRecv, recvStride = 512, 8192
	rbuf := make([]byte, nRecv*recvStride)
	rmr, err := pd.RegMR(rbuf, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < nRecv; i++ {
		if _, err := srvQP.PostRecv([]RecvWR{{WRID: uint64(i), SGList: []SGE{{Addr: rmr.Addr() + uint64(i*recvStride), Length: recvStride, LKey: rmr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The memory the client's requests should leave: WRITE payloads at
	// their addresses, atomics applied in order; SEND messages in order.
	expect := append([]byte(nil), buf...)
	var msgs [][]byte
	var msgIP [][]byte // the IP header of each message's first packet (UD: the GRH)
	var wVA uint64
	for _, c := range pkts {
		m := c.p.Mask
		if c.src.Addr() != clientIP || m&wire.IsRequest == 0 {
			continue
		}
		switch {
		case m&wire.IsSend != 0:
			if m&(wire.First|wire.Only) != 0 {
				msgs = append(msgs, nil)
				msgIP = append(msgIP, c.ipHdr)
			}
			msgs[len(msgs)-1] = append(msgs[len(msgs)-1], c.p.Payload...)
		case m&wire.IsWrite != 0:
			if m&(wire.First|wire.Only) != 0 {
				wVA = c.p.RETH.VA
			}
			copy(expect[wVA-lo:], c.p.Payload)
			wVA += uint64(len(c.p.Payload))
		case m&wire.IsAtomic != 0:
			w := expect[c.p.AtomicETH.VA-lo:]
			v := binary.NativeEndian.Uint64(w)
			if c.p.BTH.Opcode == wire.RCCompareSwap {
				if v == c.p.AtomicETH.Compare {
					v = c.p.AtomicETH.SwapAdd
				}
			} else {
				v += c.p.AtomicETH.SwapAdd
			}
			binary.NativeEndian.PutUint64(w, v)
		}
	}
	if len(msgs) != wantRecv {
		t.Fatalf("the capture holds %d SEND messages, the table says %d", len(msgs), wantRecv)
	}
	// Collect what softroce sends.
	var mu sync.Mutex
	var got [][]byte
	go func() {
		pk := make([]link.Packet, 64)
		for i := range pk {
			pk[i].Buf = make([]byte, maxDatagram)
		}
		for {
			n, err := eb.ReadBatch(pk)
			if err != nil {
				return
			}
			mu.Lock()
			for _, p := range pk[:n] {
				got = append(got, append([]byte(nil), p.Bytes()...))
			}
			mu.Unlock()
		}
	}()
	defer eb.Close()
	var want [][]byte
	var wp wire.Packet
	for _, c := range pkts {
		if c.src.Addr() == clientIP {
			if c.p.Mask&wire.IsResponse != 0 {
				continue // the client's answers to server requests we do not replay
			}
			b := append([]byte(nil), c.roce...)
			lp := link.Packet{Buf: b, N: len(b), Src: c.src, Dst: c.dst, IPHdrLen: len(c.ipHdr)}
			copy(lp.IPHdr[:], c.ipHdr)
			before := d.stats.ICRCErrors.Load()
			d.input(&lp, &wp)
			if d.stats.ICRCErrors.Load() != before {
				t.Fatalf("ICRC of a kernel packet rejected (PSN %#x)", c.p.BTH.PSN)
			}
		} else if c.p.Mask&wire.IsResponse != 0 {
			want = append(want, c.roce)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("softroce sent %d responses, the kernel %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if !bytes.Equal(g[:len(g)-4], w[:len(w)-4]) {
			var gp, wp wire.Packet
			gp.Parse(g)
			wp.Parse(w)
			t.Fatalf("response %d differs:\n softroce %v psn %#x aeth %+v len %d\n kernel   %v psn %#x aeth %+v len %d",
				i, gp.BTH.Opcode, gp.BTH.PSN, gp.AETH, len(g), wp.BTH.Opcode, wp.BTH.PSN, wp.AETH, len(w))
		}
	}
	// Every SEND message completed a receive WQE, in order, and landed in
	// that WQE's buffer (UD: after the GRH, which carries the IPv4 header).
	var wcs []WC
	wc := make([]WC, 64)
	for k := cq.Poll(wc); k > 0; k = cq.Poll(wc) {
		wcs = append(wcs, wc[:k]...)
	}
	if len(wcs) != len(msgs) {
		t.Fatalf("%d completions, want %d receive completions", len(wcs), len(msgs))
	}
	for i, w := range wcs {
		hdr := 0
		if typ == QPTypeUD {
			hdr = grhLen
		}
		if w.Status != WCSuccess || w.Opcode != WCRecv || w.WRID != uint64(i) || int(w.ByteLen) != hdr+len(msgs[i]) {
			t.Fatalf("receive completion %d: %+v, want WRID %d, %d bytes", i, w, i, hdr+len(msgs[i]))
		}
		got := rbuf[i*recvStride:][:hdr+len(msgs[i])]
		if typ == QPTypeUD {
			var grh [grhLen]byte
			copy(grh[grhLen-len(msgIP[i]):], msgIP[i])
			if !bytes.Equal(got[:grhLen], grh[:]) {
				t.Fatalf("message %d: GRH % x, want % x", i, got[:grhLen], grh)
			}
		}
		if !bytes.Equal(got[hdr:], msgs[i]) {
			t.Fatalf("message %d (%d bytes) did not land in its receive buffer", i, len(msgs[i]))
		}
		if rest := rbuf[i*recvStride+hdr+len(msgs[i]) : (i+1)*recvStride]; !bytes.Equal(rest, make([]byte, len(rest))) {
			t.Fatalf("message %d: bytes written past its end", i)
		}
	}
	// WRITE and atomic targets hold what the client's requests imply.
	if !bytes.Equal(buf, expect) {
		i := 0
		for buf[i] == expect[i] {
			i++
		}
		t.Fatalf("server memory differs from the capture's WRITE/atomic effects at VA %#x", lo+uint64(i))
	}
	t.Logf("%d client packets replayed, %d responses identical to the kernel's", len(pkts)-len(want), len(want))
}
