package verbs

import (
	"time"

	"github.com/softroce/softroce/wire"
)

// This file holds the QP's retransmit and RNR timers: the timeout codes,
// when the timers are armed and what their expiry does. timerheap.go is the
// device's timer heap that runs them; comp.go the completer that answers
// drive them.

// Retransmit timer (docs/protocol.md §5.5): one try waits the QP's local ACK timeout,
// 4.096 us x 2^timeout (at least minAckTimeout). Consecutive timeouts of the
// same PSN back off, and every wait gets a little random extra, so that the
// thousand QPs a loss burst stalled together do not retransmit in step. The
// limits keep the worst case of retry_cnt 7 at timeout 14 (67.1 ms) at
// 67.1 ms x (1 + 7 x retryBackoffMax) x (1 + 1/retryJitterDiv) = 1.26 s.
const (
	retryBackoffMax = 2 // the wait multiplier after consecutive timeouts: 1, 2, 2, ...
	retryJitterDiv  = 4 // each wait is lengthened by a random 0..1/retryJitterDiv of itself
)

// ackTimeout returns the local ACK timeout a QP's timeout attribute codes
// (IBTA: 4.096 us x 2^timeout; docs/protocol.md §5.5); 0 means no timeout
// (returns 0). The code is 5 bits: larger values count as maxTimerCode.
func ackTimeout(code uint8) time.Duration {
	if code == 0 {
		return 0
	}
	return time.Duration(4096<<min(code, maxTimerCode)) * time.Nanosecond
}

// RetryBudget is the longest an RC requester with the given local ACK
// timeout and retry_cnt keeps retrying after the last answer of its peer
// before it completes the oldest WQE with RETRY_EXC_ERR (0 for timeout 0,
// which disables the retransmit timer: no bound). Each wait is at most
// twice the timeout (backoff) plus a quarter (jitter); after the last
// answer there are at most retryCnt+1 timeouts (the last one fails), one
// deferred expiry and one retry waived for an answer (see retry). A peer
// that never answers is given up on sooner: T + retryCnt x 2T, plus jitter.
func RetryBudget(timeout, retryCnt uint8) time.Duration {
	if timeout == 0 {
		return 0
	}
	d := max(ackTimeout(timeout), minAckTimeout) * retryBackoffMax
	d += d / retryJitterDiv
	return time.Duration(min(retryCnt, maxRetryCnt)+3) * d
}

// retryWait is the retransmit timer's next interval.
func (qp *QP) retryWait() time.Duration {
	d := max(ackTimeout(qp.attr.Timeout), minAckTimeout)
	d *= time.Duration(min(1<<min(qp.comp.backoff, 8), retryBackoffMax))
	// xorshift64: a cheap per-QP generator for the jitter.
	x := qp.comp.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	qp.comp.rng = x
	return d + time.Duration(x%uint64(d/retryJitterDiv+1))
}

// armRetry starts the retransmit timer while packets are unanswered (if it
// is not running); timeout 0 disables it (docs/protocol.md §5.5).
func (qp *QP) armRetry() { qp.armRetryAt(time.Time{}) }

// armRetryAt is armRetry with the time now if the caller has it (the zero
// Time: rxNow's if needed).
func (qp *QP) armRetryAt(now time.Time) {
	if !qp.outstanding() || qp.attr.Timeout == 0 || qp.comp.rnrWait {
		if qp.comp.retryArmed {
			qp.comp.retryArmed = false
			qp.syncTimerAt(now)
		}
		return
	}
	if !qp.comp.retryArmed {
		qp.comp.retryArmed = true
		if now.IsZero() {
			now = qp.rxNow()
		}
		qp.comp.retryFrom = now
		qp.comp.retryDue = now.Add(qp.retryWait())
		qp.syncTimerAt(now)
	}
}

// syncTimer makes the QP's timer fire by the earlier of the retransmit and
// the loss probe deadlines that are armed: the two share one timer, so
// that a QP queues at most one on the device's heap. A timer already set
// to fire no later than that is left alone, and one with nothing armed is
// left to fire: its callback finds nothing due and sets it again for what
// is then armed (onRetryTimer). Moving a timer on the device's heap costs
// a lock and a clock read, and every answer moves the retransmit deadline
// later (answered), each response of a READ among them.
func (qp *QP) syncTimer() { qp.syncTimerAt(time.Time{}) }

