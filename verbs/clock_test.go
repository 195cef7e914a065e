package verbs

import (
	"testing"
	"time"

	"github.com/softroce/softroce/clock/clocktest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
)

// TestFakeClockRetry drives the retransmit timer of a QP with timeout 31
// (4.096 us * 2^31, about 2.4 hours) deterministically: each Advance past
// the timeout is exactly one retry, and retry_cnt 3 fails on the fourth.
func TestFakeClockRetry(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	drop := func(p *link.Packet) pipe.Verdict { return pipe.Drop }
	a, _ := newPair(t, pairOpts{filterA: drop, timeout: 31, retry: 3, rnrRetry: 7, exact: true, clock: clk})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
	// Each wait is 2.4 h, doubled after a timeout, plus up to a quarter.
	step := time.Minute
	for i := 1; i <= 3; i++ {
		for n := 0; a.dev.Stats().RetryTimeouts.Load() < uint64(i); n++ {
			if n > 7*60 {
				t.Fatalf("no timeout %d within 7 hours", i)
			}
			clk.Advance(step)
		}
		if got := a.dev.Stats().RetryTimeouts.Load(); got != uint64(i) {
			t.Fatalf("after %d timeouts the counter says %d", i, got)
		}
		if a.scq.Len() != 0 {
			t.Fatalf("completion after %d retries", i)
		}
	}
	clk.Advance(7 * time.Hour)
	wc := waitWC(t, a.scq, 1, time.Second)
	if wc[0].Status != WCRetryExcErr {
		t.Fatalf("%+v", wc[0])
	}
}

// TestFakeClockRNR: RNR timer code 0 (655.36 ms) only expires on Advance.
func TestFakeClockRNR(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	a, b := newPair(t, pairOpts{minRNR: 1, clock: clk})
	b.qp.mu.Lock()
	b.qp.attr.MinRNRTimer = 0
	b.qp.mu.Unlock()
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
	deadline := time.Now().Add(5 * time.Second)
	for a.dev.Stats().RNRNAKsRcvd.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK")
		}
		time.Sleep(100 * time.Microsecond)
	}
	postRecv(t, b, 1, 0, 100)
	time.Sleep(20 * time.Millisecond)
	if a.scq.Len() != 0 || a.dev.Stats().RNRNAKsRcvd.Load() != 1 {
		t.Fatal("requester retried before the RNR timer expired")
	}
	clk.Advance(655 * time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	if a.scq.Len() != 0 {
		t.Fatal("retried before 655.36 ms")
	}
	clk.Advance(time.Millisecond)
	if wc := waitWC(t, a.scq, 1, 5*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
}
