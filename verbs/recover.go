package verbs

import (
	"time"

	"github.com/softroce/softroce/wire"
)

// This file holds the requester's early loss recovery: a round-trip time
// estimate, the loss probe, and the reordering window for sequence-error
// NAKs during a retry (docs/protocol.md §5.5). None of it changes what a
// packet looks like on the wire: a probe is a packet already sent, sent
// again, and the responder answers it as the IBTA says (a duplicate with
// an ACK of the last PSN it took, the expected PSN by taking it).
//
// The loss probe. A lost last packet (nothing after it draws a NAK), a
// lost NAK (the responder sends one per gap) and a lost ACK at the end of
// a burst leave the requester waiting for its retransmit timer: 67 ms and
// more at the usual timeout code 14, with back-off. Like TCP's tail loss
// probe, a QP that has heard nothing for a probe timeout (about two
// round-trip times, well below the retransmit timeout) sends one probe:
// the oldest unacknowledged packet again, asking for an ACK. The answer
// says where the responder stands (a duplicate is answered with an ACK of
// the last PSN it took, the expected PSN by taking it), and if packets
// after it are still unacknowledged the requester goes back to the first
// of them at once. For READs the probe asks again for the first missing
// responses of every outstanding READ (readgap.go). A probe spends no
// retry_cnt and does not touch the retransmit timer, which still runs from
// the last answer: a dead peer fails in the same bounded time as before.
// At most maxProbes probes go out per silence, each twice the last's wait.
//
// The reordering window. During a retry sequence a sequence-error NAK for
// a PSN past the rewind point means the responder took part of the
// retransmission and found another gap: rxe ignores it until the retry
// ends (a NAK stream would otherwise multiply the traffic), and the gap
// then costs a retransmit timeout. softroce goes back to it, but not at
// once: on a reordering path the NAK may come from an old packet that
// overtook the retransmission of that PSN, which is still on its way. It
// waits a quarter of the smoothed round-trip time (at least
// minReorderWindow) for an answer past the NAK's PSN, then goes back.
const (
	maxProbes        = 2
	minProbeTimeout  = 10 * time.Millisecond
	minRefillTimeout = 300 * time.Microsecond
	probeSettle      = time.Millisecond
	// probeLateBy: a probe timer that fires this much after its time
	// (at least; a quarter of the wait if that is more) found this host
	// stalled, not the peer silent (probeHold).
	probeLateBy      = 2 * time.Millisecond
	minReorderWindow = 50 * time.Microsecond
)

// rttStart times the packet with PSN psn (sent now, asking for an ACK) if
// no packet is being timed.
func (qp *QP) rttStart(psn uint32) {
	if qp.comp.rttOn {
		return
	}
	qp.comp.rttOn, qp.comp.rttPSN, qp.comp.rttAt = true, psn, qp.dev.clock.Now()
}

// rttSample takes an answer for psn: if it covers the packet being timed,
// one round-trip time sample (Karn: a retry cancels the timing, see rewind).
func (qp *QP) rttSample(psn uint32) {
	c := &qp.comp
	if !c.rttOn || wire.PSNDiff(psn, c.rttPSN) < 0 {
		return
	}
	c.rttOn = false
	s := qp.dev.clock.Now().Sub(c.rttAt)
	if s < 0 {
		return
	}
	if c.srtt == 0 {
		c.srtt, c.rttvar = s, s/2
		return
	}
	d := c.srtt - s
	if d < 0 {
		d = -d
	}
	c.rttvar += (d - c.rttvar) / 4
	c.srtt += (s - c.srtt) / 8
}

// probeTimeout is how long a QP with unanswered packets waits in silence
// before it probes: 2 × SRTT + 4 × RTTVAR (a quarter of the retransmit
// timeout before a sample), at least minProbeTimeout (as TCP's, so that a
// busy host's scheduling stall is not taken for a loss), at most half the
// retransmit timeout.
func (qp *QP) probeTimeout() time.Duration {
	rto := max(ackTimeout(qp.attr.Timeout), minAckTimeout)
	d := rto / 4
	if qp.comp.srtt > 0 {
		d = 2*qp.comp.srtt + 4*qp.comp.rttvar
	}
	return min(max(d, minProbeTimeout), rto/2)
}

