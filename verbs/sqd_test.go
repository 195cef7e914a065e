package verbs

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/softroce/softroce/link/pipe"
)

// TestSQDrain: entering SQD lets the message in progress finish, starts no
// new WQE, raises SQ_DRAINED when asked, and RTS resumes the queue.
func TestSQDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Every datagram takes 100 ms, so the first WRITE cannot finish (and
		// the second start) before the QP is in SQD: PostSend returns as soon
		// as the packets are queued.
		a, b := newPair(t, pairOpts{faults: pipe.Faults{Delay: 100 * time.Millisecond}, timeout: 18})
		w := SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 600000), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()} // more than a window
		w.WRID = 1
		w2 := w
		w2.WRID = 2
		if _, err := a.qp.PostSend([]SendWR{w, w2}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.Modify(&QPAttr{QPState: QPStateSQD}, QPAttrState|QPAttrEnSQDAsyncNotify); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := contextTimeout(5 * time.Second)
		defer cancel()
		for {
			ev, err := a.dev.GetAsyncEvent(ctx)
			if err != nil {
				t.Fatal("no SQ drained event:", err)
			}
			if ev.Type == EventSQDrained && ev.QP == a.qp {
				break
			}
		}
		n := a.scq.Len()
		if n > 1 {
			t.Fatalf("%d completions in SQD, want at most the started one", n)
		}
		if err := a.qp.Modify(&QPAttr{QPState: QPStateRTS}, QPAttrState); err != nil {
			t.Fatal(err)
		}
		wc := waitWC(t, a.scq, 2, 5*time.Second)
		if wc[0].WRID != 1 || wc[1].WRID != 2 || wc[1].Status != WCSuccess {
			t.Fatalf("%+v", wc)
		}
	})
}
