package verbs

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

func TestRCSendWrite(t *testing.T) {
	for _, size := range []int{0, 1, 100, 1024, 1025, 4096, 70000} {
		a, b := newPair(t, pairOpts{})
		fill(a.buf[:size], 3)
		postRecv(t, b, 7, 0, 1<<19)
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, size)})
		wc := waitWC(t, a.scq, 1, 5*time.Second)
		if wc[0].Status != WCSuccess || wc[0].Opcode != WCSend || wc[0].WRID != 1 {
			t.Fatalf("send wc %+v", wc[0])
		}
		wc = waitWC(t, b.rcq, 1, 5*time.Second)
		if wc[0].Status != WCSuccess || wc[0].Opcode != WCRecv || wc[0].ByteLen != uint32(size) || wc[0].WRID != 7 {
			t.Fatalf("recv wc %+v", wc[0])
		}
		mustEqual(t, b.buf[:size], a.buf[:size])

		// RDMA WRITE with immediate.
		fill(a.buf[:size], 9)
		postRecv(t, b, 8, 0, 16)
		post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, ImmData: 0xabcd,
			SGList: sge(a, 0, size), RemoteAddr: b.mr.Addr() + 1000, RKey: b.mr.RKey()})
		wc = waitWC(t, a.scq, 1, 5*time.Second)
		if wc[0].Status != WCSuccess || wc[0].Opcode != WCRDMAWrite {
			t.Fatalf("write wc %+v", wc[0])
		}
		wc = waitWC(t, b.rcq, 1, 5*time.Second)
		if wc[0].Status != WCSuccess || wc[0].Opcode != WCRecvRDMAWithImm || wc[0].ImmData != 0xabcd || wc[0].ByteLen != uint32(size) {
			t.Fatalf("write imm wc %+v", wc[0])
		}
		mustEqual(t, b.buf[1000:1000+size], a.buf[:size])

		// RDMA READ back into another area.
		post(t, a.qp, SendWR{WRID: 3, Opcode: WRRDMARead, Flags: SendSignaled,
			SGList: sge(a, 1<<19, size), RemoteAddr: b.mr.Addr() + 1000, RKey: b.mr.RKey()})
		wc = waitWC(t, a.scq, 1, 5*time.Second)
		if wc[0].Status != WCSuccess || wc[0].Opcode != WCRDMARead || wc[0].ByteLen != uint32(size) {
			t.Fatalf("read wc %+v", wc[0])
		}
		mustEqual(t, a.buf[1<<19:1<<19+size], a.buf[:size])
	}
}

func TestRCAtomics(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	binary.NativeEndian.PutUint64(b.buf[64:], 10)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGList: sge(a, 0, 8),
		RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 5})
	wc := waitWC(t, a.scq, 1, 5*time.Second)
	if wc[0].Status != WCSuccess || wc[0].Opcode != WCFetchAdd || binary.NativeEndian.Uint64(a.buf) != 10 ||
		binary.NativeEndian.Uint64(b.buf[64:]) != 15 {
		t.Fatalf("fetch add: wc %+v orig %d now %d", wc[0], binary.NativeEndian.Uint64(a.buf), binary.NativeEndian.Uint64(b.buf[64:]))
	}
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGList: sge(a, 8, 8),
		RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 15, Swap: 99})
	wc = waitWC(t, a.scq, 1, 5*time.Second)
	if wc[0].Status != WCSuccess || binary.NativeEndian.Uint64(a.buf[8:]) != 15 || binary.NativeEndian.Uint64(b.buf[64:]) != 99 {
		t.Fatalf("cmp swap: wc %+v", wc[0])
	}
	// A failing compare leaves memory alone.
	post(t, a.qp, SendWR{WRID: 3, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGList: sge(a, 8, 8),
		RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 1, Swap: 5})
	waitWC(t, a.scq, 1, 5*time.Second)
	if binary.NativeEndian.Uint64(b.buf[64:]) != 99 || binary.NativeEndian.Uint64(a.buf[8:]) != 99 {
		t.Fatal("failed compare changed memory")
	}
	// ATOMIC_WRITE and FLUSH.
	aw := SendWR{WRID: 4, Opcode: WRAtomicWrite, Flags: SendSignaled, RemoteAddr: b.mr.Addr() + 128, RKey: b.mr.RKey()}
	copy(aw.AtomicWrite[:], "8bytes!!")
	post(t, a.qp, aw)
	post(t, a.qp, SendWR{WRID: 5, Opcode: WRFlush, Flags: SendSignaled, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(),
		FlushType: wire.FlushGlobalVisibility, FlushLen: 4096})
	wc = waitWC(t, a.scq, 2, 5*time.Second)
	if wc[0].Status != WCSuccess || wc[0].Opcode != WCAtomicWrite || wc[1].Status != WCSuccess || wc[1].Opcode != WCFlush {
		t.Fatalf("atomic write/flush: %+v", wc)
	}
	if string(b.buf[128:136]) != "8bytes!!" {
		t.Fatalf("atomic write: %q", b.buf[128:136])
	}
}

// TestAckReqCadence: AckReq on every last packet and, inside a long
// message, on the 130th packet after the previous one (ackReqEvery: rxe
// counts the same way to 64, noack++ > 64).
func TestAckReqCadence(t *testing.T) {
	var acks []int
	n := 0
	filter := func(p *link.Packet) pipe.Verdict {
		var h wire.BTH
		h.Decode(p.Buf)
		if h.Opcode.Mask()&wire.IsRequest != 0 {
			n++
			if h.AckReq {
				acks = append(acks, n)
			}
		}
		return pipe.Pass
	}
	// Timeout 20 (4.3 s): a retransmit on a loaded machine would add
	// AckReqs of its own; this test is about the first transmission.
	a, b := newPair(t, pairOpts{filterA: filter, pmtu: wire.MTU256, timeout: 20})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 200*256), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitWC(t, a.scq, 1, 20*time.Second)
	a.qp.mu.Lock() // the filter ran under the QP lock
	defer a.qp.mu.Unlock()
	if want := []int{130, 200}; !slices.Equal(acks, want) {
		t.Fatalf("AckReq on packets %v, want %v", acks, want)
	}
}
