package verbs

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// TestFence: a WR with IBV_SEND_FENCE is not sent before earlier READs
// completed; without the fence it follows the READ request at once (docs/protocol.md §5.4).
func TestFence(t *testing.T) {
	for _, fence := range []bool{false, true} {
		var a *side
		var writeSeenAfterRead atomic.Int32 // 1: READ done when WRITE left, 2: not done
		filter := func(p *link.Packet) pipe.Verdict {
			if wire.Opcode(p.Buf[0]) == wire.RCWriteOnly && writeSeenAfterRead.Load() == 0 {
				if a.scq.Len() > 0 {
					writeSeenAfterRead.Store(1)
				} else {
					writeSeenAfterRead.Store(2)
				}
			}
			return pipe.Pass
		}
		var b *side
		a, b = newPair(t, pairOpts{filterA: filter, timeout: 16})
		var fl SendFlags
		if fence {
			fl = SendFence
		}
		_, err := a.qp.PostSend([]SendWR{
			{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 200000), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled | fl, SGList: sge(a, 300000, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		})
		if err != nil {
			t.Fatal(err)
		}
		// Poll only after the WRITE left: polling earlier could take the
		// READ's completion out of the CQ before the filter looks at it.
		for end := time.Now().Add(5 * time.Second); writeSeenAfterRead.Load() == 0 && time.Now().Before(end); {
			time.Sleep(100 * time.Microsecond)
		}
		for _, wc := range waitWC(t, a.scq, 2, 5*time.Second) {
			if wc.Status != WCSuccess {
				t.Fatalf("%+v", wc)
			}
		}
		want := int32(2)
		if fence {
			want = 1
		}
		if got := writeSeenAfterRead.Load(); got != want {
			t.Errorf("fence %v: WRITE left with the READ done=%v", fence, got == 1)
		}
	}
}

// TestMaxRdAtomic: no more than max_rd_atomic READs/atomics in flight (docs/protocol.md §5.4).
// A READ counts as in flight from its request until the responder sent its
// last response (both seen by filters on the two links, without touching
// the QPs: the requester may transmit after it unlocked its QP). That
// under-counts by the responses still in transit, but a requester that
// ignores the limit sends all eight requests before the first answer.
func TestMaxRdAtomic(t *testing.T) {
	var sent, answered, maxOut atomic.Int32
	var mu sync.Mutex
	seen := map[uint32]bool{}
	filter := func(p *link.Packet) pipe.Verdict {
		var h wire.BTH
		h.Decode(p.Buf)
		// Each READ is 10 PSNs (10000 bytes at MTU 1024); a partial retry
		// re-issues the rest at another PSN and is not a new READ.
		mu.Lock()
		first := h.Opcode == wire.RCReadRequest && !seen[h.PSN] && (h.PSN-100)%10 == 0
		if first {
			seen[h.PSN] = true
		}
		mu.Unlock()
		if first {
			out := sent.Add(1) - answered.Load()
			for m := maxOut.Load(); out > m && !maxOut.CompareAndSwap(m, out); m = maxOut.Load() {
			}
		}
		return pipe.Pass
	}
	filterB := func(p *link.Packet) pipe.Verdict {
		var h wire.BTH
		h.Decode(p.Buf)
		if h.Opcode == wire.RCReadResponseLast || h.Opcode == wire.RCReadResponseOnly {
			answered.Add(1)
		}
		return pipe.Pass
	}
	o := pairOpts{filterA: filter, filterB: filterB, timeout: 16}
	a, b := newPair(t, o)
	a.qp.mu.Lock()
	a.qp.req.maxRdAtomic = 2
	a.qp.mu.Unlock()
	var wrs []SendWR
	for i := 0; i < 8; i++ {
		wrs = append(wrs, SendWR{WRID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, i*10000, 10000),
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	waitWC(t, a.scq, 8, 5*time.Second)
	if m := maxOut.Load(); m > 2 || m < 1 {
		t.Fatalf("%d reads in flight with max_rd_atomic 2", m)
	}
}
