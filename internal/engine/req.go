package engine

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// newPacket appends h's headers to a fresh transmit slot and sizes it for
// payloadLen bytes of payload, pad and the ICRC placeholder. It returns the
// slot and the payload area for the caller to fill.
func (qp *QP) newPacket(h *wire.Packet, payloadLen int, dst netip.AddrPort, tos, ttl uint8) (*link.Packet, []byte) {
	p := qp.txPacket()
	h.BTH.PKey = wire.DefaultPKey
	pad := wire.PadLen(payloadLen)
	h.BTH.PadCnt = uint8(pad)
	b := h.AppendHeaders(p.Buf[:0])
	hl := len(b)
	total := hl + payloadLen + pad + wire.ICRCLen
	b = p.Buf[:total]
	clear(b[hl+payloadLen:])
	p.N = total
	p.Dst = dst
	p.Src = netip.AddrPortFrom(qp.dev.local.Addr(), qp.sport)
	p.TOS, p.TTL = tos, ttl
	return p, b[hl : hl+payloadLen]
}

// cancelPacket drops the slot newPacket returned last.
func (qp *QP) cancelPacket() { qp.txn-- }

// grh returns the traffic class and the TTL / hop limit of the QP's
// packets. The TTL is 0, the link's default (the route's hop limit, 64
// on Linux), whatever the address vector's hop_limit says: the kernel
// sends the route's hop limit because ib_core overwrites the AH's (the
// tools set 1, 64 or 255, and TTL 1 never crosses a router).
func (qp *QP) grh() (tos, ttl uint8) {
	return qp.attr.AHAttr.GRH.TrafficClass, 0
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

func (qp *QP) npkts(w *sendWQE) int {
	switch w.kind {
	case kindSend, kindWrite, kindRead:
		if w.length == 0 {
			return 1
		}
		return (int(w.length) + qp.pmtu - 1) / qp.pmtu
	}
	return 1
}

// reqProgress is the requester: it turns posted WQEs into packets while
// the PSN window, max_rd_atomic, fences and RNR waits allow (docs/protocol.md §5.4).
func (qp *QP) reqProgress() {
	if (qp.state != QPStateRTS && qp.state != QPStateSQD) || qp.comp.rnrWait {
		return
	}
	draining := qp.state == QPStateSQD
	n := uint32(len(qp.sq))
	maxRd := max(qp.req.maxRdAtomic, 1)
	for qp.req.idx != qp.sqTail {
		w := &qp.sq[qp.req.idx%n]
		if w.done {
			qp.req.idx, qp.req.pkt = qp.req.idx+1, 0
			continue
		}
		if draining && !w.started {
			// SQD: messages in progress finish, no new WQE starts.
			break
		}
		if w.kind == kindLocal {
			// LOCAL_INV waits for all earlier WQEs (docs/protocol.md §5.4).
			if qp.req.idx != qp.sqHead {
				break
			}
			qp.execLocal(w)
			qp.req.idx, qp.req.pkt = qp.req.idx+1, 0
			qp.completeReady()
			if qp.state != QPStateRTS && qp.state != QPStateSQD {
				return
			}
			continue
		}
		if !w.started {
			// IBV_SEND_FENCE waits for earlier reads/atomics (docs/protocol.md §5.4).
			if w.wr.Flags&SendFence != 0 && qp.req.rdOut > 0 {
				break
			}
			// At most max_rd_atomic reads/atomics in flight (docs/protocol.md §5.4).
			if w.kind.rdLike() && qp.req.rdOut >= maxRd {
				break
			}
			if qp.typ == QPTypeUD {
				qp.sendUD(w)
				qp.req.idx, qp.req.pkt = qp.req.idx+1, 0
				continue
			}
			w.npkts = qp.npkts(w)
			w.firstPSN = qp.req.nextPSN
			w.lastPSN = wire.PSNAdd(w.firstPSN, w.npkts-1)
			qp.req.nextPSN = wire.PSNAdd(w.firstPSN, w.npkts)
			w.started = true
			if w.kind.rdLike() {
				qp.req.rdOut++
			}
		}
		if !qp.sendWQEPackets(w) {
			break
		}
		if qp.state != QPStateRTS && qp.state != QPStateSQD {
			return
		}
		if qp.typ == QPTypeUC {
			w.done = true // UC completes once the last packet is sent (docs/protocol.md §6.2)
		}
		qp.req.idx, qp.req.pkt = qp.req.idx+1, 0
	}
	if qp.typ == QPTypeRC {
		qp.armRetry()
	} else {
		qp.completeReady()
	}
	if draining {
		qp.checkDrained()
	}
}

// checkDrained raises EventSQDrained once an SQD QP has nothing in flight
// (if the SQD transition asked for it).
func (qp *QP) checkDrained() {
	if qp.state == QPStateSQD && qp.sqdNotify && !qp.outstanding() {
		qp.sqdNotify = false
		qp.dev.event(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}

// sendWQEPackets emits w's packets from qp.req.pkt on; false means the PSN
// window is full (or the WQE failed).
func (qp *QP) sendWQEPackets(w *sendWQE) bool {
	rc := qp.typ == QPTypeRC
	base := wire.TransportRC
	if !rc {
		base = wire.TransportUC
	}
	tos, ttl := qp.grh()
	var h wire.Packet
	if w.kind.rdLike() {
		if qp.req.pkt >= w.npkts {
			return true
		}
		psn := wire.PSNAdd(w.firstPSN, qp.req.pkt)
		if wire.PSNDiff(psn, qp.compPSN()) >= int32(qp.window()) {
			return false
		}
		h.BTH = wire.BTH{DestQP: qp.attr.DestQPNum, PSN: psn, AckReq: true}
		var payload []byte
		switch w.kind {
		case kindRead:
			// A partly answered READ is re-issued for the rest (docs/protocol.md §5.5).
			off := uint64(qp.req.pkt) * uint64(qp.pmtu)
			h.BTH.Opcode = wire.RCReadRequest
			h.RETH = wire.RETH{VA: w.wr.RemoteAddr + off, RKey: w.wr.RKey, Length: w.length - uint32(off)}
		case kindAtomic:
			h.BTH.Opcode = wire.RCFetchAdd
			h.AtomicETH = wire.AtomicETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
			if w.wr.Opcode == WRAtomicCmpAndSwp {
				h.BTH.Opcode = wire.RCCompareSwap
				h.AtomicETH.SwapAdd, h.AtomicETH.Compare = w.wr.Swap, w.wr.CompareAdd
			}
		case kindFlush:
			h.BTH.Opcode = wire.RCFlush
			h.FETH = wire.FETH{PLT: w.wr.FlushType, SEL: w.wr.FlushLevel}
			h.RETH = wire.RETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, Length: w.wr.FlushLen}
		case kindAtomicWrite:
			h.BTH.Opcode = wire.RCAtomicWrite
			h.RETH = wire.RETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, Length: 8}
			payload = w.wr.AtomicWrite[:]
		}
		_, pl := qp.newPacket(&h, len(payload), qp.dst, tos, ttl)
		copy(pl, payload)
		qp.noteSent(wire.PSNAdd(w.lastPSN, 1))
		qp.req.noAckPkts = 0
		qp.req.pkt = w.npkts
		return true
	}
	for qp.req.pkt < w.npkts {
		psn := wire.PSNAdd(w.firstPSN, qp.req.pkt)
		edge := false
		if rc {
			d, w := wire.PSNDiff(psn, qp.compPSN()), int32(qp.window())
			if d >= w {
				return false
			}
			// A window narrowed after a retry closes before rxe's
			// AckReq cadence asks for an ACK: ask at its edge.
			edge = d == w-1 && w < maxUnackedPSNs
		}
		off := qp.req.pkt * qp.pmtu
		plen := min(qp.pmtu, int(w.length)-off)
		first, last := qp.req.pkt == 0, qp.req.pkt == w.npkts-1
		h = wire.Packet{}
		h.BTH.DestQP, h.BTH.PSN = qp.attr.DestQPNum, psn
		op := w.wr.Opcode
		var o wire.Opcode
		if w.kind == kindSend {
			switch {
			case first && last:
				o = wire.OpSendOnly
			case first:
				o = wire.OpSendFirst
			case last:
				o = wire.OpSendLast
			default:
				o = wire.OpSendMiddle
			}
			if last && op == WRSendWithImm {
				o++ // LAST/ONLY_WITH_IMMEDIATE follow LAST/ONLY
				h.Imm = w.wr.ImmData
			} else if last && op == WRSendWithInv {
				o = wire.OpSendLastInv
				if first {
					o = wire.OpSendOnlyInv
				}
				h.IETH = w.wr.ImmData
			}
		} else {
			switch {
			case first && last:
				o = wire.OpWriteOnly
			case first:
				o = wire.OpWriteFirst
			case last:
				o = wire.OpWriteLast
			default:
				o = wire.OpWriteMiddle
			}
			if last && op == WRRDMAWriteWithImm {
				o++
				h.Imm = w.wr.ImmData
			}
			if first {
				h.RETH = wire.RETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, Length: w.length}
			}
		}
		h.BTH.Opcode = base | o
		if last && w.wr.Flags&SendSolicited != 0 && (w.kind == kindSend || op == WRRDMAWriteWithImm) {
			h.BTH.SE = true
		}
		// AckReq on the last packet and after more than 64 packets without
		// one (docs/protocol.md §5.3), exactly as rxe counts: ack = last || noack++ > 64.
		if rc {
			ack := last || edge
			if !ack {
				ack = qp.req.noAckPkts > maxPktPerAck
				qp.req.noAckPkts++
			}
			if ack {
				h.BTH.AckReq = true
				qp.req.noAckPkts = 0
			}
		}
		_, pl := qp.newPacket(&h, plen, qp.dst, tos, ttl)
		if len(w.inline) > 0 || w.wr.Flags&SendInline != 0 {
			copy(pl, w.inline[off:])
		} else if !qp.dev.gather(qp.pd, w.wr.SGList, off, pl) {
			qp.cancelPacket()
			qp.failWQE(w, WCLocProtErr)
			return false
		}
		qp.noteSent(wire.PSNAdd(psn, 1))
		qp.req.pkt++
	}
	return true
}

