package verbs

import (
	"encoding/binary"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/wire"
)

// This file is the completer (rxe: rxe_comp.c): it takes the responses to
// what the requester (req.go) sent, completes send WQEs, and starts retries
// (timer.go holds the retransmit and RNR timers).

// compState is the completer's state (rxe: rxe_comp_info): the retry
// budgets, the retry sequence in progress and the retransmit and RNR
// timers.
type compState struct {
	retryLeft  int
	rnrLeft    int
	rnrWait    bool // an RNR NAK stopped the requester until the RNR timer fires
	rewound    bool // a retry sequence started and no positive answer yet (rxe: started_retry)
	backoff    int  // consecutive retransmit timeouts of the same PSN
	heard      bool // a response for outstanding work arrived since the last retry
	heardTimer bool // ... since the retransmit timer last fired
	retryArmed bool
	retryDue   time.Time   // when the armed retransmit timer expires (an earlier callback is stale)
	retryFrom  time.Time   // when it was armed
	retryTimer clock.Timer // the retransmit timer, and the loss probe's (syncTimer)
	timerSet   bool        // retryTimer is set, to fire at timerAt (syncTimer)
	timerAt    time.Time
	rnrTimer   clock.Timer
	rng        uint64 // retransmit jitter generator state
	// Early loss recovery (recover.go).
	srtt, rttvar time.Duration // smoothed round-trip time and its variation; 0: no sample yet
	rttOn        bool          // a packet is being timed
	rttPSN       uint32
	rttAt        time.Time
	probeArmed   bool
	probeDue     time.Time
	probes       int       // probes sent since the last progress
	heardAt      time.Time // the last answer (or probe)
	probeHeldAt  time.Time // when the probe was first held back in this silence (recover.go); zero: not held
	probeAnswer  bool      // a probe is out: the next ACK that moves the window answers it (or a READ response, probeWQE's)
	probeWQE     uint32
	nakPending   bool // a NAK during a retry waits out the reordering window (or a probe's answer, probeSettle)
	nakPSN       uint32
	nakProbe     bool // nakPending is a probe's answer
	// firstWait: a READ's first response is missing while later ones
	// landed; the probe timer fires at the end of firstWindow, and the
	// READ is asked for again then if it is still missing (firstDue).
	firstWait, firstDue bool
}

// completer handles ACK, NAK, read responses and atomic ACKs (docs/protocol.md §5.3, §5.8). It
// takes rxe's steps (check_psn, check_ack in rxe_comp.c) before a response
// may change anything: its PSN must lie between the oldest outstanding WQE
// and the last PSN sent and inside a WQE that is waiting for it, and its
// opcode must fit that WQE (an ACK or NAK for any request, a read response
// for a READ, FLUSH or ATOMIC_WRITE, an atomic ACK for an atomic).
// Anything else is dropped and counted (Stats.DropBadResponse; answers
// older than what is still unacknowledged in Stats.DropResponse): one
// spoofed packet must not move the QP to ERR or complete work never sent.
func (qp *QP) completer(p *wire.Packet) {
	w := qp.checkPSN(p)
	if w == nil {
		return
	}
	if p.Mask&wire.HasAETH == 0 || p.AETH.IsACK() {
		qp.rttSample(p.BTH.PSN)
	}
	if p.BTH.Opcode == wire.RCAcknowledge {
		qp.doAck(p, w)
		return
	}
	if !checkResponseKind(p, w) {
		// An answer of the wrong kind for the WQE its PSN names (rxe errors
		// the QP; a spoofed packet must not).
		qp.dropBad()
		return
	}
	qp.doResponse(p, w)
}

// checkPSN is the completer's first step (rxe: check_psn): it returns the
// outstanding WQE whose PSN range holds p's PSN, or nil after counting
// p as dropped (wrong QP state, a PSN never sent, nothing outstanding, a
// duplicate of a completed WQE, or no WQE waiting for that PSN). Only
// responses that pass it and the later checks restart the retransmit timer
// (answered).
func (qp *QP) checkPSN(p *wire.Packet) *sendWQE {
	st := &qp.dev.stats
	if !qp.sending() {
		st.DropQPState.Add(1)
		return nil
	}
	psn := p.BTH.PSN
	if wire.PSNDiff(psn, qp.req.sentPSN) >= 0 {
		qp.dropBad() // a PSN never sent
		return nil
	}
	oldest, ok := qp.oldestPSN()
	if !ok {
		st.DropResponse.Add(1) // nothing outstanding: a late duplicate (or forged)
		return nil
	}
	if wire.PSNDiff(psn, oldest) < 0 {
		st.DropResponse.Add(1) // answers a completed WQE (a duplicate)
		return nil
	}
	w := qp.wqeAt(psn)
	if w == nil {
		qp.dropBad()
	}
	return w
}

