package verbs

import (
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/clock/clocktest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// deadPeerPair is a pair whose A side's packets are all lost (a dead
// peer as seen from A), on a fake clock, with retry_cnt retry and timeout
// 14 (67.1 ms), and one SEND outstanding on A. It returns the oldest
// outstanding PSN.
func deadPeerPair(t *testing.T, retry uint8) (*clocktest.Fake, *side, *side, uint32) {
	t.Helper()
	clk := clocktest.NewFake(time.Unix(0, 0))
	drop := func(p *link.Packet) pipe.Verdict { return pipe.Drop }
	a, b := newPair(t, pairOpts{filterA: drop, clock: clk, timeout: 14, retry: retry, rnrRetry: 7, exact: true})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
	first, ok := a.qp.oldestPSNLocked()
	if !ok {
		t.Fatal("nothing outstanding after post")
	}
	return clk, a, b, first
}

// oldestPSNLocked is oldestPSN under the QP's lock.
func (qp *QP) oldestPSNLocked() (uint32, bool) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.oldestPSN()
}

// injectAndWait injects f at psn and waits (bounded) until a's device has
// handled it: one of the counters in seen moves.
func injectAndWait(t *testing.T, a, b *side, f forged, psn uint32, seen func() uint64) {
	t.Helper()
	n := seen()
	inject(t, a, b, f, psn)
	deadline := time.Now().Add(10 * time.Second)
	for seen() == n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond)
	}
	if seen() == n {
		t.Fatalf("%s at PSN %d was not handled in 10 s", f.name, psn)
	}
}

// TestStaleResponsesDoNotKeepDeadQPAlive: responses that are dropped
// (older than the oldest outstanding WQE, as a stale duplicate or a
// spoofed packet anywhere in the 2^23 PSNs behind; of the wrong kind for
// the WQE they name) are no answer: they neither restart the retransmit
// timer nor refresh retry_cnt, so a QP whose peer is dead still fails
// with RETRY_EXC_ERR in about the time it would without them (226 ms of
// clock for retry_cnt 1 at timeout 14), however often they arrive.
func TestStaleResponsesDoNotKeepDeadQPAlive(t *testing.T) {
	ack := forgedKinds[0]
	cases := []struct {
		name string
		f    forged
		psn  func(first uint32) uint32
	}{
		{"ACK-below", ack, func(f uint32) uint32 { return wire.PSNAdd(f, -3) }},
		{"ACK-far-behind", ack, func(f uint32) uint32 { return wire.PSNAdd(f, -(1 << 22)) }},
		{"read-resp-for-SEND", forged{"read-resp-only", wire.RCReadResponseOnly, wire.SyndromeACK}, func(f uint32) uint32 { return f }},
		{"atomic-ack-for-SEND", forged{"atomic-ack", wire.RCAtomicAcknowledge, wire.SyndromeACK}, func(f uint32) uint32 { return f }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk, a, b, first := deadPeerPair(t, 1)
			const limit = 20 * time.Second
			var elapsed time.Duration
			for a.scq.Len() == 0 && elapsed < limit {
				injectAndWait(t, a, b, c.f, c.psn(first), func() uint64 { return drops(a) })
				clk.Advance(30 * time.Millisecond)
				elapsed += 30 * time.Millisecond
			}
			if a.scq.Len() == 0 {
				t.Fatalf("no completion after %v of clock with a dead peer (%d timeouts, %d deferred)", elapsed,
					a.dev.Stats().RetryTimeouts.Load(), a.dev.Stats().RetryDeferred.Load())
			}
			if wc := waitWC(t, a.scq, 1, time.Second); wc[0].Status != WCRetryExcErr {
				t.Fatalf("%+v", wc[0])
			}
			if bound := RetryBudget(14, 1) + 30*time.Millisecond; elapsed > bound {
				t.Errorf("RETRY_EXC_ERR after %v of clock, want at most %v", elapsed, bound)
			}
		})
	}
}

