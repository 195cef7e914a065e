package verbs

import (
	"time"

	"github.com/softroce/softroce/wire"
)

// This file paces the responder's RDMA READ responses (the responder is
// resp.go; docs/protocol.md §5.7 for READ and its duplicates).
//
// What rxe does. rxe_resp.c read_reply builds and transmits one response
// per call and returns RESPST_DONE while the READ has bytes left; the
// responder task (rxe_responder, looped by rxe_task.c rxe_do_task) calls it
// again at once, so a READ is answered in one burst as fast as the CPU
// builds packets. Kernels from 6.4 yield the CPU after RXE_MAX_ITERATIONS
// (1024) calls and reschedule the task, which is fairness, not pacing;
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
// first missing PSN and for every later READ, only after the stream has
// ended and a timeout has passed in silence. softroce answers at host
// speed; a slow requester (a kernel in an emulated guest) overruns, keeps
// a prefix of each burst and has the rest sent again and again.
//
// The rule, per QP:
//   - Unpaced (burst 0) until the requester shows a loss: responses leave
//     at once, as before, and a fast requester is never slowed down.
//   - A loss is a duplicate READ for a PSN already sent (of a stream
//     being sent or finished). It cuts the rate: the first cut paces at
//     paceStartBurst responses per paceTick, later ones halve it (down to
//     paceMinBurst). One requester timeout re-asks for every outstanding
//     READ at once, so cuts are at least paceCutGuard apart.
//   - A stream sent to its end without a cut since it (re)started adds one
//     response per tick; at paceMaxBurst the QP is unpaced again.
//   - A duplicate for a stream still being sent moves its cursor back to
//     the requested PSN instead of starting a second copy, and streams are
//     served oldest PSN first, since the requester drops everything beyond
//     its first missing response.
const (
	paceTick       = time.Millisecond
	paceStartBurst = 16
	paceMinBurst   = 1
	paceMaxBurst   = 512
	paceCutGuard   = 8 * paceTick
)

// readPacer is a QP's READ response pacing state (nil until the first
// loss: an unpaced QP needs none). It lives in respState, so RESET drops
// it; its timer then finds it stale.
type readPacer struct {
	burst   int   // responses per tick; 0: unpaced
	cuts    int32 // rate cuts so far (a stream's epoch)
	lastCut time.Time
	timer   Timer
	armed   bool
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
// PSN already sent means the requester lost something: the rate is cut.
func (qp *QP) replayRead(x *respRes, psn uint32) {
	if !x.sending || wire.PSNDiff(psn, x.next) < 0 {
		qp.paceCut()
	}
	x.next, x.sending = psn, true
	if p := qp.resp.pace; p != nil {
		x.epoch = p.cuts
	}
	qp.sendReads()
}

// paceCut lowers the READ response rate after a loss.
func (qp *QP) paceCut() {
	p := qp.resp.pace
	now := qp.dev.clock.Now()
	if p == nil {
		p = &readPacer{}
		p.timer = qp.dev.clock.AfterFunc(1<<62, func() { qp.onPaceTimer(p) })
		p.timer.Stop()
		qp.resp.pace = p
	} else if now.Sub(p.lastCut) < paceCutGuard {
		return
	}
	p.lastCut = now
	p.cuts++
	if p.burst == 0 {
		p.burst = paceStartBurst
	} else {
		p.burst = max(p.burst/2, paceMinBurst)
	}
	qp.dev.stats.ReadPaceCuts.Add(1)
	if l := qp.dev.log; l != nil {
		l.Debug("READ responses paced", "qpn", qp.qpn, "per tick", p.burst)
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
// stream first, and arms the pacing timer if some are left.
func (qp *QP) sendReads() {
	p := qp.resp.pace
	budget := -1 // unpaced
	if p != nil && p.burst > 0 {
		budget = p.burst
	}
	for budget != 0 {
		x := qp.nextRead()
		if x == nil {
			return
		}
		n, ok := qp.readResponses(x, budget)
		if !ok {
			return
		}
		if budget > 0 {
			budget -= n
		}
		if !x.sending && p != nil && p.burst > 0 && x.epoch == p.cuts {
			// Sent to its end without a cut: additive increase.
			if p.burst++; p.burst >= paceMaxBurst {
				p.burst = 0
			}
		}
	}
	if p != nil && qp.nextRead() != nil {
		qp.dev.stats.ReadPaced.Add(1)
		if !p.armed {
			p.armed = true
			p.timer.Reset(paceTick)
		}
	}
}

// onPaceTimer sends the next tick's READ responses.
func (qp *QP) onPaceTimer(p *readPacer) {
	qp.mu.Lock()
	defer qp.flushUnlock()
	if qp.resp.pace != p || qp.dead || qp.state < QPStateRTR || qp.state == QPStateErr || qp.dev.closed.Load() {
		return
	}
	p.armed = false
	qp.sendReads()
}

// readResponses sends up to limit (all if limit < 0) of x's responses from
// x.next on and reports how many it sent; the R_Key is re-validated for
// every packet (docs/protocol.md §7.1). A failed check NAKs, moves the QP to
// ERR and returns false.
func (qp *QP) readResponses(x *respRes, limit int) (int, bool) {
	tos, ttl := qp.grh()
	n := int(wire.PSNDiff(x.last, x.first)) + 1
	i := int(wire.PSNDiff(x.next, x.first))
	if i < 0 || i >= n {
		x.sending = false // cannot happen: duplicates are checked against [first, last]
		return 0, true
	}
	sent := 0
	for ; i < n && sent != limit; i++ {
		off := i * qp.pmtu
		plen := min(qp.pmtu, int(x.length)-off)
		var h wire.Packet
		o := wire.RCReadResponseMiddle
		switch {
		case n == 1:
			o = wire.RCReadResponseOnly
		case i == 0:
			o = wire.RCReadResponseFirst
		case i == n-1:
			o = wire.RCReadResponseLast
		}
		psn := wire.PSNAdd(x.first, i)
		h.BTH = wire.BTH{Opcode: o, DestQP: qp.attr.DestQPNum, PSN: psn}
		h.AETH = wire.AETH{Syndrome: wire.SyndromeACK, MSN: qp.resp.msn & wire.PSNMask}
		_, pl := qp.newPacket(&h, plen, qp.dst, tos, ttl)
		if plen > 0 {
			mr, moff := qp.rAcquire(x.rkey, x.va+uint64(off), uint64(plen), AccessRemoteRead)
			if mr == nil {
				qp.cancelPacket()
				x.valid, x.sending = false, false
				qp.nakError(psn, wire.SyndromeNAKRemAcc, WCRemAccessErr)
				return sent, false
			}
			copy(pl, mr.buf[moff:moff+plen])
			mr.release()
		}
		sent++
	}
	x.next = wire.PSNAdd(x.first, i)
	if i >= n {
		x.sending = false
	}
	return sent, true
}