// doAck handles an ACK or NAK (rxe: check_ack's AETH branch) for w, the
// WQE its PSN falls in.
func (qp *QP) doAck(p *wire.Packet, w *sendWQE) {
	psn, a := p.BTH.PSN, p.AETH
	if wire.PSNDiff(psn, qp.compPSN()) < 0 {
		qp.dev.stats.DropResponse.Add(1) // acknowledges nothing new
		return
	}
	switch {
	case a.IsACK():
		qp.onACK(psn)
	case a.IsRNR():
		qp.onRNRNAK(psn, w, a)
	case a.Value() == wire.NAKPSNSeqError:
		qp.onSeqNAK(psn, w)
	default:
		qp.onErrorNAK(psn, w, a)
	}
}

// onACK takes a positive ACK: it completes the SEND/WRITE WQEs up to and
// including psn; passing an unanswered read or atomic means its response
// was lost, which starts a retry (unless one is under way).
func (qp *QP) onACK(psn uint32) {
	progress, _, lost := qp.ackBefore(psn, true)
	if progress || lost {
		qp.answered()
	}
	if progress {
		qp.progressed()
		if qp.comp.probeAnswer {
			qp.afterProbe()
		}
	} else if !lost {
		qp.dev.stats.DropResponse.Add(1) // inside an unanswered read: tells nothing
	}
	if lost && qp.sending() && qp.readsLostBefore(psn) && !qp.comp.rewound {
		qp.retry() // an atomic's answer was lost (READs ask again for their rest: readgap.go)
	}
}

// onRNRNAK takes an RNR NAK: the packets before psn are acknowledged, and
// the requester waits the RNR timer before it resends, spending one of
// rnr_retry's retries (docs/protocol.md §5.6).
func (qp *QP) onRNRNAK(psn uint32, w *sendWQE, a wire.AETH) {
	if w.kind.rdLike() { // RNR answers a SEND or WRITE with immediate only
		qp.dropBad()
		return
	}
	qp.dev.stats.RNRNAKsRcvd.Add(1)
	qp.answered()
	if progress, _, _ := qp.ackBefore(psn, false); progress {
		qp.renewRetry()
		qp.completeReady()
	}
	if !qp.sending() {
		return
	}
	if qp.attr.RNRRetry != rnrRetryInfinite {
		if qp.comp.rnrLeft <= 0 {
			qp.failHead(WCRNRRetryExcErr)
			return
		}
		qp.comp.rnrLeft--
	}
	qp.waitRNR(a.Value())
}

// onSeqNAK takes a PSN sequence error NAK: the packets before psn are
// acknowledged, and a retry starts from the oldest unanswered PSN.
func (qp *QP) onSeqNAK(psn uint32, w *sendWQE) {
	st := &qp.dev.stats
	if w.kind.rdLike() && psn != w.firstPSN {
		qp.dropBad() // a responder expects a request's first PSN
		return
	}
	st.SeqNAKsRcvd.Add(1)
	// A NAK implicitly acknowledges the packets before its PSN. As
	// rxe, it starts a retry only if none is under way: the retry
	// state is cleared by a positive ACK, a read response or atomic
	// ACK, or a completed WQE, not by a NAK that moves the window
	// inside a message (with reordering each gap draws its own NAK,
	// and rewinding on each multiplies the traffic).
	progress, completed, _ := qp.ackBefore(psn, false)
	if progress {
		qp.answered()
		qp.renewRetry()
		qp.completeReady()
	}
	if completed {
		qp.comp.rewound = false
	}
	if !qp.sending() {
		return
	}
	if qp.comp.rnrWait || qp.comp.rewound {
		// Ignored: no answer either (no timer restart; rxe goes to
		// done without mod_timer), or a NAK stream would keep a
		// QP whose retransmissions never arrive alive for ever.
		st.SeqNAKsIgnored.Add(1) // the RNR timer restarts the requester, or a retry is under way
		if progress && qp.comp.rewound && !qp.comp.rnrWait {
			// The responder took part of the retransmission and found
			// another gap (or an old packet overtook the retransmission
			// of psn): go back to it after the reordering window unless
			// an answer past it comes first (recover.go).
			qp.comp.nakPending, qp.comp.nakPSN, qp.comp.nakProbe = true, psn, false
			qp.setProbe(qp.reorderWindow())
		}
		return
	}
	qp.answered()
	qp.retry()
}

