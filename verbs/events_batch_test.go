package verbs

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
)

// replyFirst is A's link, seen through link.Endpoint alone (so the device
// reads it with ReadBatch). Where a batch holds B's ACK and, right after
// it, B's reply (SEND ONLY), it puts the reply first, as the two arrive
// when the reply leaves ahead of the ACK in one UDP GSO buffer; it counts
// the replies that then have the ACK behind them in their batch (paired),
// and those that do not (alone).
type replyFirst struct {
	link.Endpoint
	paired, alone atomic.Int32
}

func (r *replyFirst) ReadBatch(pkts []link.Packet) (int, error) {
	n, err := r.Endpoint.ReadBatch(pkts)
	op := func(i int) byte {
		if b := pkts[i].Bytes(); len(b) > 0 {
			return b[0]
		}
		return 0
	}
	const send, ack = 0x04, 0x11 // RC SEND ONLY, RC ACKNOWLEDGE
	for i := 0; i+1 < n; i++ {
		if op(i) == ack && op(i+1) == send {
			pkts[i], pkts[i+1] = pkts[i+1], pkts[i]
			i++
		}
	}
	for i := 0; i < n; i++ {
		if op(i) != send {
			continue
		}
		if i+1 < n && op(i+1) == ack {
			r.paired.Add(1)
		} else {
			r.alone.Add(1)
		}
	}
	return n, err
}

// TestEventsAfterBatch: a CQ event raised while the receive loop handles a
// batch is delivered at the batch's end, once every completion of the
// batch is in its CQ, as a NIC interrupts after writing its CQEs. B echoes
// each of A's SENDs from its receive CQ's event; A's link (replyFirst)
// hands A each echo with the ACK of A's SEND right behind it in one batch,
// as they arrive when the echo leaves ahead of the ACK in one UDP GSO
// buffer. When A's receive CQ raises its event, the send completion the
// ACK makes must be in A's send CQ already (perftest's event mode waits on
// one channel for both CQs and polls each once per event; it hung when the
// event came between the two). Raised at once instead, every event comes
// between them.
func TestEventsAfterBatch(t *testing.T) {
	o := pairOpts{channel: true}
	ea, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.WithAnyPort())
	if err != nil {
		t.Fatal(err)
	}
	eb, err := udp.Listen(netip.MustParseAddrPort("127.0.0.2:0"), udp.WithAnyPort())
	if err != nil {
		t.Fatal(err)
	}
	rec := &replyFirst{Endpoint: ea}
	a, b := newPairOn(t, rec, eb, o)
	const n = 200
	// A consumes as an event-mode program does: it polls its CQs only
	// after the event (got), so the callback sees what the event found.
	var events, early atomic.Int32
	got := make(chan struct{}, 1)
	a.cc.SetNotify(func() {
		events.Add(1)
		if a.scq.Len() == 0 {
			early.Add(1)
		}
		select {
		case got <- struct{}{}:
		default:
		}
	})
	// B echoes every message from its receive CQ's event, on its receive
	// loop before the batch's ACK is built: the echo leaves first, the ACK
	// behind it, in one UDP GSO buffer.
	for i := range uint64(n) {
		postRecv(t, b, i, 0, 64)
	}
	b.cc.SetNotify(func() {
		// The posts run on a goroutine the callback waits for, at most
		// 50 ms: an event raised with the QP's lock held (mid-batch)
		// would deadlock a post made in the callback itself.
		posted := make(chan struct{})
		go func() {
			defer close(posted)
			var wc [4]WC
			for k := b.rcq.Poll(wc[:]); k > 0; k = b.rcq.Poll(wc[:]) {
				for range k {
					b.qp.PostSend([]SendWR{{Opcode: WRSend, Flags: SendInline, Inline: []byte("pong")}})
				}
			}
			b.rcq.ReqNotify(false)
		}()
		select {
		case <-posted:
		case <-time.After(50 * time.Millisecond):
		}
	})
	if err := b.rcq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(n) {
		postRecv(t, a, i, 0, 64)
		if err := a.rcq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		post(t, a.qp, SendWR{WRID: i, Opcode: WRSend, Flags: SendSignaled | SendInline, Inline: []byte("ping")})
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d: no completion event", i)
		}
		<-a.cc.C()
		waitWC(t, a.rcq, 1, 5*time.Second)
		waitWC(t, a.scq, 1, 5*time.Second)
	}
	t.Logf("%d events, %d raised before the send completion; %d replies arrived with the ACK behind them, %d without", events.Load(), early.Load(), rec.paired.Load(), rec.alone.Load())
	if rec.paired.Load() < n/2 {
		t.Fatalf("only %d of %d replies arrived with the ACK behind them: the test does not test", rec.paired.Load(), n)
	}
	// A reply whose batch held no ACK may raise its event before the send
	// completes (the ACK is still to come); one with the ACK behind it may not.
	if early.Load() > rec.alone.Load() {
		t.Errorf("%d receive events came before the send completion of their batch (%d replies arrived without an ACK behind them)", early.Load(), rec.alone.Load())
	}
}

// TestDeferredEventDestroyedCQ: an event a batch deferred for a CQ that was
// destroyed before the batch ended (its QP destroyed first, in between) is
// not raised; a live CQ's is.
func TestDeferredEventDestroyedCQ(t *testing.T) {
	a, _ := newPair(t, pairOpts{channel: true})
	for _, destroy := range []bool{false, true} {
		cq, err := a.dev.CreateCQ(4, nil, a.cc)
		if err != nil {
			t.Fatal(err)
		}
		if err := cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		a.dev.rx.mu.Lock()
		cq.push(&WC{WRID: 1}, false, true) // as the receive loop does, mid-batch
		if destroy {
			if err := cq.Destroy(); err != nil {
				a.dev.rx.mu.Unlock()
				t.Fatal(err)
			}
		}
		a.dev.raiseEvents()
		a.dev.rx.mu.Unlock()
		select {
		case got := <-a.cc.C():
			if destroy {
				t.Fatalf("event for a destroyed CQ (%p)", got)
			}
			if err := cq.Destroy(); err != nil {
				t.Fatal(err)
			}
		case <-time.After(50 * time.Millisecond):
			if !destroy {
				t.Fatal("no event for a live CQ")
			}
		}
	}
}