// probing reports whether the QP probes at all: not when its retransmit
// timeout is below twice minProbeTimeout (timeout codes below 13), which
// then comes soon enough.
func (qp *QP) probing() bool {
	return qp.attr.Timeout != 0 && ackTimeout(qp.attr.Timeout) >= 2*minProbeTimeout
}

// probeWait is how long the QP waits in silence before its next probe:
// the probe timeout, doubled for each probe since the last progress; but
// while the oldest incomplete READ waits for a re-request's responses,
// only 2 × SRTT + 4 × RTTVAR (at least minRefillTimeout): asking again for
// a few responses costs little, and until they land no later range of
// that READ can be asked for.
func (qp *QP) probeWait() time.Duration {
	d := qp.probeTimeout() << qp.comp.probes
	if v := qp.oldestRead(); v != nil && v.rrTo > v.acked && qp.comp.srtt > 0 {
		d = min(d, max(2*qp.comp.srtt+4*qp.comp.rttvar, minRefillTimeout))
	}
	return d
}

// oldestRead returns the oldest incomplete READ (nil if none).
func (qp *QP) oldestRead() *sendWQE {
	n := uint32(len(qp.sq))
	for i := qp.sqHead; i != qp.sqTail; i++ {
		v := &qp.sq[i%n]
		if !v.started {
			return nil
		}
		if v.kind == kindRead && !v.done {
			return v
		}
	}
	return nil
}

// reorderWindow is how long a NAK during a retry waits for a later answer.
func (qp *QP) reorderWindow() time.Duration {
	return min(max(qp.comp.srtt/4, minReorderWindow), qp.probeTimeout())
}

// armProbe starts the probe timer while packets are unanswered (if it is
// not running); the retransmit timer's conditions apply (timeout 0 means
// no timers).
func (qp *QP) armProbe() {
	c := &qp.comp
	if !qp.outstanding() || !qp.probing() || c.rnrWait || qp.typ != QPTypeRC || c.probes >= maxProbes {
		return
	}
	if !c.probeArmed {
		c.heardAt = qp.dev.clock.Now()
		qp.setProbe(qp.probeWait())
	}
}

// setProbe makes the probe timer fire d from now, or sooner if it is armed
// for sooner.
func (qp *QP) setProbe(d time.Duration) {
	c := &qp.comp
	due := qp.dev.clock.Now().Add(d)
	if c.probeArmed && !due.Before(c.probeDue) {
		return
	}
	c.probeArmed, c.probeDue = true, due
	qp.syncTimer()
}

// onProbe is the loss probe's part of the QP timer's callback (timer.go),
// once the probe deadline has come.
func (qp *QP) onProbe() {
	c := &qp.comp
	now := qp.dev.clock.Now()
	due := c.probeDue
	c.probeArmed = false
	if !qp.outstanding() || c.rnrWait || qp.attr.Timeout == 0 {
		c.nakPending, c.firstWait = false, false
		return
	}
	if c.firstWait && qp.sending() {
		qp.askFirst() // readgap.go
	}
	if c.nakPending {
		// The reordering window of a NAK during a retry, or the wait
		// after a probe's answer, has passed with no answer past it.
		c.nakPending = false
		if qp.compPSN() == c.nakPSN && !qp.readsIncomplete() {
			if c.nakProbe {
				qp.dev.stats.ProbeRewinds.Add(1)
				qp.resend() // a probe spends no retry_cnt
			} else {
				qp.dev.stats.ReorderRewinds.Add(1)
				qp.retry()
			}
			qp.armProbe()
			return
		}
	}
	// Lazily re-armed: answers only note when they came.
	wait := qp.probeWait()
	if quiet := now.Sub(c.heardAt); quiet < wait {
		qp.setProbe(wait - quiet)
		return
	}
	if c.probes >= maxProbes || qp.budgetIdle() {
		return // the retransmit timer takes over
	}
	if qp.probeHold(now, due, wait) {
		return
	}
	c.probes++
	qp.dev.stats.LossProbes.Add(1)
	c.heardAt, c.probeHeldAt = now, time.Time{}
	qp.probe()
	if qp.sending() && c.probes < maxProbes {
		qp.setProbe(qp.probeWait())
	}
}

