package verbs

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/link/udp"
)

// TestEventsAfterBatch: a CQ event raised while the receive loop handles a
// batch is delivered at the batch's end, once every completion of the
// batch is in its CQ. B answers each of A's SENDs at once, so that its
// reply leaves ahead of the ACK of A's SEND, both in one batch for A
// (ACKsBehindReply: one UDP GSO buffer, so one batch on loopback); when
// A's receive CQ raises its event, the send
// completion the ACK makes must be in A's send CQ already, as on a NIC
// (perftest's event mode waits on one channel for both CQs and polls each
// once per event). Raised at once instead, the event comes between the
// two.
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
	a, b := newPairOn(t, ea, eb, o)
	const n = 200
	var events, early atomic.Int32
	a.cc.SetNotify(func() {
		events.Add(1)
		if a.scq.Len() == 0 {
			early.Add(1)
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
		waitWC(t, a.rcq, 1, 5*time.Second)
		waitWC(t, a.scq, 1, 5*time.Second)
		// The event is delivered at the batch's end (the receive CQ had
		// its completion before): drain it.
		select {
		case <-a.cc.C():
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d: no completion event", i)
		}
	}
	t.Logf("%d events, %d raised before the send completion of their batch", events.Load(), early.Load())
	if early.Load() != 0 {
		t.Errorf("%d of %d receive events came before the send completion of their batch", early.Load(), events.Load())
	}
}
