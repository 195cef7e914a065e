package verbs

import (
	"time"

	"github.com/softroce/softroce/wire"
)

// This file is the requester's side of READ loss recovery (the completer,
// comp.go, hands it every READ response; docs/protocol.md §5.5).
//
// A READ response carries its PSN, so its place in the local buffer is
// known whatever arrived before it. rxe's completer drops every response
// after a missing one and waits for its retransmit timer; softroce keeps
// them (up to readKeep responses past the first missing one) and asks at
// once for the missing ones only: a READ request whose PSN, VA and length
// name the missing range, which the responder serves as a duplicate READ
// (IBTA 9.7.5.1.4 / o9-36: a duplicate READ's PSN lies in the original's
// range and its VA and length map into it; rxe_resp.c duplicate_request
// replays exactly the range asked for, MIDDLE..LAST). A READ completes only
// when every response from its first on has landed, and in order with the
// other WQEs (completeReady).
//
// rxe's responder moves its record of the original READ to each duplicate
// it serves (va_org = the duplicate's VA) and silently drops a later
// duplicate that starts below it. So the re-requests of one READ never
// start below an earlier one's start: only the first missing range is
// asked for, and the next range once that one has landed; a re-request
// whose responses are lost in turn is asked for again from the same start
// (when a later response of that range shows the loss, or by the loss probe,
// recover.go). A retransmit timeout asks for everything from the first
// missing response on, as before.

// readKeep is how many responses past the first missing one a READ keeps
// (a bitmap per WQE: 1024 responses are 1 MiB at rxe's 1024-byte MTU).
const readKeep = 1024

func (w *sendWQE) hasGot(i int) bool { return w.got[(i%readKeep)/64]&(1<<(i%64)) != 0 }
func (w *sendWQE) setGot(i int)      { w.got[(i%readKeep)/64] |= 1 << (i % 64) }
func (w *sendWQE) clearGot(i int)    { w.got[(i%readKeep)/64] &^= 1 << (i % 64) }

// landedAny reports a response kept past the first missing one.
func (w *sendWQE) landedAny() bool {
	for _, g := range w.got {
		if g != 0 {
			return true
		}
	}
	return false
}

// readResponse takes a READ response for w, any outstanding READ (not only
// the oldest WQE): it places the payload where its PSN says, completes
// what it acknowledges, and asks again for what it shows lost.
func (qp *QP) readResponse(p *wire.Packet, w *sendWQE) {
	i := int(wire.PSNDiff(p.BTH.PSN, w.firstPSN))
	before := qp.compPSN()
	inRR := i > w.acked && i < w.rrTo // a response of a re-request, past its first: that one was lost (if fresh)
	fresh := !w.done && i >= w.acked && i < w.acked+readKeep && (i == w.acked || !w.hasGot(i))
	if i >= w.acked || w != qp.sqHeadWQE() {
		// The peer is alive: a response not older than the first missing
		// one (a slow peer replaying), or for a later WQE. Older ones are
		// stale duplicates, and must not keep a QP with a dead peer alive.
		qp.answered()
	}
	qp.ackBefore(p.BTH.PSN, false)
	if !qp.sending() {
		return
	}
	if !fresh {
		qp.dev.stats.DropResponse.Add(1) // a duplicate, or beyond what is kept (asked for again later)
	} else if !qp.placeRead(p, w, i) {
		return
	} else {
		qp.probeAnswered(w, i) // recover.go
	}
	// Everything before w was answered or lost.
	lost := qp.passedBefore(w)
	if qp.compPSN() != before {
		qp.progressed()
	} else if fresh {
		qp.completeReady()
	}
	if !qp.sending() {
		return
	}
	if lost {
		// An atomic's (or FLUSH's) answer before it was lost: retry from it (docs/protocol.md §5.3, §5.5).
		if !qp.comp.rewound {
			qp.retry()
		}
		return
	}
	qp.fillGaps(w, inRR && fresh)
}

