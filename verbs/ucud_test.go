package verbs

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

func TestUCSendWrite(t *testing.T) {
	a, b := newPair(t, pairOpts{typ: QPTypeUC})
	for i, size := range []int{0, 10, 1024, 5000} {
		fill(a.buf[:size], byte(i))
		postRecv(t, b, uint64(i), 0, 8192)
		post(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSendWithImm, ImmData: uint32(i), Flags: SendSignaled, SGList: sge(a, 0, size)})
		wc := waitWC(t, b.rcq, 1, 5*time.Second)
		if wc[0].Status != WCSuccess || wc[0].ByteLen != uint32(size) || wc[0].Flags&WCWithImm == 0 || wc[0].ImmData != uint32(i) {
			t.Fatalf("%+v", wc[0])
		}
		mustEqual(t, b.buf[:size], a.buf[:size])
		if wc := waitWC(t, a.scq, 1, time.Second); wc[0].Status != WCSuccess {
			t.Fatalf("%+v", wc[0])
		}
		postRecv(t, b, 60, 0, 0)
		post(t, a.qp, SendWR{WRID: 50, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGList: sge(a, 0, size),
			RemoteAddr: b.mr.Addr() + 10000, RKey: b.mr.RKey()})
		waitWC(t, a.scq, 1, time.Second)
		if wc := waitWC(t, b.rcq, 1, 5*time.Second); wc[0].Opcode != WCRecvRDMAWithImm || wc[0].ByteLen != uint32(size) {
			t.Fatalf("%+v", wc[0])
		}
		mustEqual(t, b.buf[10000:10000+size], a.buf[:size])
	}
	// Reads are not UC operations.
	if _, err := a.qp.PostSend([]SendWR{{Opcode: WRRDMARead, SGList: sge(a, 0, 8)}}); err == nil {
		t.Fatal("UC accepted RDMA READ")
	}
}

func TestUCResync(t *testing.T) {
	// Drop the 2nd packet of the first message: the receiver drops the rest
	// of that message and takes the next one whole (docs/protocol.md §6.2).
	n := 0
	filter := func(p *link.Packet) pipe.Verdict {
		n++
		if n == 2 {
			return pipe.Drop
		}
		return pipe.Pass
	}
	a, b := newPair(t, pairOpts{typ: QPTypeUC, filterA: filter})
	postRecv(t, b, 1, 0, 8192)
	postRecv(t, b, 2, 8192, 8192)
	fill(a.buf[:3000], 1)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, SGList: sge(a, 0, 3000)})
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, SGList: sge(a, 0, 2000)})
	wc := waitWC(t, b.rcq, 1, 5*time.Second)
	if wc[0].WRID != 1 || wc[0].ByteLen != 2000 {
		t.Fatalf("%+v", wc[0])
	}
	mustEqual(t, b.buf[:2000], a.buf[:2000])
	if b.dev.Stats().DropUCResync.Load() == 0 {
		t.Fatal("no resync drops counted")
	}
}

func udPair(t *testing.T, srq bool) (*side, *side, *AH) {
	o := pairOpts{typ: QPTypeUD, srq: srq}
	ea, eb := newPipePair(t, &o)
	a, b := newPairOn(t, ea, eb, o)
	ah, err := a.pd.CreateAH(&AHAttr{IsGlobal: true, PortNum: 1, DstPort: b.port,
		GRH: GlobalRoute{DGID: b.dev.gids[1], SGIDIndex: 1, HopLimit: 64, TrafficClass: 0x10}})
	if err != nil {
		t.Fatal(err)
	}
	return a, b, ah
}

func TestUD(t *testing.T) {
	for _, srq := range []bool{false, true} {
		a, b, ah := udPair(t, srq)
		fill(a.buf[:1000], 5)
		postRecv(t, b, 1, 0, 2000)
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRSendWithImm, ImmData: 77, Flags: SendSignaled, SGList: sge(a, 0, 1000),
			AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111})
		wc := waitWC(t, b.rcq, 1, 5*time.Second)
		if wc[0].Status != WCSuccess || wc[0].ByteLen != 1040 || wc[0].SrcQP != a.qp.QPN() ||
			wc[0].Flags != WCWithGRH|WCWithImm || wc[0].ImmData != 77 || wc[0].SL != WCSLRoCEv2IPv4 {
			t.Fatalf("%+v", wc[0])
		}
		mustEqual(t, b.buf[40:1040], a.buf[:1000])
		// GRH area for IPv4: 20 zero bytes, then the IPv4 header.
		g := b.buf[:40]
		if !allZero(g[:20]) || g[20] != 0x45 || g[29] != 17 || g[21] != 0x10 ||
			netip.AddrFrom4([4]byte(g[32:36])) != a.dev.local.Addr() || netip.AddrFrom4([4]byte(g[36:40])) != b.dev.local.Addr() ||
			binary.BigEndian.Uint16(g[22:]) != uint16(20+8+wire.BTHLen+wire.DETHLen+4+1000+4) {
			t.Fatalf("GRH %x", g)
		}
		// Wrong Q_Key: dropped.
		postRecv(t, b, 2, 0, 2000)
		post(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, SGList: sge(a, 0, 10), AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x2222})
		// Too large for the MTU: silently succeeds (docs/protocol.md §6.1).
		post(t, a.qp, SendWR{WRID: 3, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 5000), AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111})
		wc = waitWC(t, a.scq, 2, 5*time.Second)
		if wc[1].WRID != 3 || wc[1].Status != WCSuccess {
			t.Fatalf("%+v", wc)
		}
		deadline := time.Now().Add(2 * time.Second)
		for b.dev.Stats().DropQKey.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if b.dev.Stats().DropQKey.Load() != 1 || b.rcq.Len() != 0 {
			t.Fatalf("qkey drops %d, completions %d", b.dev.Stats().DropQKey.Load(), b.rcq.Len())
		}
	}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

func TestSRQLimitAndRC(t *testing.T) {
	a, b := newPair(t, pairOpts{srq: true})
	srq := b.qp.srq
	for i := 0; i < 4; i++ {
		postRecv(t, b, uint64(i), i*1024, 1024)
	}
	if err := srq.Modify(SRQAttr{SRQLimit: 3}, SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, SGList: sge(a, 0, 100)})
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, SGList: sge(a, 0, 100)})
	wc := waitWC(t, b.rcq, 2, 5*time.Second)
	if wc[0].WRID != 0 || wc[1].WRID != 1 {
		t.Fatalf("%+v", wc)
	}
	ctx, cancel := contextTimeout(2 * time.Second)
	defer cancel()
	for {
		ev, err := b.dev.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatal("no SRQ limit event:", err)
		}
		if ev.Type == EventSRQLimitReached {
			if ev.SRQ != srq || srq.Query().SRQLimit != 0 {
				t.Fatalf("%+v", ev)
			}
			break
		}
	}
	// Entering ERR does not flush SRQ WQEs (docs/protocol.md §5.9).
	b.qp.Modify(&QPAttr{QPState: QPStateErr}, QPAttrState)
	time.Sleep(10 * time.Millisecond)
	if n := b.rcq.Len(); n != 0 {
		t.Fatalf("%d completions after ERR with an SRQ", n)
	}
}