// onErrorNAK takes an invalid request, remote access or remote operational
// error NAK: the packets before psn are acknowledged and the WQE psn names
// completes with the matching error (the QP goes to ERR); if an earlier
// read or atomic is still unanswered, its response was lost and a retry
// starts instead (rxe: retry).
func (qp *QP) onErrorNAK(psn uint32, w *sendWQE, a wire.AETH) {
	qp.dev.stats.NAKsRcvd.Add(1)
	qp.answered()
	qp.ackBefore(psn, false)
	if !qp.sending() {
		return
	}
	if qp.sqHeadWQE() != w {
		if !qp.comp.rewound {
			qp.retry()
		}
		return
	}
	qp.failHead(nakStatus(a.Value()))
}

// checkResponseKind reports whether p, a read response or atomic ACK, is
// the kind of answer w waits for (rxe: check_ack's opcode checks): an
// atomic ACK for an atomic, a read response for a READ, a 0-byte
// READ_RESPONSE_ONLY for a FLUSH or ATOMIC_WRITE, and an AETH (when it has
// one) that is an ACK.
func checkResponseKind(p *wire.Packet, w *sendWQE) bool {
	isAtomicAck := p.BTH.Opcode == wire.RCAtomicAcknowledge
	okKind := (isAtomicAck && w.kind == kindAtomic) || (!isAtomicAck && p.Mask&wire.IsReadResponse != 0 &&
		(w.kind == kindRead || (w.kind == kindFlush || w.kind == kindAtomicWrite) && p.BTH.Opcode == wire.RCReadResponseOnly))
	// (READ_RESPONSE_MIDDLE has no AETH: p.AETH then holds an earlier packet's.)
	return okKind && (p.Mask&wire.HasAETH == 0 || p.AETH.IsACK())
}

// doResponse handles a read response or atomic ACK of the right kind for
// w: it acknowledges what precedes it, retries if an earlier answer was
// lost, drops duplicates and responses after a gap, and otherwise takes
// the payload (doRead, doAtomic) and moves on.
func (qp *QP) doResponse(p *wire.Packet, w *sendWQE) {
	if w.kind == kindRead {
		qp.readResponse(p, w) // readgap.go
		return
	}
	psn := p.BTH.PSN
	if d := wire.PSNDiff(psn, wire.PSNAdd(w.firstPSN, w.acked)); d >= 0 || w != qp.sqHeadWQE() {
		// The expected response, one after a gap (the peer is streaming
		// a READ's responses, some lost), or one for a later WQE: an
		// answer. Older ones of the same WQE are duplicates.
		qp.answered()
	}
	progress, _, _ := qp.ackBefore(psn, false)
	if !qp.sending() {
		return
	}
	if qp.sqHeadWQE() != w {
		// The answer to a later request arrived first: the earlier
		// read's or atomic's response was lost (or is late); retry from it (docs/protocol.md §5.3, §5.5).
		if !qp.comp.rewound {
			qp.retry()
		} else if progress {
			qp.progressed()
		}
		return
	}
	if expect := wire.PSNAdd(w.firstPSN, w.acked); psn != expect {
		// A duplicate, or a gap (responses lost): dropped, as rxe. The
		// retransmit timer, which every response restarts, asks for the
		// rest once the stream has ended; re-asking at each gap would make
		// the responder replay the remainder once per gap.
		qp.dev.stats.DropResponse.Add(1)
		if progress {
			qp.progressed()
		}
		return
	}
	var ok bool
	switch w.kind {
	case kindAtomic:
		ok = qp.doAtomic(p, w)
	case kindRead:
		ok = qp.doRead(p, w)
	default: // FLUSH, ATOMIC_WRITE: 0-byte READ_RESPONSE_ONLY
		w.acked, w.done, ok = 1, true, true
	}
	if ok {
		qp.progressed()
	}
}

// doAtomic writes an atomic ACK's original value to the WQE's buffer
// (rxe: do_atomic); false if that failed and the QP went to ERR.
func (qp *QP) doAtomic(p *wire.Packet, w *sendWQE) bool {
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], p.AtomicAckETH.Orig)
	if !qp.dev.scatter(qp.pd, w.wr.SGList, 0, v[:]) {
		qp.failHead(WCLocProtErr)
		return false
	}
	w.acked, w.done = 1, true
	return true
}