// TestIgnoredSeqNAKsDoNotKeepDeadQPAlive: sequence NAKs that arrive while
// a retry is under way are ignored (Stats.SeqNAKsIgnored), and an ignored
// NAK does not restart the retransmit timer either (as in rxe, where it
// goes to done without mod_timer); and the retry a NAK starts spends
// retry_cnt (IBTA, rxe). So a stream of NAKs for the oldest PSN from a
// peer that never takes the retransmission (here: all of A's packets are
// lost) ends in RETRY_EXC_ERR.
func TestIgnoredSeqNAKsDoNotKeepDeadQPAlive(t *testing.T) {
	clk, a, b, first := deadPeerPair(t, 1)
	nak := forgedKinds[1]
	st := a.dev.Stats()
	seen := func() uint64 { return st.SeqNAKsRcvd.Load() + drops(a) + uint64(a.scq.Len()) }
	var elapsed time.Duration
	for i := 0; i < 200 && a.scq.Len() == 0; i++ {
		injectAndWait(t, a, b, nak, first, seen)
		clk.Advance(30 * time.Millisecond)
		elapsed += 30 * time.Millisecond
	}
	if a.scq.Len() == 0 {
		t.Fatalf("no completion after %v of clock: %d retransmits, %d timeouts, %d NAKs ignored", elapsed,
			st.Retransmits.Load(), st.RetryTimeouts.Load(), st.SeqNAKsIgnored.Load())
	}
	if wc := waitWC(t, a.scq, 1, time.Second); wc[0].Status != WCRetryExcErr {
		t.Fatalf("%+v", wc[0])
	}
	if bound := RetryBudget(14, 1) + 30*time.Millisecond; elapsed > bound {
		t.Errorf("RETRY_EXC_ERR after %v of clock, want at most %v", elapsed, bound)
	}
}

// TestSeqNAKRetrySpendsRetryCnt: a retry that a sequence NAK starts spends
// retry_cnt like a timer retry (IBTA; rxe): with retry_cnt 0 the first
// NAK for the oldest PSN completes it with RETRY_EXC_ERR at once, without
// the clock moving.
func TestSeqNAKRetrySpendsRetryCnt(t *testing.T) {
	_, a, b, first := deadPeerPair(t, 0)
	st := a.dev.Stats()
	injectAndWait(t, a, b, forgedKinds[1], first, func() uint64 { return st.SeqNAKsRcvd.Load() + drops(a) })
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCRetryExcErr {
		t.Fatalf("%+v", wc[0])
	}
	if n := st.Retransmits.Load(); n != 0 {
		t.Errorf("%d retransmits with retry_cnt 0", n)
	}
}

// retryTimerOnly is deadPeerPair with a SEND outstanding and the loss probe
// (recover.go), which shares the timer and is due first, off: it returns
// the retransmit timer and how long until it fires.
func retryTimerOnly(t *testing.T) (*clocktest.Fake, *side, clock.Timer, time.Duration) {
	t.Helper()
	clk, a, _, _ := deadPeerPair(t, 7)
	a.qp.mu.Lock()
	a.qp.comp.probeArmed = false
	a.qp.syncTimer()
	a.qp.mu.Unlock()
	ft := a.qp.comp.retryTimer
	due, active := clk.Until(ft)
	if !active {
		t.Fatal("retransmit timer not armed with a SEND outstanding")
	}
	return clk, a, ft, due
}

// TestStaleRetryCallbackIgnored: a retransmit timer callback that the
// clock already took off (it fired) but that reaches the QP's lock only
// after an answer restarted the timer is stale: it must neither retry nor
// defer, and the restarted timer stays armed. Deterministic: the test
// holds the QP's lock while the fake clock fires the timer, and restarts
// the timer the way an accepted response does before letting it in.
func TestStaleRetryCallbackIgnored(t *testing.T) {
	clk, a, ft, due := retryTimerOnly(t)
	a.qp.mu.Lock()
	done := make(chan struct{})
	go func() { clk.Advance(due); close(done) }()
	// The clock deactivates the timer before it calls the callback, which
	// then waits for the QP's lock.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Microsecond) {
		if _, active := clk.Until(ft); !active {
			break
		}
		if time.Now().After(deadline) {
			a.qp.mu.Unlock()
			t.Fatal("the fake clock did not fire the retransmit timer in 10 s")
		}
	}
	a.qp.answered() // an answer arrives first: restart the timer from now
	a.qp.mu.Unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Advance did not return in 10 s")
	}
	st := a.dev.Stats()
	if n, d, r := st.RetryTimeouts.Load(), st.RetryDeferred.Load(), st.Retransmits.Load(); n+d+r != 0 {
		t.Errorf("stale callback acted as an expiry: %d timeouts, %d deferred, %d retransmits", n, d, r)
	}
	a.qp.mu.Lock()
	armed := a.qp.comp.retryArmed
	a.qp.mu.Unlock()
	if !armed {
		t.Error("the restarted retransmit timer is no longer armed")
	}
}