// noteSent records that the PSNs before end were sent.
func (qp *QP) noteSent(end uint32) {
	if wire.PSNDiff(end, qp.req.sentPSN) > 0 {
		qp.req.sentPSN = end
	}
}

// sendUD emits a UD WQE's single packet (docs/protocol.md §6.1) and completes it.
func (qp *QP) sendUD(w *sendWQE) {
	w.started, w.done = true, true
	psn := qp.req.nextPSN
	qp.req.nextPSN = wire.PSNAdd(psn, 1)
	// Payload above the active MTU: nothing is sent, the WR succeeds (docs/protocol.md §6.1, C10-93.1.1).
	if int(w.length) > qp.dev.mtu.Bytes() {
		return
	}
	// DETH Q_Key = the WR's remote_qkey; the GSI QP always sends 0x80010000 (docs/protocol.md §6.1).
	qkey := w.wr.RemoteQKey
	if qp.qpn == 1 {
		qkey = wire.GSIQKey
	}
	var h wire.Packet
	h.BTH = wire.BTH{Opcode: wire.UDSendOnly, DestQP: w.wr.RemoteQPN & 0xFFFFFF, PSN: psn,
		SE: w.wr.Flags&SendSolicited != 0}
	if w.wr.Opcode == WRSendWithImm {
		h.BTH.Opcode = wire.UDSendOnlyImm
		h.Imm = w.wr.ImmData
	}
	h.DETH = wire.DETH{QKey: qkey, SrcQP: qp.qpn}
	_, pl := qp.newPacket(&h, int(w.length), w.dst, w.tos, w.ttl)
	if len(w.inline) > 0 || w.wr.Flags&SendInline != 0 {
		copy(pl, w.inline)
	} else if !qp.dev.gather(qp.pd, w.wr.SGList, 0, pl) {
		qp.cancelPacket()
		w.status = WCLocProtErr
		qp.state = QPStateSQE // UD/UC send errors move the QP to SQE
		qp.completeReady()
		qp.flushSQ()
	}
}

