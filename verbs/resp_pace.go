package verbs

import (
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/wire"
)

// This file paces the responder's RDMA READ responses (the responder is
// resp.go; docs/protocol.md §5.7 for READ and its duplicates).
//
// What rxe does. rxe_resp.c read_reply builds and transmits one response
// per call and returns RESPST_DONE while the READ has bytes left; the
// responder task (rxe_responder, looped by rxe_task.c rxe_do_task) calls it
// again at once, so a READ is answered in one burst as fast as the CPU
// builds packets (the 6.1 tasklet loop has no bound; newer kernels yield
// the CPU after RXE_MAX_ITERATIONS, 1024, calls and reschedule the task,
// which is fairness, not pacing);
// the in-flight skb limit (RXE_INFLIGHT_SKBS_PER_QP_HIGH 64, rxe_req.c)
// holds back the requester only. While a READ is being answered
// (qp->resp.res set) rxe_resp.c get_req keeps going to READ_REPLY, so later
// requests, duplicates included, wait behind it; a duplicate READ
// (duplicate_request) then points that one resource at the requested PSN
// and replays from there: rxe never sends two copies at once. rxe is
// paced only by its own speed.
//
// Why softroce paces. The requester (rxe_comp.c check_psn, and comp.go)
// drops every response after a missing one, and every response it gets,
// dropped or not, restarts its retransmit timer: it asks again, from the
// first missing PSN and for every later READ, only after the responses
// have stopped and its timeout has passed in silence. softroce answers at
// host speed; a slow requester (a kernel in an emulated guest) overruns,
// keeps a prefix of each burst and has the rest sent again and again. And
// whatever the rate, everything sent after a loss is wasted until the
// requester can speak, which it does only when the responses pause.
//
// The rule, per QP:
//   - Unpaced until the requester shows a loss: responses leave at once,
//     as before, and a requester that keeps up is never slowed down.
//   - A loss is a duplicate READ for a PSN already sent (of a stream being
//     sent or finished); the requester's PSN says how far it got since the
//     current window began. A loss paces the QP: paceStartBurst responses
//     per paceTick at first, half the rate at each later loss (down to
//     paceMinBurst), and windows of twice the responses the requester took
//     (at least paceMinWin) after which the responses pause for longer
//     than the requester takes to ask again (1.5 times the longest seen;
//     at first 1.5 local ACK timeouts): a requester that lost something
//     asks again during the pause, so a loss wastes at most a window, not
//     the whole remainder. One requester timeout re-asks for every
//     outstanding READ at once, so losses count once per paceCutGuard.
//     New READs and duplicates share the tick's budget.
//   - A window the requester is content with (the pause ends with no word,
//     or it asks for exactly the next response: its timer ran out waiting)
//     doubles the window (at paceMaxWin, unbounded) and raises the rate by
//     a quarter, as does a stream sent to its end without a loss once the
//     window is unbounded; at paceMaxBurst and an unbounded window the QP
//     is unpaced again.
//   - A duplicate for a stream still being sent moves its cursor back to
//     the requested PSN instead of starting a second copy, and streams are
//     served oldest PSN first, since the requester drops everything beyond
//     its first missing response.
const (
	paceTick       = time.Millisecond
	paceStartBurst = 16
	paceMinBurst   = 4
	paceMaxBurst   = 512
	paceMinWin     = 64
	paceMaxWin     = 1 << 16
	paceCutGuard   = 8 * paceTick
	// crossQuiet: a burst of responses after a quiet this long, and a
	// duplicate READ within this long after it began, crossed on the
	// way (readCrossed). Half the requester's shortest loss probe wait
	// (recover.go, minProbeTimeout).
	crossQuiet = 5 * time.Millisecond
	// A full window first waits this many times the QP's own local ACK
	// timeout (the requester's is unknown; connection managers and
	// perftest give both sides the same), at least paceMinPause, then this
	// many times the longest the requester took to ask again, at most
	// paceMaxPause, before it takes the requester to have it all.
	pausePerTimeout = 1.5
	paceMinPause    = 10 * time.Millisecond
	paceNoTimeout   = 100 * time.Millisecond // the wait when the QP has no timeout
	paceMaxPause    = 2 * time.Second
)