// syncTimerAt is syncTimer with the time now if the caller has it (the
// zero Time: rxNow's if needed).
func (qp *QP) syncTimerAt(now time.Time) {
	c := &qp.comp
	var due time.Time
	switch {
	case c.retryArmed && c.probeArmed:
		due = c.retryDue
		if c.probeDue.Before(due) {
			due = c.probeDue
		}
	case c.retryArmed:
		due = c.retryDue
	case c.probeArmed:
		due = c.probeDue
	default:
		return
	}
	if c.timerSet && !c.timerAt.After(due) {
		return
	}
	if now.IsZero() {
		now = qp.rxNow()
	}
	c.timerSet, c.timerAt = true, due
	c.retryTimer.Reset(due.Sub(now))
}

// stopTimer stops the QP's timer (retransmit and probe).
func (qp *QP) stopTimer() {
	qp.comp.timerSet = false
	qp.comp.retryTimer.Stop()
}

func (qp *QP) onRetryTimer() {
	qp.mu.Lock()
	defer qp.dev.kick() // also what posts left for an answer that did not come
	defer qp.flushUnlock()
	// The timer has fired. (If a Reset moved it since, this callback is
	// stale and the heap still holds it: the next syncTimer sets it once
	// more, which costs nothing but the Reset.)
	qp.comp.timerSet = false
	if !qp.sending() || qp.dev.closed.Load() {
		return
	}
	if c := &qp.comp; c.probeArmed && !qp.dev.clock.Now().Before(c.probeDue) {
		qp.onProbe() // recover.go
	}
	qp.onRetryExpiry()
	qp.syncTimer()
}

// onRetryExpiry is the retransmit timer's part of the QP timer's callback.
func (qp *QP) onRetryExpiry() {
	// A callback the clock took off before an answer stopped and re-armed
	// the timer (it then waited for mu) is stale: the re-armed timer's
	// deadline has not come, and it will call again.
	if !qp.comp.retryArmed || qp.dev.clock.Now().Before(qp.comp.retryDue) ||
		!qp.sending() || qp.dev.closed.Load() {
		return
	}
	qp.comp.retryArmed = false
	if !qp.outstanding() {
		return
	}
	if qp.budgetIdle() {
		// Waiting for its turn in the send budget with every packet it
		// sent acknowledged: no answer is due, so the expiry spends no
		// retry. The timer keeps running; the turn sends on.
		qp.dev.stats.RetryDeferred.Add(1)
		qp.armRetry()
		return
	}
	if qp.comp.heardTimer {
		// The peer answered during this period, only not with progress
		// (duplicates, a READ's responses after a gap): it is alive and
		// busy. Asking again now would make it replay the rest once more
		// (rxe answers every duplicate READ with the whole remainder), so
		// wait one more period; a silent one retries.
		qp.comp.heardTimer = false
		qp.dev.stats.RetryDeferred.Add(1)
		qp.armRetry()
		return
	}
	qp.dev.stats.RetryTimeouts.Add(1)
	// The retransmit timer has taken over from the loss probe until the
	// next progress (recover.go).
	qp.comp.probes = maxProbes
	if !qp.comp.nakPending {
		qp.comp.probeArmed = false
	}
	// What the peer did not answer in a timeout is no longer in its
	// receive buffer: it stops counting against the device's budget
	// (budget.go) until the peer answers, so a dead peer holds none.
	qp.req.budgetLost = true
	qp.budgetFreed()
	qp.comp.backoff++
	if qp.comp.heard {
		qp.resend() // waived: the peer answered since the last retry (see retry)
		return
	}
	qp.retry()
}

func (qp *QP) onRNRTimer() {
	qp.mu.Lock()
	defer qp.dev.kick()
	defer qp.flushUnlock()
	if !qp.comp.rnrWait || !qp.sending() || qp.dev.closed.Load() {
		return
	}
	qp.comp.rnrWait = false
	qp.rewind()
}

// waitRNR stops the requester after an RNR NAK: the retransmit timer stops
// and the RNR timer waits the time the NAK's timer code asks
// (wire.RNRTimeout) before onRNRTimer resends (docs/protocol.md §5.6).
func (qp *QP) waitRNR(code uint8) {
	qp.comp.rnrWait = true
	qp.stopTimer()
	qp.comp.retryArmed, qp.comp.probeArmed = false, false
	qp.comp.rnrTimer.Reset(wire.RNRTimeout(code))
}