// placeRead checks a READ response against its place in the message (a
// full PMTU except the last, which ends the message exactly; FIRST or ONLY
// at the first, MIDDLE or LAST after it, LAST or ONLY at the end: a
// re-request's responses end with LAST wherever the range ends) and places
// its payload; false if the response is malformed or the buffer refused
// it, and the QP went to ERR.
func (qp *QP) placeRead(p *wire.Packet, w *sendWQE, i int) bool {
	off := i * qp.pmtu
	last := i == w.npkts-1
	n := len(p.Payload)
	m := p.Mask
	var opOK bool
	switch {
	case i == 0:
		opOK = m&(wire.First|wire.Only) != 0 && (m&wire.Only == 0 || last || n == qp.pmtu)
	case last:
		opOK = m&wire.Last != 0
	default:
		opOK = m&(wire.Middle|wire.Last) != 0
	}
	if last && m&wire.First != 0 {
		opOK = false
	}
	if !opOK || (!last && n != qp.pmtu) || off+n > int(w.length) || (last && off+n != int(w.length)) {
		qp.failHead(WCBadRespErr)
		return false
	}
	if n > 0 && !qp.dev.scatter(qp.pd, w.wr.SGList, off, p.Payload) {
		qp.failHead(WCLocProtErr)
		return false
	}
	if i == w.acked {
		w.acked++
		for w.acked < w.npkts && w.hasGot(w.acked) {
			w.clearGot(w.acked)
			w.acked++
		}
	} else {
		w.setGot(i)
	}
	w.gotHi = max(w.gotHi, i+1)
	w.done = w.acked == w.npkts
	return true
}

// passedBefore applies an answer for w to the WQEs before it: a responder
// answers in PSN order, so a SEND or WRITE before it was received (an
// implicit acknowledgement), and a READ before it was answered to its end:
// what did not land was lost. It reports an unanswered atomic, FLUSH or
// ATOMIC_WRITE before w (its answer was lost).
func (qp *QP) passedBefore(w *sendWQE) (lost bool) {
	n := uint32(len(qp.sq))
	for i := qp.sqHead; i != qp.sqTail; i++ {
		v := &qp.sq[i%n]
		if v == w || !v.started {
			return lost
		}
		if v.done || v.kind == kindLocal {
			continue
		}
		switch v.kind {
		case kindRead:
			v.gotHi = v.npkts
		case kindSend, kindWrite:
			v.done, v.acked = true, v.npkts
		default:
			lost = true
		}
	}
	return lost
}

// readsLostBefore is passedBefore for an ACK of psn (inclusive): the READs
// whose PSNs all precede it were answered to their end. It reports an
// unanswered atomic, FLUSH or ATOMIC_WRITE among them, or a READ that
// cannot be asked again selectively (then the caller retries as before).
func (qp *QP) readsLostBefore(psn uint32) (lost bool) {
	n := uint32(len(qp.sq))
	for i := qp.sqHead; i != qp.sqTail; i++ {
		v := &qp.sq[i%n]
		if !v.started || wire.PSNDiff(psn, v.lastPSN) < 0 {
			break
		}
		if v.done || v.kind == kindLocal {
			continue
		}
		switch v.kind {
		case kindRead:
			v.gotHi = v.npkts
		case kindSend, kindWrite:
			v.done, v.acked = true, v.npkts
		default:
			lost = true
		}
	}
	if lost {
		return true
	}
	qp.completeReady()
	qp.fillGaps(nil, false)
	return false
}

// fillGaps asks again for the first missing range of every outstanding
// READ up to and including upTo (all if nil) that shows one, unless a
// re-request for it is on its way; force re-asks for upTo's even then (a
// later response of that re-request arrived without the first).
func (qp *QP) fillGaps(upTo *sendWQE, force bool) {
	n := uint32(len(qp.sq))
	for i := qp.sqHead; i != qp.sqTail && qp.sending(); i++ {
		v := &qp.sq[i%n]
		if !v.started {
			return
		}
		if v.kind == kindRead {
			qp.fillGap(v, force && v == upTo)
		}
		if v == upTo {
			return
		}
	}
}