// readPacer is a QP's READ response pacing state (nil until the first
// loss: an unpaced QP needs none). It lives in respState, so RESET drops
// it; its timer then finds it stale.
type readPacer struct {
	burst   int    // responses per tick; 0: unpaced
	tokens  int    // responses left to send in this tick
	win     int    // responses per window; 0: unbounded
	inWin   int    // responses sent in the current window
	mark    uint32 // PSN the current window started at
	paused  bool   // the window is full: waiting for the requester
	guessed bool   // the last pause ended with no word from the requester
	pause   time.Duration
	// quietSince is when the last pause began.
	quietSince time.Time
	cuts       int32     // losses counted so far (a stream's epoch)
	lastEvent  time.Time // the last loss or content window counted
	timer      clock.Timer
	armed      bool
	due        time.Time
}

// startRead queues a new READ's responses (rcRead) and sends what the pace allows.
func (qp *QP) startRead(x *respRes) {
	x.next, x.sending = x.first, true
	if p := qp.resp.pace; p != nil {
		x.epoch = p.cuts
	}
	qp.sendReads()
}

// replayRead answers a duplicate READ for PSN psn of x (rcDuplicate): the
// stream restarts at psn, whether it is still being sent or finished. A
// PSN already sent means the requester lost something; the next PSN to
// send, while the window waits, that the requester has the window.
func (qp *QP) replayRead(x *respRes, psn uint32) {
	p := qp.resp.pace
	if p != nil {
		qp.paceHeard()
	}
	loss := !x.sending || wire.PSNDiff(psn, x.next) < 0
	switch {
	case p != nil && qp.dev.clock.Now().Sub(p.lastEvent) < paceCutGuard:
		// The rest of one requester retry, which re-asks for every
		// outstanding READ: the first of them counted.
		if p.paused && loss {
			p.newWindow(psn)
		}
	case loss && qp.resp.selective:
		// A requester that asks for parts of a READ keeps the responses
		// after a gap (readgap.go): pausing would only slow it down.
	case loss && qp.readCrossed(x):
		qp.dev.stats.ReadDupCrossed.Add(1)
	case loss:
		qp.paceLoss(x, psn)
		p = qp.resp.pace
	case p != nil && p.paused && psn == x.next && qp.nextRead() == x:
		p.lastEvent = qp.dev.clock.Now()
		qp.paceGrow(true)
		p.newWindow(psn)
	}
	x.next, x.sending = psn, true
	if p != nil {
		x.epoch = p.cuts
	}
	qp.sendReads()
}

// paceHeard learns how long the requester takes to ask again once the
// responses stop: a duplicate during a pause, or after a pause that ended
// with no word, came that long after the pause began. A full window waits
// pausePerTimeout times the longest seen.
func (qp *QP) paceHeard() {
	p := qp.resp.pace
	if !p.paused && !p.guessed {
		return
	}
	p.guessed = false
	took := qp.dev.clock.Now().Sub(p.quietSince)
	if d := time.Duration(float64(took) * pausePerTimeout); d > p.pause {
		p.pause = min(d, paceMaxPause)
	}
}

// pauseFor is how long a full window waits for the requester.
func (qp *QP) pauseFor() time.Duration {
	if qp.attr.Timeout == 0 {
		return paceNoTimeout
	}
	return max(time.Duration(float64(ackTimeout(qp.attr.Timeout))*pausePerTimeout), paceMinPause)
}

// newWindow starts a window at PSN psn.
func (p *readPacer) newWindow(psn uint32) {
	p.paused, p.inWin, p.mark = false, 0, psn
}

// paceLoss paces the QP after the requester asked again for psn of x,
// already sent.
func (qp *QP) paceLoss(x *respRes, psn uint32) {
	p := qp.resp.pace
	now := qp.dev.clock.Now()
	if p == nil {
		p = qp.newPacer()
		p.mark = x.first
	}
	p.pause = max(p.pause, qp.pauseFor())
	took := max(int(wire.PSNDiff(psn, p.mark)), 0)
	win := max(2*took, paceMinWin)
	if p.win > 0 {
		win = min(win, p.win)
	}
	p.win = win
	p.lastEvent = now
	p.cuts++
	if p.burst == 0 {
		p.burst = paceStartBurst
	} else {
		p.burst = max(p.burst/2, paceMinBurst)
	}
	p.tokens = p.burst
	p.newWindow(psn)
	qp.dev.stats.ReadPaceCuts.Add(1)
	if l := qp.dev.log; l != nil {
		l.Debug("READ responses paced", "qpn", qp.qpn, "per tick", p.burst, "window", p.win, "took", took)
	}
}

// unpace ends pacing (the requester keeps responses after a gap: it asks
// for parts of READs) and sends what waited for the pace.
func (qp *QP) unpace() {
	p := qp.resp.pace
	if p == nil {
		return
	}
	p.burst, p.win, p.paused = 0, 0, false
	qp.sendReads()
}