// flushSQ flushes the send queue only (SQE state).
func (qp *QP) flushSQ() {
	for qp.sqHead != qp.sqTail {
		w := &qp.sq[qp.sqHead%uint32(len(qp.sq))]
		if !w.done {
			w.done, w.status = true, WCWRFlushErr
		}
		qp.completeHead()
	}
	qp.req.idx, qp.req.pkt = qp.sqTail, 0
}

// execLocal runs a local operation (LOCAL_INV) at the head of the queue.
func (qp *QP) execLocal(w *sendWQE) {
	w.started, w.done = true, true
	if w.wr.Opcode == WRBindMW {
		mw := w.wr.MW
		ok := qp.execBind(&w.wr)
		w.wr.MW, w.wr.BindInfo = nil, MWBindInfo{}
		if !ok {
			mw.mu.Lock()
			mw.rkey = mw.key // a failed type 1 bind leaves the old key in force
			mw.mu.Unlock()
			w.status = WCMWBindErr
			qp.toError()
		}
		return
	}
	if w.wr.ImmData>>8 > maxMRIndex {
		if !qp.dev.lookupMW(w.wr.ImmData).invalidate(qp.pd, w.wr.ImmData, nil) {
			w.status = WCLocQPOpErr
			qp.toError()
		}
		return
	}
	mr := qp.dev.lookupMR(w.wr.ImmData)
	if mr != nil {
		mr.mu.Lock()
		if mr.key == w.wr.ImmData && mr.pd == qp.pd && !mr.dereg && mr.numMW == 0 {
			mr.valid = false
			mr.mu.Unlock()
			return
		}
		mr.mu.Unlock()
	}
	w.status = WCLocQPOpErr // invalid key: "other local failure" (docs/protocol.md §5.8)
	qp.toError()
}