// fillGap asks for v's first missing range if it has one (responses after
// it landed, or a later request was answered) and no re-request for it is
// outstanding (unless force).
func (qp *QP) fillGap(v *sendWQE, force bool) {
	if v.done || v.acked >= v.gotHi || (v.rrTo > v.acked && !force) {
		return
	}
	if v.acked == 0 && v.rrTo == v.npkts {
		// The whole READ was asked for again (reRequest) and is being
		// answered: asking again for each response it brings that
		// landed before the first would replay it once per response.
		return
	}
	if h := qp.dev.cfg.hooks; h != nil && h.noGapFill {
		return
	}
	if v.acked == 0 && v.landedAny() && !qp.comp.firstDue && qp.attr.Timeout != 0 {
		// The first response is missing and later ones landed. On a path
		// that reorders it may only be late, and a request at the READ's
		// first PSN must ask for all of it (reRequest): asked at once,
		// kernel rxe replayed whole 4 MiB READs in about one READ of two
		// under netem's reordering (2.5× the data, TestBulkImpaired). It
		// is asked for after a round trip (firstWindow) if it has not come
		// (at once on a QP without timers).
		// (setProbe only moves the timer earlier: a wait already set is
		// kept, and one a retry or an RNR wait disarmed is set again.)
		qp.comp.firstWait = true
		qp.setProbe(qp.firstWindow())
		return
	}
	end := v.gotHi
	for j := v.acked + 1; j < v.gotHi && j < v.acked+readKeep; j++ {
		if v.hasGot(j) {
			end = j
			break
		}
	}
	qp.reRequest(v, v.acked, end)
}

// firstWindow is how long a READ whose first response is missing waits
// for it before asking for the whole READ again: a smoothed round trip (at
// least minReorderWindow, at most the probe timeout). Longer than the
// reordering window of a NAK (a quarter of it): a wrong guess here costs a
// whole READ, a lost first response only this wait.
func (qp *QP) firstWindow() time.Duration {
	return min(max(qp.comp.srtt, minReorderWindow), qp.probeTimeout())
}

// askFirst is the probe timer's at the end of firstWindow: it asks again
// for the READs whose first response is still missing.
func (qp *QP) askFirst() {
	if !qp.comp.firstWait {
		return
	}
	qp.comp.firstWait = false
	qp.comp.firstDue = true
	qp.fillGaps(nil, false)
	qp.comp.firstDue = false
}

// reRequest sends a READ request for v's responses from to to-1: a
// duplicate of part of v (docs/protocol.md §5.5).
func (qp *QP) reRequest(v *sendWQE, from, to int) {
	if from < v.rrFrom {
		return // below what the responder was last asked for: rxe would drop it
	}
	if v.acked == 0 {
		// v's first response has not landed: its request may have been
		// lost (a later response may be forged), and a request at its
		// first PSN is then a new READ to the responder, which must be the
		// whole of it, or the PSNs after it would be out of step.
		from, to = 0, v.npkts
	}
	off := uint64(from) * uint64(qp.pmtu)
	end := min(uint64(to)*uint64(qp.pmtu), uint64(v.length))
	var h wire.Packet
	h.BTH = wire.BTH{Opcode: wire.RCReadRequest, DestQP: qp.attr.DestQPNum, PSN: wire.PSNAdd(v.firstPSN, from), AckReq: true}
	h.RETH = wire.RETH{VA: v.wr.RemoteAddr + off, RKey: v.wr.RKey, Length: uint32(end - off)}
	tos, ttl := qp.grh()
	qp.newPacket(&h, 0, qp.dst, tos, ttl)
	v.rrFrom, v.rrTo = from, to
	qp.dev.stats.ReadReRequests.Add(1)
}