// newPacer gives the QP an (unpaced) pacer.
func (qp *QP) newPacer() *readPacer {
	p := &readPacer{}
	p.timer = qp.dev.clock.AfterFunc(1<<62, func() { qp.onPaceTimer(p) })
	p.timer.Stop()
	qp.resp.pace = p
	return p
}

// paceGrow raises the pace after the requester kept up: a quarter more
// rate, and after a window (not just a stream) twice the window.
func (qp *QP) paceGrow(window bool) {
	p := qp.resp.pace
	if p.burst > 0 {
		p.burst += p.burst/4 + 1
	}
	if p.win > 0 && window {
		p.win *= 2
		if p.win >= paceMaxWin {
			p.win = 0
		}
	}
	if p.burst >= paceMaxBurst && p.win == 0 {
		p.burst = 0 // unpaced again
	}
}

// nextRead returns the stream to send next: the one with the oldest
// cursor (nil if none is being sent).
func (qp *QP) nextRead() *respRes {
	var best *respRes
	var bestD int32
	for i := range qp.resp.res {
		x := &qp.resp.res[i]
		if !x.valid || x.kind != kindRead || !x.sending {
			continue
		}
		if d := wire.PSNDiff(x.next, qp.resp.ePSN); best == nil || d < bestD {
			best, bestD = x, d
		}
	}
	return best
}

// sendReads sends the queued READ responses the pace allows now, oldest
// stream first, and arms the pacing timer if some are left: for the next
// tick, or for the pause after a full window.
func (qp *QP) sendReads() {
	p := qp.resp.pace
	if p != nil && p.paused {
		return
	}
	budget := -1 // unpaced
	if p != nil && p.burst > 0 {
		budget = max(min(p.tokens, p.burst), 0)
	}
	for budget != 0 {
		x := qp.nextRead()
		if x == nil {
			return
		}
		limit := budget
		if p != nil && p.win > 0 {
			if p.inWin >= p.win {
				break
			}
			if limit < 0 || limit > p.win-p.inWin {
				limit = p.win - p.inWin
			}
		}
		n, ok := qp.readResponses(x, limit)
		if !ok {
			return
		}
		if budget > 0 {
			budget -= n
		}
		if p != nil {
			p.tokens -= n
			p.inWin += n
			if !x.sending && x.epoch == p.cuts && p.win == 0 {
				// Sent to its end without a loss; with windows, only a
				// window the requester is content with counts.
				qp.paceGrow(false)
			}
		}
	}
	if p == nil || qp.nextRead() == nil {
		return
	}
	qp.dev.stats.ReadPaced.Add(1)
	if p.win > 0 && p.inWin >= p.win {
		now := qp.dev.clock.Now()
		p.paused, p.guessed, p.quietSince = true, false, now
		p.arm(now, p.pause)
		return
	}
	p.arm(qp.dev.clock.Now(), paceTick)
}

// arm sets the pacing timer to fire d after now, unless it is set to fire
// sooner.
func (p *readPacer) arm(now time.Time, d time.Duration) {
	due := now.Add(d)
	if p.armed && !due.Before(p.due) {
		return
	}
	p.armed, p.due = true, due
	p.timer.Reset(d)
}

// onPaceTimer sends the next tick's READ responses, or ends a window's
// pause: the requester said nothing, so it has the window.
func (qp *QP) onPaceTimer(p *readPacer) {
	qp.mu.Lock()
	defer qp.flushUnlock()
	if qp.resp.pace != p || !p.armed || qp.dead || qp.state < QPStateRTR || qp.state == QPStateErr ||
		qp.dev.closed.Load() {
		return
	}
	if qp.dev.clock.Now().Before(p.due) {
		return // stale: re-armed for later, it will call again
	}
	p.armed = false
	p.tokens = p.burst
	if p.paused {
		p.lastEvent = qp.dev.clock.Now()
		qp.paceGrow(true)
		p.guessed = true
		next := p.mark
		if x := qp.nextRead(); x != nil {
			next = x.next
		}
		p.newWindow(next)
	}
	qp.sendReads()
}

