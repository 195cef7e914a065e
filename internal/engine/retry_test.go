package engine

import (
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// TestRetryCnt7IsFinite: retry_cnt 7 means seven retries, not "forever"
// (rxe's reading): against a dead peer, with perftest's defaults (timeout
// 14, 67.1 ms per try, retry_cnt 7), the WQE completes with RETRY_EXC_ERR
// after eight timeouts, well under 2 s of (fake) time, and the rest of the
// send queue is flushed.
func TestRetryCnt7IsFinite(t *testing.T) {
	for _, retry := range []uint8{0, 1, 3, 7} {
		clk := NewFakeClock(time.Unix(0, 0))
		drop := func(p *link.Packet) pipe.Verdict { return pipe.Drop }
		a, _ := newPair(t, pairOpts{filterA: drop, timeout: 14, retry: retry, rnrRetry: 7, exact: true, clock: clk})
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
		post(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, SGList: sge(a, 0, 100)})
		const step = time.Millisecond
		var elapsed time.Duration
		for a.scq.Len() == 0 && elapsed < 10*time.Second {
			clk.Advance(step)
			elapsed += step
		}
		wc := waitWC(t, a.scq, 2, time.Second)
		if wc[0].Status != WCRetryExcErr || wc[0].WRID != 1 || wc[1].Status != WCWRFlushErr || wc[1].WRID != 2 {
			t.Fatalf("retry_cnt %d: %+v", retry, wc)
		}
		if got := a.dev.Stats().RetryTimeouts.Load(); got != uint64(retry)+1 {
			t.Errorf("retry_cnt %d: %d timeouts, want %d", retry, got, retry+1)
		}
		if a.qp.State() != QPStateErr {
			t.Errorf("retry_cnt %d: QP in %v, want ERR", retry, a.qp.State())
		}
		if min := time.Duration(retry+1) * wire.AckTimeout(14); elapsed < min || elapsed > 2*time.Second {
			t.Errorf("retry_cnt %d: error completion after %v of clock time, want %v..2s", retry, elapsed, min)
		}
	}
}