// doRead places the next read response's payload in the WQE's buffer
// (rxe: do_read), after checking its size against the packet's place in
// the message (a full PMTU except the last, which ends it exactly); false
// if the response is malformed or the buffer refused it, and the QP went
// to ERR.
func (qp *QP) doRead(p *wire.Packet, w *sendWQE) bool {
	off := w.acked * qp.pmtu
	last := w.acked == w.npkts-1
	n := len(p.Payload)
	if (!last && n != qp.pmtu) || off+n > int(w.length) || (last && off+n != int(w.length)) ||
		(last != (p.Mask&(wire.Last|wire.Only) != 0)) {
		qp.failHead(WCBadRespErr)
		return false
	}
	if n > 0 && !qp.dev.scatter(qp.pd, w.wr.SGList, off, p.Payload) {
		qp.failHead(WCLocProtErr)
		return false
	}
	w.acked++
	w.done = last
	return true
}

// compPSN is the oldest PSN not yet acknowledged (or answered).
func (qp *QP) compPSN() uint32 {
	n := uint32(len(qp.sq))
	for i := qp.sqHead; i != qp.req.idx+1 && i != qp.sqTail; i++ {
		w := &qp.sq[i%n]
		if w.started {
			return wire.PSNAdd(w.firstPSN, w.acked)
		}
	}
	return qp.req.nextPSN
}

// ackBefore completes SEND/WRITE WQEs whose packets all precede psn
// (a response or NAK with PSN P acknowledges everything before P, docs/protocol.md §5.3).
// inclusive extends it to psn itself (an ACK). It reports progress, whether
// a WQE completed, and whether an unanswered read/atomic was passed (its
// response was lost).
func (qp *QP) ackBefore(psn uint32, inclusive bool) (progress, completed, lost bool) {
	n := uint32(len(qp.sq))
	for qp.sqHead != qp.sqTail {
		w := &qp.sq[qp.sqHead%n]
		if !w.started {
			return
		}
		if w.done {
			qp.completeHead()
			progress, completed = true, true
			continue
		}
		d := wire.PSNDiff(psn, w.lastPSN)
		if w.kind.rdLike() {
			if inclusive && d > 0 {
				lost = true
			}
			return
		}
		if d > 0 || (inclusive && d == 0) {
			w.done = true
			w.acked = w.npkts
			qp.completeHead()
			progress, completed = true, true
			if !qp.sending() {
				return
			}
			continue
		}
		// Partly acknowledged.
		k := int(wire.PSNDiff(psn, w.firstPSN))
		if inclusive {
			k++
		}
		if k > w.acked {
			w.acked = k
			progress = true
		}
		return
	}
	return
}

// nakStatus maps a NAK code to the requester's WC status (docs/protocol.md §5.8).
func nakStatus(code uint8) WCStatus {
	switch code {
	case wire.NAKInvalidReq:
		return WCRemInvReqErr
	case wire.NAKRemAccessErr:
		return WCRemAccessErr
	}
	return WCRemOpErr
}

// wqeAt returns the started WQE whose PSN range holds psn, nil if none.
// The caller checked that psn is not older than the oldest outstanding
// WQE: the search stops at the first WQE that ends at or after psn.
func (qp *QP) wqeAt(psn uint32) *sendWQE {
	n := uint32(len(qp.sq))
	for i := qp.sqHead; i != qp.sqTail; i++ {
		w := &qp.sq[i%n]
		if !w.started {
			return nil
		}
		if w.kind == kindLocal {
			continue
		}
		if wire.PSNDiff(psn, w.lastPSN) <= 0 {
			if wire.PSNDiff(psn, w.firstPSN) < 0 {
				return nil
			}
			return w
		}
	}
	return nil
}

// oldestPSN is the first PSN of the oldest outstanding WQE.
func (qp *QP) oldestPSN() (uint32, bool) {
	n := uint32(len(qp.sq))
	for i := qp.sqHead; i != qp.sqTail; i++ {
		w := &qp.sq[i%n]
		if !w.started {
			return 0, false
		}
		if w.kind != kindLocal {
			return w.firstPSN, true
		}
	}
	return 0, false
}

// dropBad counts a response that answers nothing this QP sent.
func (qp *QP) dropBad() {
	qp.dev.stats.DropBadResponse.Add(1)
}