// readResponses sends up to limit (all if limit < 0) of x's responses from
// x.next on and reports how many it sent; the R_Key is re-validated for
// every packet (docs/protocol.md §7.1). A failed check NAKs, moves the QP to
// ERR and returns false.
func (qp *QP) readResponses(x *respRes, limit int) (int, bool) {
	n := int(wire.PSNDiff(x.last, x.first)) + 1
	i := int(wire.PSNDiff(x.next, x.first))
	if i < 0 || i >= n {
		x.sending = false // cannot happen: duplicates are checked against [first, last]
		return 0, true
	}
	sent := 0
	for ; i < n && sent != limit; i++ {
		o := wire.RCReadResponseMiddle
		switch {
		case n == 1:
			o = wire.RCReadResponseOnly
		case i == 0:
			o = wire.RCReadResponseFirst
		case i == n-1:
			o = wire.RCReadResponseLast
		}
		if !qp.readResponse1(x, i, o) {
			return sent, false
		}
		sent++
	}
	x.next = wire.PSNAdd(x.first, i)
	if i >= n {
		x.sending = false
	}
	if sent > 0 {
		qp.readSent(x)
	}
	return sent, true
}

// readSent notes that x sent responses now: when a burst of responses
// began after a quiet (readCrossed).
func (qp *QP) readSent(x *respRes) {
	r := &qp.resp
	now := qp.rxNow()
	if now.Sub(r.readSentAt) >= crossQuiet {
		r.readBurstAt = now
	}
	r.readSentAt, x.sentAt = now, now
}

// readCrossed reports a duplicate READ for x, whose responses this QP sent
// after a quiet of crossQuiet or more, that came less than crossQuiet after
// that burst began: the requester probed the responder's own silence (a
// loss probe, comp side of recover.go, after about 10 ms without an
// answer) and its request crossed the responses on the way. It says
// nothing of a loss, and pacing for it cut a READ stream to a tenth of its
// rate for a perftest run when this host stalled the responder for 10 ms.
// A loss in the first crossQuiet of a burst after a quiet is taken so too:
// it is replayed, unpaced. Only on an unpaced QP: a paced one's quiets are
// its own pauses, after which a requester that still overruns loses the
// window's first responses.
func (qp *QP) readCrossed(x *respRes) bool {
	r := &qp.resp
	if p := r.pace; p != nil && (p.burst > 0 || p.win > 0) {
		return false
	}
	return !r.readBurstAt.IsZero() && !x.sentAt.Before(r.readBurstAt) && qp.rxNow().Sub(r.readBurstAt) < crossQuiet
}

// readRange answers a duplicate READ for part of x, k responses from
// x's response i on (rcDuplicate), at once and beside x's own stream,
// which it leaves where it is: as rxe_resp.c read_reply does for a
// replay, the first is FIRST (or ONLY) at the READ's first PSN, else
// MIDDLE, and the range's last is LAST.
func (qp *QP) readRange(x *respRes, i, k int) bool {
	for j := i; j < i+k; j++ {
		o := wire.RCReadResponseMiddle
		switch {
		case j == 0 && k == 1:
			o = wire.RCReadResponseOnly
		case j == 0:
			o = wire.RCReadResponseFirst
		case j == i+k-1:
			o = wire.RCReadResponseLast
		}
		if !qp.readResponse1(x, j, o) {
			return false
		}
	}
	return true
}

// readResponse1 sends x's response i with opcode o; false after a failed
// R_Key check (NAK sent, QP in ERR).
func (qp *QP) readResponse1(x *respRes, i int, o wire.Opcode) bool {
	tos, ttl := qp.grh()
	off := i * qp.pmtu
	plen := min(qp.pmtu, int(x.length)-off)
	var h wire.Packet
	psn := wire.PSNAdd(x.first, i)
	h.BTH = wire.BTH{Opcode: o, DestQP: qp.attr.DestQPNum, PSN: psn}
	h.AETH = wire.AETH{Syndrome: wire.SyndromeACK, MSN: qp.resp.msn & wire.PSNMask}
	p, pl := qp.newPacket(&h, plen, qp.dst, tos, ttl)
	if plen > 0 {
		mr, moff := qp.rAcquire(x.rkey, x.va+uint64(off), uint64(plen), AccessRemoteRead)
		if mr == nil {
			qp.cancelPacket()
			x.valid, x.sending = false, false
			qp.nakError(psn, wire.SyndromeNAKRemAcc, WCRemAccessErr)
			return false
		}
		ok := qp.fillPayload(p, pl, mr, mr.buf[moff:moff+plen])
		mr.release()
		if !ok {
			qp.cancelPacket()
			x.valid, x.sending = false, false
			qp.nakError(psn, wire.SyndromeNAKRemAcc, WCRemAccessErr)
			return false
		}
	}
	return true
}
