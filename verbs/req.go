package verbs

import (
	"net/netip"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// This file is the requester (rxe: rxe_req.c): it turns send WQEs into
// packets within the send window, and rewinds for a retry. The completer
// (comp.go) takes the answers; the responder (resp.go) serves the peer's
// requests.

// newPacket appends h's headers to a fresh transmit slot and sizes it for
// payloadLen bytes of payload, pad and the ICRC placeholder. It returns the
// slot and the payload area for the caller to fill.
func (qp *QP) newPacket(h *wire.Packet, payloadLen int, dst netip.AddrPort, tos, ttl uint8) (*link.Packet, []byte) {
	if qp.resp.ackPend {
		// A deferred ACK leaves before anything built after it.
		qp.emitAck()
	}
	p := qp.txPacket()
	p.Data, p.DataAt = nil, 0
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
func (qp *QP) cancelPacket() {
	qp.txn--
	qp.txref[qp.txn].release()
}

// grh returns the traffic class and the TTL / hop limit of the QP's
// packets. The TTL is 0, the link's default (the route's hop limit, 64
// on Linux), whatever the address vector's hop_limit says: the kernel
// sends the route's hop limit because ib_core overwrites the AH's (the
// tools set 1, 64 or 255, and TTL 1 never crosses a router).
func (qp *QP) grh() (tos, ttl uint8) {
	return qp.attr.AHAttr.GRH.TrafficClass, 0
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
	if !qp.sending() || qp.comp.rnrWait {
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
			if !qp.sending() {
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
		if !qp.sending() {
			return
		}
		if qp.typ == QPTypeUC {
			w.done = true // UC completes once the last packet is sent (docs/protocol.md §6.2)
		}
		qp.req.idx, qp.req.pkt = qp.req.idx+1, 0
	}
	qp.budgetReturn()
	if qp.typ == QPTypeRC {
		qp.armRetry()
		qp.armProbe()
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
	if w.kind.rdLike() {
		return qp.sendRdRequest(w)
	}
	rc := qp.typ == QPTypeRC
	base := wire.TransportRC
	if !rc {
		base = wire.TransportUC
	}
	tos, ttl := qp.grh()
	var h wire.Packet
	for qp.req.pkt < w.npkts {
		psn := wire.PSNAdd(w.firstPSN, qp.req.pkt)
		edge := false
		if rc {
			d, w := wire.PSNDiff(psn, qp.compPSN()), int32(qp.window())
			if d >= w {
				return false
			}
			// A window narrowed after a retry closes before the
			// AckReq cadence asks for an ACK: ask at its edge.
			edge = d == w-1 && w < maxUnackedPSNs
			// A new packet comes out of the device's send budget
			// (budget.go); the last of a grant the budget cut short
			// asks for an ACK too: the QP will wait for its next
			// grant, and must hear back meanwhile.
			if psn == qp.req.sentPSN && qp.budgeted() {
				if qp.req.grant == 0 && !qp.budgetGrant(w-d) {
					return false
				}
				qp.req.grant--
				edge = edge || qp.req.grant == 0 && qp.req.grantCut
			}
		}
		off := qp.req.pkt * qp.pmtu
		plen := min(qp.pmtu, int(w.length)-off)
		first, last := qp.req.pkt == 0, qp.req.pkt == w.npkts-1
		h = wire.Packet{}
		h.BTH.DestQP, h.BTH.PSN = qp.attr.DestQPNum, psn
		h.BTH.Opcode = base | nextOpcode(&h, w, first, last)
		if rc {
			h.BTH.AckReq = qp.ackReq(last || edge || qp.req.probe)
			if h.BTH.AckReq && psn == qp.req.sentPSN {
				qp.rttStart(psn)
			}
		}
		p, pl := qp.newPacket(&h, plen, qp.dst, tos, ttl)
		resend := wire.PSNDiff(psn, qp.req.sentPSN) < 0
		if len(w.inline) > 0 || w.wr.Flags&SendInline != 0 {
			copy(pl, w.inline[off:])
		} else if resend {
			// A resend (go-back-N, a loss probe) is copied, never lent
			// (zc.go): the original may be acknowledged while this copy
			// still waits in the device queue, and the WQE's completion
			// lets the program reuse the memory the link would then read.
			if !qp.dev.gather(qp.pd, w.wr.SGList, off, pl) {
				qp.cancelPacket()
				qp.failWQE(w, WCLocProtErr)
				return false
			}
		} else if !qp.gatherPayload(p, pl, w.wr.SGList, off) {
			qp.cancelPacket()
			qp.failWQE(w, WCLocProtErr)
			return false
		}
		qp.noteSent(wire.PSNAdd(psn, 1))
		if wire.PSNAdd(psn, 1) == qp.req.sentPSN {
			qp.req.tailAckReq = h.BTH.AckReq
		}
		qp.req.pkt++
		if qp.req.probe {
			break // a loss probe is one packet (recover.go)
		}
	}
	return true
}

// sendRdRequest emits the one request packet of a READ, atomic, FLUSH or
// ATOMIC_WRITE WQE (a partly answered READ asks for the rest); false means
// the PSN window is full.
func (qp *QP) sendRdRequest(w *sendWQE) bool {
	if qp.req.pkt >= w.npkts {
		return true
	}
	psn := wire.PSNAdd(w.firstPSN, qp.req.pkt)
	if w.kind == kindRead && w.acked > qp.req.pkt {
		psn = wire.PSNAdd(w.firstPSN, w.acked)
	}
	if wire.PSNDiff(psn, qp.compPSN()) >= int32(qp.window()) {
		return false
	}
	if psn == qp.req.sentPSN && !qp.budgetRead(int32(w.npkts)) {
		return false
	}
	var h wire.Packet
	h.BTH = wire.BTH{DestQP: qp.attr.DestQPNum, PSN: psn, AckReq: true}
	var payload []byte
	switch w.kind {
	case kindRead:
		// A partly answered READ is re-issued for the rest (docs/protocol.md §5.5):
		// from its first missing response, never below where an earlier
		// re-request started (readgap.go).
		from := max(qp.req.pkt, w.acked)
		if from > 0 {
			w.rrFrom, w.rrTo = max(w.rrFrom, from), 0
		}
		off := uint64(from) * uint64(qp.pmtu)
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
	if psn == qp.req.sentPSN {
		qp.rttStart(psn)
	}
	tos, ttl := qp.grh()
	_, pl := qp.newPacket(&h, len(payload), qp.dst, tos, ttl)
	copy(pl, payload)
	qp.noteSent(wire.PSNAdd(w.lastPSN, 1))
	qp.req.tailAckReq = true
	qp.req.noAckPkts = 0
	qp.req.pkt = w.npkts
	return true
}

// nextOpcode is the SEND or WRITE opcode (without the transport bits) of
// a packet of w at the given place in the message (rxe: next_opcode), and
// fills the headers that go with it: immediate data, the invalidated key,
// the RETH of a WRITE's first packet, solicited event on the last.
func nextOpcode(h *wire.Packet, w *sendWQE, first, last bool) wire.Opcode {
	op := w.wr.Opcode
	var o wire.Opcode
	if w.kind == kindSend {
		o = wire.OpSendMiddle
		switch {
		case first && last:
			o = wire.OpSendOnly
		case first:
			o = wire.OpSendFirst
		case last:
			o = wire.OpSendLast
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
		o = wire.OpWriteMiddle
		switch {
		case first && last:
			o = wire.OpWriteOnly
		case first:
			o = wire.OpWriteFirst
		case last:
			o = wire.OpWriteLast
		}
		if last && op == WRRDMAWriteWithImm {
			o++
			h.Imm = w.wr.ImmData
		}
		if first {
			h.RETH = wire.RETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, Length: w.length}
		}
	}
	if last && w.wr.Flags&SendSolicited != 0 && (w.kind == kindSend || op == WRRDMAWriteWithImm) {
		h.BTH.SE = true
	}
	return o
}

// ackReq reports whether an RC packet asks for an ACK: always when must
// (the message's last packet, or the edge of a narrowed window), else
// after more than ackReqEvery packets without one (docs/protocol.md §5.3),
// counted as rxe counts its 64: ack = last || noack++ > ackReqEvery.
func (qp *QP) ackReq(must bool) bool {
	ack := must
	if !ack {
		ack = qp.req.noAckPkts > ackReqEvery
		qp.req.noAckPkts++
	}
	if ack {
		qp.req.noAckPkts = 0
	}
	return ack
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
		w := qp.sqHeadWQE()
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

// outstanding reports sent packets that wait for an answer.
func (qp *QP) outstanding() bool {
	if qp.sqHead == qp.sqTail {
		return false
	}
	return qp.sq[qp.sqHead%uint32(len(qp.sq))].started
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

// rewind restarts sending at the oldest unanswered PSN (docs/protocol.md §5.5: a partly acked
// SEND/WRITE skips acked packets; a partly answered READ asks for the rest).
func (qp *QP) rewind() {
	if !qp.outstanding() {
		qp.reqProgress()
		return
	}
	w := qp.sqHeadWQE()
	qp.req.idx, qp.req.pkt = qp.sqHead, w.acked
	qp.req.noAckPkts = 0
	qp.comp.rewound = true
	qp.comp.rttOn = false // Karn: no sample across a retry
	qp.dev.stats.Retransmits.Add(1)
	qp.reqProgress()
}

// reqState is the requester's state (rxe: rxe_req_info): which WQE and
// packet go out next, with which PSN, and what the send window allows.
type reqState struct {
	idx         uint32 // next WQE the requester works on
	pkt         int    // next packet of that WQE
	nextPSN     uint32 // first PSN of the next fresh WQE
	sentPSN     uint32 // one past the newest PSN sent
	counted     int32  // PSNs counted in flight against the device's budget (budget.go)
	grant       int32  // new packets the budget granted and the QP has not built yet
	grantCut    bool   // the budget granted fewer than the window allowed
	tailAckReq  bool   // the newest PSN sent asked for an ACK
	budgetLost  bool   // a retransmit timeout expired since the last progress: nothing counts in flight
	rdOut       int    // started read/atomic WQEs not completed
	maxRdAtomic int
	noAckPkts   int  // packets sent since the last one asking for an ACK
	narrow      int  // send window reduction after retries (window = maxUnackedPSNs - narrow)
	probe       bool // building a loss probe: one packet, asking for an ACK (recover.go)
}