// TestRetryTimerMovedLater: an answer moves the retransmit deadline later
// without moving the timer on the clock (syncTimer); the timer then fires
// at the old deadline, finds nothing due and must set itself again for the
// new one, where a peer that went silent after the answer is found out.
// Without that re-arm the QP would never time out.
func TestRetryTimerMovedLater(t *testing.T) {
	clk, a, ft, due := retryTimerOnly(t)
	clk.Advance(due / 2)
	a.qp.mu.Lock()
	a.qp.answered() // restarts the retransmit timer from now: deadline due/2 later
	a.qp.mu.Unlock()
	if left, _ := clk.Until(ft); left != due-due/2 {
		t.Errorf("the answer moved the timer on the clock: %v left, want %v (it only moves earlier)", left, due-due/2)
	}
	clk.Advance(due - due/2) // the old deadline: the callback runs early
	st := a.dev.Stats()
	if n, d, r := st.RetryTimeouts.Load(), st.RetryDeferred.Load(), st.Retransmits.Load(); n+d+r != 0 {
		t.Fatalf("an expiry at the old deadline: %d timeouts, %d deferred, %d retransmits", n, d, r)
	}
	left, active := clk.Until(ft)
	if !active || left <= 0 {
		t.Fatalf("the early callback did not set the timer again (active %v, %v left)", active, left)
	}
	clk.Advance(left)
	// The first expiry after an answer is deferred once (timer.go); either
	// way it is the timer acting.
	if n, d, r := st.RetryTimeouts.Load(), st.RetryDeferred.Load(), st.Retransmits.Load(); n+d+r == 0 {
		t.Fatal("no expiry at the moved deadline")
	}
}

// TestRetryBudgetBoundsDeadPeer: RetryBudget bounds the time to
// RETRY_EXC_ERR against a peer that never answers, for every retry_cnt,
// and is not loose by more than the rules it documents (a deferred expiry
// and a waived retry after an answer, which a silent peer never gets).
func TestRetryBudgetBoundsDeadPeer(t *testing.T) {
	T := ackTimeout(14)
	for _, retry := range []uint8{0, 1, 7} {
		clk, a, _, _ := deadPeerPair(t, retry)
		const step = time.Millisecond
		var elapsed time.Duration
		for a.scq.Len() == 0 && elapsed < 10*time.Second {
			clk.Advance(step)
			elapsed += step
		}
		if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCRetryExcErr {
			t.Fatalf("retry_cnt %d: %+v", retry, wc[0])
		}
		// A silent peer: T + retry x 2T, each plus at most a quarter.
		lo, hi := T+time.Duration(retry)*2*T, (T+time.Duration(retry)*2*T)*5/4
		if elapsed < lo-step || elapsed > hi+step {
			t.Errorf("retry_cnt %d: RETRY_EXC_ERR after %v, want %v..%v", retry, elapsed, lo, hi)
		}
		if b := RetryBudget(14, retry); b < hi || b != time.Duration(retry+3)*2*T*5/4 {
			t.Errorf("RetryBudget(14, %d) = %v, want %v (and at least %v)", retry, b, time.Duration(retry+3)*2*T*5/4, hi)
		}
	}
	if b := RetryBudget(0, 7); b != 0 {
		t.Errorf("RetryBudget(0, 7) = %v, want 0 (timer disabled)", b)
	}
}
