package verbs

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// TestReplayKernelRequester plays the client of kernel captures: the work
// requests the client posted are rebuilt from its packets and posted to a
// softroce QP, the server's answers are fed back, and every request packet
// softroce sends must equal the kernel's byte for byte (ICRC aside).
func TestReplayKernelRequester(t *testing.T) {
	for _, c := range []struct {
		file string
		typ  QPType
	}{
		{"rc_pingpong.pcap", QPTypeRC},
		{"rc_pingpong_small.pcap", QPTypeRC},
		{"write_bw.pcap", QPTypeRC},
		{"read_bw.pcap", QPTypeRC},
		{"read_lat.pcap", QPTypeRC},
		{"send_bw.pcap", QPTypeRC},
		{"atomic_bw.pcap", QPTypeRC},
		{"atomic_lat.pcap", QPTypeRC},
		{"uc_pingpong.pcap", QPTypeUC},
		{"ud_pingpong.pcap", QPTypeUD},
	} {
		t.Run(c.file, func(t *testing.T) { replayClient(t, c.file, c.typ) })
	}
}

func replayClient(t *testing.T, file string, typ QPType) {
	pkts := readCapture(t, file)
	var reqs []capPkt
	var cliQPN, srvQPN uint32
	var sport uint16
	for _, c := range pkts {
		if c.src.Addr() == clientIP && c.p.Mask&wire.IsRequest != 0 {
			reqs = append(reqs, c)
			srvQPN = c.p.BTH.DestQP
			sport = c.src.Port()
		}
		if c.src.Addr() == serverIP {
			cliQPN = c.p.BTH.DestQP
		}
	}
	if typ == QPTypeUD {
		cliQPN = reqs[0].p.DETH.SrcQP
	}
	ea, eb, err := pipe.New(pipe.Config{Addr: netip.AddrPortFrom(clientIP, 4791), QueueLen: 1 << 14},
		pipe.Config{Addr: netip.AddrPortFrom(serverIP, 4791)})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := Open(ea, nil)
	defer d.Close()
	defer eb.Close()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(4096, nil, nil)
	qp := &QP{}
	for qp.qpn != cliQPN {
		qp, err = pd.CreateQP(&QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 1}})
		if err != nil || qp.qpn > cliQPN {
			t.Fatalf("cannot get QPN %#x: %v", cliQPN, err)
		}
	}
	buf := make([]byte, 16<<20)
	mr, _ := pd.RegMR(buf, AccessLocalWrite)
	peer := &side{qp: &QP{qpn: srvQPN}, dev: &Device{gids: makeGIDs(serverIP, [6]byte{})}, port: 4791}
	o := pairOpts{typ: typ, pmtu: wire.MTU1024, timeout: 31} // no retransmissions during the replay
	defaults(&o)
	connect(t, &side{qp: qp}, peer, o)
	qp.mu.Lock()
	qp.req.nextPSN = reqs[0].p.BTH.PSN
	qp.attr.MaxRdAtomic, qp.req.maxRdAtomic = 128, 128
	for _, c := range pkts {
		if c.src.Addr() == serverIP && c.p.Mask&wire.IsRequest != 0 {
			qp.resp.ePSN = c.p.BTH.PSN
			break
		}
	}
	qp.mu.Unlock()
	if typ != QPTypeUD && qp.SourcePort() != sport {
		t.Errorf("UDP source port %d, kernel used %d", qp.SourcePort(), sport)
	}
	// Receive buffers of their own (8 MiB on), one per WQE.
	const nRecv, recvBase, recvStride = 256, 8 << 20, 8192
	for i := 0; i < nRecv; i++ {
		if _, err := qp.PostRecv([]RecvWR{{WRID: uint64(i), SGList: []SGE{{Addr: mr.Addr() + recvBase + uint64(i*recvStride), Length: recvStride, LKey: mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	var ah *AH
	if typ == QPTypeUD {
		ah, _ = pd.CreateAH(&AHAttr{IsGlobal: true, PortNum: 1, GRH: GlobalRoute{DGID: GIDFromAddr(serverIP), SGIDIndex: 1, HopLimit: 64}})
	}
	// Rebuild the work requests.
	var wrs []SendWR
	var firstPSN []uint32 // of each WR's first packet
	off := 0
	var cur *SendWR
	for _, c := range reqs {
		m := c.p.Mask
		if m&(wire.First|wire.Only) != 0 {
			// Every WR signaled: its completion is checked below.
			wrs = append(wrs, SendWR{WRID: uint64(len(wrs)), Flags: SendSignaled, SGList: []SGE{{Addr: mr.Addr() + uint64(off), LKey: mr.LKey()}}})
			firstPSN = append(firstPSN, c.p.BTH.PSN)
			cur = &wrs[len(wrs)-1]
			switch {
			case m&wire.IsSend != 0:
				cur.Opcode = WRSend
			case m&wire.IsWrite != 0:
				cur.Opcode = WRRDMAWrite
				cur.RemoteAddr, cur.RKey = c.p.RETH.VA, c.p.RETH.RKey
			case m&wire.IsRead != 0:
				cur.Opcode = WRRDMARead
				cur.RemoteAddr, cur.RKey = c.p.RETH.VA, c.p.RETH.RKey
				cur.SGList[0].Length = c.p.RETH.Length
			case m&wire.IsAtomic != 0:
				cur.Opcode = WRAtomicFetchAndAdd
				cur.CompareAdd = c.p.AtomicETH.SwapAdd
				if c.p.BTH.Opcode == wire.RCCompareSwap {
					cur.Opcode = WRAtomicCmpAndSwp
					cur.CompareAdd, cur.Swap = c.p.AtomicETH.Compare, c.p.AtomicETH.SwapAdd
				}
				cur.RemoteAddr, cur.RKey = c.p.AtomicETH.VA, c.p.AtomicETH.RKey
				cur.SGList[0].Length = 8
			}
			if typ == QPTypeUD {
				cur.AH, cur.RemoteQPN, cur.RemoteQKey = ah, c.p.BTH.DestQP, c.p.DETH.QKey
			}
		}
		if m&wire.HasImmDt != 0 {
			cur.Opcode++ // SEND_WITH_IMM / RDMA_WRITE_WITH_IMM follow their base opcodes
			if cur.Opcode == WRSendWithImm-0 && m&wire.IsWrite != 0 {
				cur.Opcode = WRRDMAWriteWithImm
			}
			cur.ImmData = c.p.Imm
		}
		if c.p.BTH.SE {
			cur.Flags |= SendSolicited
		}
		if m&(wire.IsSend|wire.IsWrite) != 0 {
			copy(buf[off:], c.p.Payload)
			off += len(c.p.Payload)
			cur.SGList[0].Length += uint32(len(c.p.Payload))
		} else {
			off += int(cur.SGList[0].Length)
		}
		off = (off + 63) &^ 63
	}
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
				var w wire.Packet
				if w.Parse(p.Bytes()) == nil && w.Mask&wire.IsRequest != 0 {
					got = append(got, append([]byte(nil), p.Bytes()...))
				}
			}
			mu.Unlock()
		}
	}()
	if n, err := qp.PostSend(wrs); err != nil {
		t.Fatalf("posted %d of %d: %v", n, len(wrs), err)
	}
	waitN := func(n int) {
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			k := len(got)
			mu.Unlock()
			if k >= n {
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	// Feed the server's packets back in capture order, once softroce has
	// sent what the client had sent before each of them.
	sentBefore := 0
	var wp wire.Packet
	for _, c := range pkts {
		if c.src.Addr() == clientIP {
			if c.p.Mask&wire.IsRequest != 0 {
				sentBefore++
			}
			continue
		}
		waitN(sentBefore)
		b := append([]byte(nil), c.roce...)
		lp := link.Packet{Buf: b, N: len(b), Src: c.src, Dst: c.dst, IPHdrLen: len(c.ipHdr)}
		copy(lp.IPHdr[:], c.ipHdr)
		d.input(&lp, &wp)
	}
	waitN(len(reqs))
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(reqs) {
		t.Fatalf("softroce sent %d requests, the kernel %d", len(got), len(reqs))
	}
	for i, c := range reqs {
		g, w := got[i], c.roce
		if !bytes.Equal(g[:len(g)-4], w[:len(w)-4]) {
			var gp wire.Packet
			gp.Parse(g)
			t.Fatalf("request %d differs:\n softroce %v %+v len %d\n kernel   %v %+v len %d", i, gp.BTH.Opcode, gp.BTH, len(g),
				c.p.BTH.Opcode, c.p.BTH, len(w))
		}
	}
	// Every WR completed successfully, in order, and READ and atomic
	// results hold what the kernel's server answered; every SEND of the
	// server completed a receive WQE in order and landed in its buffer.
	var srvMsgs [][]byte
	readResp := map[uint32][]byte{}   // READ response payloads by PSN
	atomicOrig := map[uint32]uint64{} // ATOMIC ACK original values by PSN
	for _, c := range pkts {
		if c.src.Addr() != serverIP {
			continue
		}
		m := c.p.Mask
		switch {
		case m&wire.IsSend != 0:
			if m&(wire.First|wire.Only) != 0 {
				srvMsgs = append(srvMsgs, nil)
			}
			srvMsgs[len(srvMsgs)-1] = append(srvMsgs[len(srvMsgs)-1], c.p.Payload...)
		case m&wire.IsReadResponse != 0:
			readResp[c.p.BTH.PSN] = c.p.Payload
		case c.p.BTH.Opcode == wire.RCAtomicAcknowledge:
			atomicOrig[c.p.BTH.PSN] = c.p.AtomicAckETH.Orig
		}
	}
	wcOp := map[WROpcode]WCOpcode{WRSend: WCSend, WRSendWithImm: WCSend, WRRDMAWrite: WCRDMAWrite,
		WRRDMAWriteWithImm: WCRDMAWrite, WRRDMARead: WCRDMARead, WRAtomicFetchAndAdd: WCFetchAdd, WRAtomicCmpAndSwp: WCCompSwap}
	var sends, recvs []WC
	wc := make([]WC, 64)
	deadline := time.Now().Add(5 * time.Second)
	for len(sends) < len(wrs) || len(recvs) < len(srvMsgs) {
		k := cq.Poll(wc)
		for _, w := range wc[:k] {
			if w.Opcode&WCRecv != 0 {
				recvs = append(recvs, w)
			} else {
				sends = append(sends, w)
			}
		}
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d send and %d of %d receive completions", len(sends), len(wrs), len(recvs), len(srvMsgs))
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	if k := cq.Poll(wc); k != 0 {
		t.Fatalf("%d completions more than the capture implies: %+v", k, wc[:k])
	}
	for i, w := range sends {
		wr := &wrs[i]
		if w.Status != WCSuccess || w.WRID != uint64(i) || w.Opcode != wcOp[wr.Opcode] {
			t.Fatalf("completion %d: %+v, want WRID %d %v success", i, w, i, wr.Opcode)
		}
		dst := buf[wr.SGList[0].Addr-mr.Addr():][:wr.SGList[0].Length]
		switch wr.Opcode {
		case WRRDMARead:
			if w.ByteLen != wr.SGList[0].Length {
				t.Fatalf("READ %d: byte_len %d, want %d", i, w.ByteLen, wr.SGList[0].Length)
			}
			var want []byte
			for psn := firstPSN[i]; len(want) < len(dst); psn = wire.PSNAdd(psn, 1) {
				pl, ok := readResp[psn]
				if !ok {
					t.Fatalf("READ %d: no response with PSN %#x in the capture", i, psn)
				}
				want = append(want, pl...)
			}
			if !bytes.Equal(dst, want) {
				t.Fatalf("READ %d: the data read differs from the kernel's READ responses", i)
			}
		case WRAtomicFetchAndAdd, WRAtomicCmpAndSwp:
			orig, ok := atomicOrig[firstPSN[i]]
			if !ok {
				t.Fatalf("atomic %d: no ATOMIC ACK with PSN %#x in the capture", i, firstPSN[i])
			}
			if got := binary.NativeEndian.Uint64(dst); got != orig {
				t.Fatalf("atomic %d: original value %#x, the kernel answered %#x", i, got, orig)
			}
		}
	}
	for i, w := range recvs {
		msg := srvMsgs[i]
		hdr := 0
		if typ == QPTypeUD {
			hdr = grhLen
		}
		if w.Status != WCSuccess || w.WRID != uint64(i) || int(w.ByteLen) != hdr+len(msg) {
			t.Fatalf("receive completion %d: %+v, want WRID %d, %d bytes", i, w, i, hdr+len(msg))
		}
		if got := buf[recvBase+i*recvStride+hdr:][:len(msg)]; !bytes.Equal(got, msg) {
			t.Fatalf("server message %d did not land in its receive buffer", i)
		}
	}
	t.Logf("%d requests identical to the kernel's; %d WRs and %d receives completed as the capture says", len(reqs), len(sends), len(recvs))
}