// answered records a response the completer accepted as an answer to
// outstanding work (its PSN and kind fit a WQE and it is no stale
// duplicate): the peer is alive, so the retransmit timer restarts (rxe's
// completer re-arms it after a response it takes). Without this, a long
// stream of a READ's responses after a gap runs into the timer, whose
// retry makes the peer replay the rest once more. Dropped responses (stale,
// spoofed, of the wrong kind) must not call it: one every timeout would
// keep a QP with a dead peer from ever failing.
func (qp *QP) answered() {
	now := qp.rxNow() // a READ's responses each come here, many to a receive batch
	c := &qp.comp
	// Answers of one batch share its time: the first re-armed the timer
	// from it.
	if c.retryArmed && !now.Equal(c.retryFrom) {
		c.retryArmed = false
		qp.armRetryAt(now)
	}
	c.heard, c.heardTimer = true, true
	c.heardAt, c.probeHeldAt = now, time.Time{}
}

// renewRetry renews the retry budgets and the timer backoff and widens a
// narrowed send window: the oldest unacknowledged PSN moved (retry_cnt
// counts retries of the same PSN).
func (qp *QP) renewRetry() {
	qp.comp.retryLeft, qp.comp.rnrLeft = int(qp.attr.RetryCnt), int(qp.attr.RNRRetry)
	qp.comp.backoff = 0
	qp.comp.probes = 0
	qp.req.narrow = max(qp.req.narrow-windowGrow, 0)
}

// progressed restarts the timer and the retry budgets after an answer
// moved the window (rxe resets them when a WQE completes), and ends a
// retry sequence.
func (qp *QP) progressed() {
	qp.renewRetry()
	qp.comp.rewound = false
	qp.comp.nakPending = false
	// armRetry below restarts it from now; in a receive batch, whose
	// answers share its time (rxNow), the batch's first answer did.
	if qp.comp.retryArmed && !qp.rxNow().Equal(qp.comp.retryFrom) {
		qp.comp.retryArmed = false
		qp.syncTimer()
	}
	qp.completeReady()
	qp.req.budgetLost = false
	qp.budgetSync()
	qp.reqProgress()
	qp.armRetry()
}

// retry starts a retry sequence, spending one of retry_cnt's retries. As
// the IBTA spec and hardware RNICs (and unlike rxe, which never spends
// retry_cnt 7), retry_cnt N allows N retries for every value 0..7: the next
// failure completes the oldest WQE with RETRY_EXC_ERR and moves the QP to
// ERR. Only rnr_retry 7 means infinite (docs/protocol.md §5.5, §5.6).
//
// Every retry spends one: those a NAK or a lost response starts (as IBTA
// and rxe count them) and timer retries. The one waiver: a timer retry
// after the peer answered since the last retry (heard: a response the
// completer accepted, see answered, even one without progress) spends
// nothing (onRetryTimer calls resend): the budget detects a dead path,
// and a slow peer that is still streaming valid responses (rxe under load
// replays a READ's rest seconds late) is not one. Dropped responses
// (stale, spoofed, wrong kind) and ignored NAKs do not set heard, so they
// cannot refresh the budget; a dead peer is noticed after retry_cnt silent
// timeouts (RetryBudget bounds the time).
func (qp *QP) retry() {
	if qp.comp.retryLeft <= 0 {
		qp.failHead(WCRetryExcErr)
		return
	}
	qp.comp.retryLeft--
	qp.resend()
}

// resend starts a retry sequence without spending retry_cnt: it narrows
// the send window and rewinds to the oldest unanswered PSN.
func (qp *QP) resend() {
	qp.comp.heard = false
	qp.req.narrow = maxUnackedPSNs - max(qp.window()/2, minWindow)
	qp.rewind()
}

// failHead completes the oldest WQE with st and moves the QP to ERR.
func (qp *QP) failHead(st WCStatus) {
	if qp.sqHead != qp.sqTail {
		w := qp.sqHeadWQE()
		w.done, w.status = true, st
	}
	qp.toError()
}

// completeReady retires finished WQEs from the head, in order.
func (qp *QP) completeReady() {
	for qp.sqHead != qp.sqTail {
		w := qp.sqHeadWQE()
		if !w.done {
			return
		}
		st := w.status
		qp.completeHead()
		if st != WCSuccess && qp.typ == QPTypeRC {
			qp.toError()
			return
		}
	}
}