// failWQE gives w an error status and moves the QP to ERR.
func (qp *QP) failWQE(w *sendWQE, st WCStatus) {
	w.done, w.status = true, st
	if qp.typ != QPTypeRC {
		qp.state = QPStateSQE
		qp.flushSQ()
		return
	}
	qp.toError()
}

// completeReady retires finished WQEs from the head, in order.
func (qp *QP) completeReady() {
	for qp.sqHead != qp.sqTail {
		w := &qp.sq[qp.sqHead%uint32(len(qp.sq))]
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

// outstanding reports sent packets that wait for an answer.
func (qp *QP) outstanding() bool {
	if qp.sqHead == qp.sqTail {
		return false
	}
	return qp.sq[qp.sqHead%uint32(len(qp.sq))].started
}

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
	d := max(wire.AckTimeout(timeout), minAckTimeout) * retryBackoffMax
	d += d / retryJitterDiv
	return time.Duration(min(retryCnt, maxRetryCnt)+3) * d
}

// retryWait is the retransmit timer's next interval.
func (qp *QP) retryWait() time.Duration {
	d := max(wire.AckTimeout(qp.attr.Timeout), minAckTimeout)
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
func (qp *QP) armRetry() {
	if !qp.outstanding() || qp.attr.Timeout == 0 || qp.comp.rnrWait {
		if qp.comp.retryArmed {
			qp.comp.retryTimer.Stop()
			qp.comp.retryArmed = false
		}
		return
	}
	if !qp.comp.retryArmed {
		qp.comp.retryArmed = true
		d := qp.retryWait()
		qp.comp.retryDue = qp.dev.clock.Now().Add(d)
		qp.comp.retryTimer.Reset(d)
	}
}

// rearmRetry restarts the running retransmit timer from now.
func (qp *QP) rearmRetry() {
	if qp.comp.retryArmed {
		qp.comp.retryArmed = false
		qp.armRetry()
	}
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
	qp.rearmRetry()
	qp.comp.heard, qp.comp.heardTimer = true, true
}

// renewRetry renews the retry budgets and the timer backoff and widens a
// narrowed send window: the oldest unacknowledged PSN moved (retry_cnt
// counts retries of the same PSN).
func (qp *QP) renewRetry() {
	qp.comp.retryLeft, qp.comp.rnrLeft = int(qp.attr.RetryCnt), int(qp.attr.RNRRetry)
	qp.comp.backoff = 0
	qp.req.narrow = max(qp.req.narrow-windowGrow, 0)
}

// Send window (PSNs in flight). rxe always allows RXE_MAX_UNACKED_PSNS; the
// responder drops everything after a gap, so each retry resends what is in
// flight. softroce halves the window at each retry sequence (down to
// minWindow) and widens it again by windowGrow per answer that moves it
// (additive increase, multiplicative decrease): on a reordering or lossy
// path a go-back-N then costs a fraction of the full window. On a clean
// path the window stays at rxe's.
const (
	minWindow  = 8
	windowGrow = 8
)

// window is the number of PSNs the requester may have unacknowledged.
func (qp *QP) window() int { return max(maxUnackedPSNs-qp.req.narrow, minWindow) }

// progressed restarts the timer and the retry budgets after an answer
// moved the window (rxe resets them when a WQE completes), and ends a
// retry sequence.
func (qp *QP) progressed() {
	qp.renewRetry()
	qp.comp.rewound = false
	if qp.comp.retryArmed {
		qp.comp.retryTimer.Stop()
		qp.comp.retryArmed = false
	}
	qp.completeReady()
	qp.reqProgress()
	qp.armRetry()
}

func (qp *QP) onRetryTimer() {
	qp.mu.Lock()
	defer qp.flushUnlock()
	// A callback the clock took off before an answer stopped and re-armed
	// the timer (it then waited for mu) is stale: the re-armed timer's
	// deadline has not come, and it will call again.
	if !qp.comp.retryArmed || qp.dev.clock.Now().Before(qp.comp.retryDue) ||
		(qp.state != QPStateRTS && qp.state != QPStateSQD) || qp.dev.closed.Load() {
		return
	}
	qp.comp.retryArmed = false
	if !qp.outstanding() {
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
	qp.comp.backoff++
	if qp.comp.heard {
		qp.resend() // waived: the peer answered since the last retry (see retry)
		return
	}
	qp.retry()
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

func (qp *QP) onRNRTimer() {
	qp.mu.Lock()
	defer qp.flushUnlock()
	if !qp.comp.rnrWait || (qp.state != QPStateRTS && qp.state != QPStateSQD) || qp.dev.closed.Load() {
		return
	}
	qp.comp.rnrWait = false
	qp.rewind()
}

// rewind restarts sending at the oldest unanswered PSN (docs/protocol.md §5.5: a partly acked
// SEND/WRITE skips acked packets; a partly answered READ asks for the rest).
func (qp *QP) rewind() {
	if !qp.outstanding() {
		qp.reqProgress()
		return
	}
	w := &qp.sq[qp.sqHead%uint32(len(qp.sq))]
	qp.req.idx, qp.req.pkt = qp.sqHead, w.acked
	qp.req.noAckPkts = 0
	qp.comp.rewound = true
	qp.dev.stats.Retransmits.Add(1)
	qp.reqProgress()
}

// failHead completes the oldest WQE with st and moves the QP to ERR.
func (qp *QP) failHead(st WCStatus) {
	if qp.sqHead != qp.sqTail {
		w := &qp.sq[qp.sqHead%uint32(len(qp.sq))]
		w.done, w.status = true, st
	}
	qp.toError()
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
			if qp.state != QPStateRTS && qp.state != QPStateSQD {
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
	st := &qp.dev.stats
	if qp.state != QPStateRTS && qp.state != QPStateSQD {
		st.DropQPState.Add(1)
		return
	}
	psn := p.BTH.PSN
	if wire.PSNDiff(psn, qp.req.sentPSN) >= 0 {
		qp.dropBad() // a PSN never sent
		return
	}
	oldest, ok := qp.oldestPSN()
	if !ok {
		st.DropResponse.Add(1) // nothing outstanding: a late duplicate (or forged)
		return
	}
	// Only responses that pass the checks below restart the retransmit
	// timer (answered).
	if wire.PSNDiff(psn, oldest) < 0 {
		st.DropResponse.Add(1) // answers a completed WQE (a duplicate)
		return
	}
	w := qp.wqeAt(psn)
	if w == nil {
		qp.dropBad()
		return
	}
	comp := qp.compPSN()
	if p.BTH.Opcode == wire.RCAcknowledge {
		a := p.AETH
		if wire.PSNDiff(psn, comp) < 0 {
			st.DropResponse.Add(1) // acknowledges nothing new
			return
		}
		switch {
		case a.IsACK():
			progress, _, lost := qp.ackBefore(psn, true)
			if progress || lost {
				qp.answered()
			}
			if progress {
				qp.progressed()
			} else if !lost {
				st.DropResponse.Add(1) // inside an unanswered read: tells nothing
			}
			if lost && !qp.comp.rewound && (qp.state == QPStateRTS || qp.state == QPStateSQD) {
				qp.retry()
			}
		case a.IsRNR():
			if w.kind.rdLike() { // RNR answers a SEND or WRITE with immediate only
				qp.dropBad()
				return
			}
			st.RNRNAKsRcvd.Add(1)
			qp.answered()
			if progress, _, _ := qp.ackBefore(psn, false); progress {
				qp.renewRetry()
				qp.completeReady()
			}
			if qp.state != QPStateRTS && qp.state != QPStateSQD {
				return
			}
			if qp.attr.RNRRetry != rnrRetryInfinite { // docs/protocol.md §5.6
				if qp.comp.rnrLeft <= 0 {
					qp.failHead(WCRNRRetryExcErr)
					return
				}
				qp.comp.rnrLeft--
			}
			qp.comp.rnrWait = true
			qp.comp.retryTimer.Stop()
			qp.comp.retryArmed = false
			qp.comp.rnrTimer.Reset(wire.RNRTimeout(a.Value()))
		case a.Value() == wire.NAKPSNSeqError:
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
			if qp.state != QPStateRTS && qp.state != QPStateSQD {
				return
			}
			if qp.comp.rnrWait || qp.comp.rewound {
				// Ignored: no answer either (no timer restart; rxe goes to
				// done without mod_timer), or a NAK stream would keep a
				// QP whose retransmissions never arrive alive for ever.
				st.SeqNAKsIgnored.Add(1) // the RNR timer restarts the requester, or a retry is under way
				return
			}
			qp.answered()
			qp.retry()
		default:
			st.NAKsRcvd.Add(1)
			qp.answered()
			qp.ackBefore(psn, false)
			if qp.state != QPStateRTS && qp.state != QPStateSQD {
				return
			}
			if h := &qp.sq[qp.sqHead%uint32(len(qp.sq))]; h != w {
				// An earlier read or atomic was not answered: its
				// response was lost (rxe: retry).
				if !qp.comp.rewound {
					qp.retry()
				}
				return
			}
			qp.failHead(nakStatus(a.Value()))
		}
		return
	}
	isAtomicAck := p.BTH.Opcode == wire.RCAtomicAcknowledge
	okKind := (isAtomicAck && w.kind == kindAtomic) || (!isAtomicAck && p.Mask&wire.IsReadResponse != 0 &&
		(w.kind == kindRead || (w.kind == kindFlush || w.kind == kindAtomicWrite) && p.BTH.Opcode == wire.RCReadResponseOnly))
	// (READ_RESPONSE_MIDDLE has no AETH: p.AETH then holds an earlier packet's.)
	if !okKind || (p.Mask&wire.HasAETH != 0 && !p.AETH.IsACK()) {
		// An answer of the wrong kind for the WQE its PSN names (rxe errors
		// the QP; a spoofed packet must not).
		qp.dropBad()
		return
	}
	if d := wire.PSNDiff(psn, wire.PSNAdd(w.firstPSN, w.acked)); d >= 0 || w != &qp.sq[qp.sqHead%uint32(len(qp.sq))] {
		// The expected response, one after a gap (the peer is streaming
		// a READ's responses, some lost), or one for a later WQE: an
		// answer. Older ones of the same WQE are duplicates.
		qp.answered()
	}
	progress, _, _ := qp.ackBefore(psn, false)
	if qp.state != QPStateRTS && qp.state != QPStateSQD {
		return
	}
	if h := &qp.sq[qp.sqHead%uint32(len(qp.sq))]; h != w {
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
		st.DropResponse.Add(1)
		if progress {
			qp.progressed()
		}
		return
	}
	switch w.kind {
	case kindAtomic:
		var v [8]byte
		binary.NativeEndian.PutUint64(v[:], p.AtomicAckETH.Orig)
		if !qp.dev.scatter(qp.pd, w.wr.SGList, 0, v[:]) {
			qp.failHead(WCLocProtErr)
			return
		}
		w.acked, w.done = 1, true
	case kindRead:
		off := w.acked * qp.pmtu
		last := w.acked == w.npkts-1
		n := len(p.Payload)
		if (!last && n != qp.pmtu) || off+n > int(w.length) || (last && off+n != int(w.length)) ||
			(last != (p.Mask&(wire.Last|wire.Only) != 0)) {
			qp.failHead(WCBadRespErr)
			return
		}
		if n > 0 && !qp.dev.scatter(qp.pd, w.wr.SGList, off, p.Payload) {
			qp.failHead(WCLocProtErr)
			return
		}
		w.acked++
		w.done = last
	default: // FLUSH, ATOMIC_WRITE: 0-byte READ_RESPONSE_ONLY
		w.acked, w.done = 1, true
	}
	qp.progressed()
}

// reqState is the requester's state (rxe: rxe_req_info): which WQE and
// packet go out next, with which PSN, and what the send window allows.
type reqState struct {
	idx         uint32 // next WQE the requester works on
	pkt         int    // next packet of that WQE
	nextPSN     uint32 // first PSN of the next fresh WQE
	sentPSN     uint32 // one past the newest PSN sent
	rdOut       int    // started read/atomic WQEs not completed
	maxRdAtomic int
	noAckPkts   int // packets sent since the last one asking for an ACK
	narrow      int // send window reduction after retries (window = maxUnackedPSNs - narrow)
}

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
	retryDue   time.Time // when the armed retransmit timer expires (an earlier callback is stale)
	retryTimer Timer
	rnrTimer   Timer
	rng        uint64 // retransmit jitter generator state
}