// probeHold holds back a probe due at due (wait after the last answer)
// for probeSettle when the silence may be this host's own: the timer fired
// well after its time (this process did not run: a loaded host, a
// descheduled VM), or datagrams wait unread in the link (its receive path
// has not run: link.Pender). A probe then would ask again for what came,
// and a responder that paces READs takes a READ asked again as a loss
// (resp_pace.go): a stall of the requester cut its READ rate to a tenth
// for the rest of a perftest run. A silence holds its probe at most
// for a quarter of wait (at least probeLateBy) in all: a receive path
// that does not run does not stop probes, and datagrams for other QPs
// delay a probe by that much at most.
func (qp *QP) probeHold(now, due time.Time, wait time.Duration) bool {
	c := &qp.comp
	hold := max(probeLateBy, wait/4)
	if !c.probeHeldAt.IsZero() && now.Sub(c.probeHeldAt) >= hold {
		return false
	}
	if now.Sub(due) <= hold && !qp.dev.inputPending() {
		return false
	}
	if c.probeHeldAt.IsZero() {
		c.probeHeldAt = now
	}
	qp.dev.stats.ProbesDeferred.Add(1)
	qp.setProbe(probeSettle)
	return true
}

// probeAnswered takes a READ response to a loss probe (response i of w):
// if nothing after it has landed, the rest of w was lost (the responder
// answers in order, and a slow one would have sent it first).
func (qp *QP) probeAnswered(w *sendWQE, i int) {
	if !qp.comp.probeAnswer || w != &qp.sq[qp.comp.probeWQE%uint32(len(qp.sq))] || i != w.rrFrom {
		return
	}
	qp.comp.probeAnswer = false
	if !w.done && w.gotHi <= w.rrTo {
		w.gotHi = w.npkts
	}
}

// readsIncomplete reports an outstanding READ still waiting for responses.
func (qp *QP) readsIncomplete() bool {
	n := uint32(len(qp.sq))
	for i := qp.sqHead; i != qp.sqTail; i++ {
		v := &qp.sq[i%n]
		if !v.started {
			return false
		}
		if v.kind == kindRead && !v.done {
			return true
		}
	}
	return false
}

// probe sends the loss probe: the first missing response of the oldest
// incomplete READ, or else the oldest unacknowledged packet, asking for an
// ACK.
func (qp *QP) probe() {
	n := uint32(len(qp.sq))
	for i := qp.sqHead; i != qp.sqTail; i++ {
		v := &qp.sq[i%n]
		if !v.started {
			break
		}
		if v.kind != kindRead || v.done {
			continue
		}
		// The first incomplete READ: its first missing response (or the
		// missing range a lost re-request asked for). If the answer
		// brings nothing after it, the rest was lost (probeAnswered).
		end := v.acked + 1
		if v.rrTo > v.acked && v.rrFrom == v.acked {
			end = v.rrTo
		}
		qp.reRequest(v, v.acked, end)
		qp.comp.probeAnswer, qp.comp.probeWQE = true, i
		return
	}
	w := qp.sqHeadWQE()
	if w.done || !w.started || w.kind == kindLocal || wire.PSNDiff(qp.req.sentPSN, qp.compPSN()) <= 0 {
		return // nothing sent is unanswered (a probe resends, it never sends anew)
	}
	idx, pkt := qp.req.idx, qp.req.pkt
	qp.req.idx, qp.req.pkt = qp.sqHead, w.acked
	qp.req.probe = true
	qp.sendWQEPackets(w)
	qp.req.probe = false
	if qp.sending() {
		qp.req.idx, qp.req.pkt = idx, pkt
	}
	qp.comp.probeAnswer = true
}

// afterProbe takes the answer to a probe (an ACK that moved the window):
// packets still unacknowledged after it were lost, unless more answers
// follow within probeSettle: the first ACK after a probe may be one that
// waited in this host's receive queue through a stall, and the ones
// behind it move the window on. Without them the requester goes back to
// the first unacknowledged packet (the probe timer's nakPending branch).
func (qp *QP) afterProbe() {
	c := &qp.comp
	c.probeAnswer = false
	if qp.outstanding() && wire.PSNDiff(qp.req.sentPSN, qp.compPSN()) > 0 && !qp.readsIncomplete() {
		c.nakPending, c.nakPSN, c.nakProbe = true, qp.compPSN(), true
		qp.setProbe(max(2*c.srtt, probeSettle))
	}
}
