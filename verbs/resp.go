package verbs

import (
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// respRes is a responder resource: a READ, atomic, FLUSH or ATOMIC_WRITE
// remembered so duplicates can be answered (docs/protocol.md §5.7).
type respRes struct {
	kind   wqeKind
	valid  bool
	first  uint32
	last   uint32
	va     uint64
	rkey   uint32
	length uint32
	orig   uint64
	// READ: the responses still to send (resp_pace.go).
	next    uint32    // next PSN to send
	sending bool      // responses from next on are queued
	epoch   int32     // the pacer's cut count when the stream (re)started
	sentAt  time.Time // when the stream last sent a response (readCrossed)
}

type respState struct {
	ePSN       uint32
	msn        uint32
	nakSeqSent bool
	inMsg      uint8 // 0 none, msgSend, msgWrite: expecting MIDDLE/LAST
	// Receive WQE in use by a multi-packet SEND.
	haveWQE bool
	wqeSRQ  bool
	wqe     recvWQE
	off     int
	// RDMA WRITE in progress.
	wMR  *MR // the target region, found at FIRST/ONLY
	wKey uint32
	wVA  uint64
	wRem int
	wLen uint32
	// UC: dropping until the next FIRST/ONLY (docs/protocol.md §6.2).
	ucDrop bool
	res    []respRes
	resIdx int
	pace   *readPacer // READ response pacing (resp_pace.go); nil: unpaced
	// The requester asked for part of a READ short of its end: it keeps
	// responses after a gap, and its losses do not pace (resp_pace.go).
	selective bool
	// READ responses sent: the last one's time, and when the current
	// burst began after a quiet of crossQuiet or more (readCrossed).
	readSentAt, readBurstAt time.Time
	// A positive ACK deferred to the end of the received batch (tx.go).
	ackPend, ackQueued bool
	ackPSN, ackMSN     uint32
}

const (
	msgSend  = 1
	msgWrite = 2
)

// sendAck sends an ACKNOWLEDGE with syndrome syn for psn. A positive ACK
// on the receive loop waits for the end of the batch (tx.go: deferAck);
// a NAK goes out at once, after any deferred ACK.
func (qp *QP) sendAck(psn uint32, syn uint8) {
	if syn == wire.SyndromeACK && qp.rxBatched {
		qp.deferAck(psn)
		return
	}
	qp.buildAck(psn, syn, qp.resp.msn)
}

// buildAck builds an ACKNOWLEDGE packet with the given AETH.
func (qp *QP) buildAck(psn uint32, syn uint8, msn uint32) {
	var h wire.Packet
	h.BTH = wire.BTH{Opcode: wire.RCAcknowledge, DestQP: qp.attr.DestQPNum, PSN: psn}
	h.AETH = wire.AETH{Syndrome: syn, MSN: msn & wire.PSNMask}
	tos, ttl := qp.grh()
	qp.newPacket(&h, 0, qp.dst, tos, ttl)
}

// nakError sends NAK syn for psn, completes the receive WQE in use (if any)
// with wcs and moves the QP to ERR (docs/protocol.md §5.7 responder error table).
func (qp *QP) nakError(psn uint32, syn uint8, wcs WCStatus) {
	qp.dev.stats.NAKsSent.Add(1)
	qp.sendAck(psn, syn)
	if qp.resp.haveWQE {
		qp.pushRecvWC(&qp.resp.wqe, wcs, WCRecv, 0, 0, 0, false)
		qp.resp.haveWQE = false
	}
	qp.toError()
}

// pushRecvWC completes a receive WQE.
func (qp *QP) pushRecvWC(w *recvWQE, st WCStatus, op WCOpcode, n uint32, imm uint32, fl WCFlags, se bool) bool {
	wc := WC{WRID: w.wrid, Status: st, Opcode: op, ByteLen: n, ImmData: imm, QPNum: qp.qpn, SrcQP: qp.attr.DestQPNum, Flags: fl}
	if st != WCSuccess {
		wc.ByteLen, wc.Flags, wc.ImmData = 0, 0, 0
	}
	if !qp.recvCQ.push(&wc, se, qp.rxBatched) {
		// Receive CQ overflow: QP to ERR without a NAK (docs/protocol.md §5.7).
		qp.dev.event(AsyncEvent{Type: EventQPFatal, QP: qp})
		qp.toError()
		return false
	}
	return true
}

// takeRecv takes a receive WQE from the SRQ or the RQ into qp.resp.wqe.
func (qp *QP) takeRecv() bool {
	r := &qp.resp
	if qp.srq != nil {
		r.haveWQE = qp.srq.take(&r.wqe)
		r.wqeSRQ = true
	} else {
		r.haveWQE = qp.rq.pop(&r.wqe)
		r.wqeSRQ = false
	}
	r.off = 0
	return r.haveWQE
}

// qpAccessFor returns the qp_access_flags bit an incoming request needs (docs/protocol.md §7.2).
func qpAccessFor(p *wire.Packet) Access {
	m := p.Mask
	switch {
	case m&(wire.IsWrite|wire.IsAtomicWrite) != 0:
		return AccessRemoteWrite
	case m&wire.IsRead != 0:
		return AccessRemoteRead
	case m&wire.IsAtomic != 0:
		return AccessRemoteAtomic
	case m&wire.IsFlush != 0:
		if p.FETH.PLT == wire.FlushPersistence {
			return AccessFlushPersistent
		}
		return AccessFlushGlobal
	}
	return 0
}

// receive is the RC and UC responder (docs/protocol.md §5.7, §6.2), one
// pipeline as rxe's: the PSN (check_psn), the opcode sequence
// (check_op_seq), the operation against the QP's access flags
// (check_op_valid), the payload's length (check_length), then the
// operation. Only the action on an error differs by QP type (respFail,
// respRNR): RC NAKs, and for an invalid request moves the QP to ERR; UC
// sends nothing, drops the rest of the message and resynchronises on the
// next FIRST or ONLY.
func (qp *QP) receive(p *wire.Packet) {
	if !qp.respPSN(p) || !qp.respOpSeq(p) || !qp.respOpValid(p) || !qp.respLength(p) {
		return
	}
	m := p.Mask
	switch {
	case m&wire.IsSend != 0:
		qp.respSend(p)
	case m&wire.IsWrite != 0:
		qp.respWrite(p)
	case m&wire.IsRead != 0:
		qp.rcRead(p)
	case m&(wire.IsAtomic|wire.IsFlush|wire.IsAtomicWrite) != 0:
		qp.rcAtomic(p)
	default:
		qp.dev.stats.DropTransport.Add(1)
	}
}

// respPSN reports whether p has the expected PSN. RC: after a gap, one
// NAK 0x60 with PSN = ePSN, not repeated until ePSN arrives; a PSN before
// ePSN is a duplicate (rcDuplicate). UC: a FIRST or ONLY with another PSN,
// or after a drop, starts a new message at its PSN (a partly filled
// receive WQE is reused); any other packet is dropped until one does.
func (qp *QP) respPSN(p *wire.Packet) bool {
	r := &qp.resp
	psn := p.BTH.PSN
	if qp.typ == QPTypeUC {
		if psn == r.ePSN && !r.ucDrop {
			return true
		}
		if !isStart(p.Mask) {
			qp.ucResync(psn)
			return false
		}
		r.ePSN, r.inMsg, r.ucDrop, r.off = psn, 0, false, 0
		return true
	}
	d := wire.PSNDiff(psn, r.ePSN)
	if d > 0 {
		qp.dev.stats.DropOutOfSeq.Add(1)
		if !r.nakSeqSent {
			r.nakSeqSent = true
			qp.dev.stats.SeqNAKsSent.Add(1)
			qp.sendAck(r.ePSN, wire.SyndromeNAKSeq)
		}
		return false
	}
	if d < 0 {
		qp.rcDuplicate(p)
		return false
	}
	r.nakSeqSent = false
	return true
}

// respOpSeq reports whether p may come next in the message in progress
// (docs/protocol.md §5.7): a MIDDLE or LAST of the same operation inside
// one, a FIRST or ONLY outside. RC: bad opcode sequence, NAK 0x61. UC: a
// FIRST or ONLY starts a new message, dropping the unfinished one; another
// packet is dropped until one does.
func (qp *QP) respOpSeq(p *wire.Packet) bool {
	r := &qp.resp
	m := p.Mask
	var ok bool
	switch r.inMsg {
	case msgSend:
		ok = m&wire.IsSend != 0 && m&(wire.Middle|wire.Last) != 0
	case msgWrite:
		ok = m&wire.IsWrite != 0 && m&(wire.Middle|wire.Last) != 0
	default:
		ok = isStart(m)
	}
	switch {
	case ok:
		return true
	case qp.typ != QPTypeUC:
		qp.nakError(p.BTH.PSN, wire.SyndromeNAKInvReq, WCRemInvReqErr)
		return false
	case isStart(m):
		r.inMsg, r.off = 0, 0
		return true
	}
	qp.ucResync(p.BTH.PSN)
	return false
}

// respOpValid reports whether the QP's access flags allow the operation
// (docs/protocol.md §7.2): RC NAKs 0x61 one they do not allow, UC drops it.
func (qp *QP) respOpValid(p *wire.Packet) bool {
	if need := qpAccessFor(p); need != 0 && qp.attr.QPAccessFlags&need == 0 {
		qp.respFail(p, wire.SyndromeNAKInvReq, WCRemInvReqErr)
		return false
	}
	return true
}

// respLength reports whether p's payload has a valid length (docs/protocol.md
// §5.2): FIRST and MIDDLE exactly the PMTU, LAST 1 to the PMTU, ONLY at most
// the PMTU.
func (qp *QP) respLength(p *wire.Packet) bool {
	m := p.Mask
	if m&wire.HasPayload == 0 {
		return true
	}
	n := len(p.Payload)
	var ok bool
	switch {
	case m&(wire.First|wire.Middle) != 0:
		ok = n == qp.pmtu
	case m&wire.Last != 0:
		ok = n >= 1 && n <= qp.pmtu
	default:
		ok = n <= qp.pmtu
	}
	if !ok {
		qp.respFail(p, wire.SyndromeNAKInvReq, WCRemInvReqErr)
	}
	return ok
}

// respFail is the responder's action on an invalid packet: RC sends NAK
// syn, completes the receive WQE in use with wcs and moves the QP to ERR
// (nakError); UC drops the message (ucDropMsg).
func (qp *QP) respFail(p *wire.Packet, syn uint8, wcs WCStatus) {
	if qp.typ == QPTypeUC {
		qp.ucDropMsg(p)
		return
	}
	qp.nakError(p.BTH.PSN, syn, wcs)
}

// respRNR is the responder's action on a request that needs a receive WQE
// when none is posted: RC sends an RNR NAK with the packet's PSN
// (docs/protocol.md §5.6), and the requester retries; UC drops the message.
func (qp *QP) respRNR(p *wire.Packet) {
	if qp.typ == QPTypeUC {
		qp.ucDropMsg(p)
		return
	}
	qp.dev.stats.RNRNAKsSent.Add(1)
	qp.sendAck(p.BTH.PSN, wire.AETHTypeRNR|qp.attr.MinRNRTimer&wire.AETHValueMask)
}

// ucResync drops a UC packet that does not start a message while the QP
// waits for one (docs/protocol.md §6.2): everything up to the next FIRST or
// ONLY is dropped.
func (qp *QP) ucResync(psn uint32) {
	r := &qp.resp
	qp.dev.stats.DropUCResync.Add(1)
	r.ucDrop = true
	r.inMsg = 0
	r.ePSN = wire.PSNAdd(psn, 1)
}

// ucDropMsg drops the UC message p belongs to (docs/protocol.md §6.2): the
// rest of it is dropped up to its end, and the receive WQE in use, if any,
// is kept for the next message.
func (qp *QP) ucDropMsg(p *wire.Packet) {
	r := &qp.resp
	qp.dev.stats.DropUCResync.Add(1)
	r.inMsg = 0
	r.ucDrop = !isEnd(p.Mask)
	r.off = 0
	r.ePSN = wire.PSNAdd(p.BTH.PSN, 1)
}

// accepted advances ePSN past psn and, on RC, ACKs if asked (docs/protocol.md §5.3: on the
// receive loop the ACK is deferred to the end of the batch and coalesced, tx.go).
func (qp *QP) accepted(p *wire.Packet, end bool) {
	r := &qp.resp
	if qp.typ == QPTypeUC {
		r.ePSN = wire.PSNAdd(p.BTH.PSN, 1) // UC: no ACKs, no MSN
		return
	}
	if end {
		r.msn++
	}
	r.ePSN = wire.PSNAdd(p.BTH.PSN, 1)
	if p.BTH.AckReq && qp.state != QPStateErr {
		if !end && qp.rxBatched {
			// An ACK asked for inside a message opens the sender's window
			// (rxe asks every 65 packets, its window is 128; softroce every 129, its window 512): it leaves now,
			// not at the end of the batch.
			qp.buildAck(p.BTH.PSN, wire.SyndromeACK, r.msn)
			qp.dev.rx.kick = true
			return
		}
		qp.sendAck(p.BTH.PSN, wire.SyndromeACK)
	}
}

// respSend places a SEND packet in the receive WQE (taken at the first
// packet) and completes the WQE at the last.
func (qp *QP) respSend(p *wire.Packet) {
	r := &qp.resp
	m := p.Mask
	if m&(wire.First|wire.Only) != 0 {
		if !r.haveWQE && !qp.takeRecv() {
			qp.respRNR(p)
			return
		}
		r.off = 0
	}
	if !qp.placeSend(p) {
		return
	}
	if m&(wire.Last|wire.Only) != 0 {
		r.inMsg = 0
		qp.finishSend(p)
		if qp.state == QPStateErr {
			return
		}
	} else {
		r.inMsg = msgSend
	}
	qp.accepted(p, m&(wire.Last|wire.Only) != 0)
}

// placeSend copies a SEND packet's payload into the receive WQE.
func (qp *QP) placeSend(p *wire.Packet) bool {
	r := &qp.resp
	n := len(p.Payload)
	if uint64(r.off+n) > r.wqe.cap {
		// Receive buffer too small -> NAK 0x61, REM_INV_REQ_ERR (docs/protocol.md §5.7).
		qp.respFail(p, wire.SyndromeNAKInvReq, WCRemInvReqErr)
		return false
	}
	if n > 0 && !qp.dev.scatter(qp.pd, r.wqe.sges(), r.off, p.Payload) {
		// Malformed receive WQE (bad lkey/SGE) -> NAK 0x63, LOC_QP_OP_ERR (docs/protocol.md §5.7).
		qp.respFail(p, wire.SyndromeNAKRemOp, WCLocQPOpErr)
		return false
	}
	r.off += n
	return true
}

// finishSend completes the receive WQE at the end of a SEND.
func (qp *QP) finishSend(p *wire.Packet) {
	r := &qp.resp
	var fl WCFlags
	var imm uint32
	st := WCSuccess
	if p.Mask&wire.HasImmDt != 0 {
		fl, imm = WCWithImm, p.Imm
	}
	if p.Mask&wire.HasIETH != 0 {
		fl, imm = WCWithInv, p.IETH
		if !qp.remoteInvalidate(p.IETH) {
			st = WCRemInvReqErr // SEND_WITH_INV of a bad R_Key: normal ACK, WC error, QP to ERR (docs/protocol.md §5.7)
		}
	}
	r.haveWQE = false
	qp.pushRecvWC(&r.wqe, st, WCRecv, uint32(r.off), imm, fl, p.BTH.SE)
	if st != WCSuccess {
		r.msn++
		r.ePSN = wire.PSNAdd(p.BTH.PSN, 1)
		qp.sendAck(p.BTH.PSN, wire.SyndromeACK)
		qp.toError()
	}
}

// remoteInvalidate executes a SEND_WITH_INVALIDATE's invalidation (docs/protocol.md §7.3,
// o10-37): only a type 2 memory window bound to this QP may be invalidated
// remotely. rxe also allows fast-registration MRs (IB_MR_TYPE_MEM_REG),
// which softroce does not implement; an ordinary MR is refused (rxe
// rxe_invalidate_mr), as is a type 1 window, a key of another PD or QP, or
// an unknown key. A refusal is counted in Stats.BadInvalidates; the caller
// completes the receive with REM_INV_REQ_ERR and moves the QP to ERR
// (rxe: RESPST_ERR_INVALIDATE_RKEY), the requester gets a normal ACK.
func (qp *QP) remoteInvalidate(key uint32) bool {
	if key>>8 > maxMRIndex && qp.dev.lookupMW(key).invalidate(qp.pd, key, qp) {
		return true
	}
	qp.dev.stats.BadInvalidates.Add(1)
	return false
}

// respWrite places an RDMA WRITE packet in the memory its RETH (at the
// first packet) names, and completes a receive WQE at the last if it
// carries immediate data.
func (qp *QP) respWrite(p *wire.Packet) {
	r := &qp.resp
	m := p.Mask
	if m&(wire.First|wire.Only) != 0 {
		if p.RETH.Length > maxMsgSize {
			qp.respFail(p, wire.SyndromeNAKInvReq, WCRemInvReqErr)
			return
		}
		// Zero-length WRITE skips the R_Key lookup (docs/protocol.md §7.1).
		if p.RETH.Length > 0 {
			mr, _ := qp.rAcquire(p.RETH.RKey, p.RETH.VA, uint64(p.RETH.Length), AccessRemoteWrite)
			if mr == nil {
				qp.respFail(p, wire.SyndromeNAKRemAcc, WCRemAccessErr)
				return
			}
			mr.release()
			r.wMR = nil
			if p.RETH.RKey>>8 <= maxMRIndex {
				r.wMR = mr // keep the MR; windows are looked up per packet
			}
		}
		r.wKey, r.wVA, r.wRem, r.wLen = p.RETH.RKey, p.RETH.VA, int(p.RETH.Length), p.RETH.Length
	}
	n := len(p.Payload)
	// While more than a PMTU remains the packet is a full PMTU; the last one
	// carries exactly the rest (docs/protocol.md §5.2).
	if (isEnd(m) && n != r.wRem) || (!isEnd(m) && r.wRem <= qp.pmtu) {
		qp.respFail(p, wire.SyndromeNAKInvReq, WCRemInvReqErr)
		return
	}
	imm := m&wire.HasImmDt != 0
	if imm && !r.haveWQE && !qp.takeRecv() {
		qp.respRNR(p)
		return
	}
	if n > 0 {
		var mr *MR
		var off int
		if r.wMR != nil {
			mr, off = r.wMR.acquire(qp.pd, r.wKey, r.wVA, uint64(n), AccessRemoteWrite)
		} else {
			mr, off = qp.rAcquire(r.wKey, r.wVA, uint64(n), AccessRemoteWrite)
		}
		if mr == nil {
			if qp.dev.checkNow() {
				qp.respFail(p, wire.SyndromeNAKRemAcc, WCRemAccessErr)
			}
			return
		}
		ok, good := qp.dev.memCopyChecked(mr.buf[off:off+n], p)
		mr.release()
		if !ok {
			if qp.dev.checkNow() {
				qp.respFail(p, wire.SyndromeNAKRemAcc, WCRemAccessErr)
			}
			return
		}
		if !good {
			return // failed its ICRC check, which was left for the copy
		}
		r.wVA += uint64(n)
		r.wRem -= n
	}
	end := isEnd(m)
	if end {
		r.inMsg = 0
		if imm {
			r.haveWQE = false
			qp.pushRecvWC(&r.wqe, WCSuccess, WCRecvRDMAWithImm, r.wLen, p.Imm, WCWithImm, p.BTH.SE)
		}
	} else {
		r.inMsg = msgWrite
	}
	qp.accepted(p, end)
}

// writeInPlace reports whether p, an RC WRITE MIDDLE or LAST whose ICRC
// check was left for later (checkLate), goes from input straight to
// respWrite's copy with nothing done before it: an RC QP receiving, past
// its first packet, from its peer, p at the expected PSN with no sequence
// NAK outstanding, inside a WRITE the QP allows, of the length the WRITE
// expects. Any other packet is checked before input acts on it.
func (qp *QP) writeInPlace(lp *link.Packet, p *wire.Packet) bool {
	r := &qp.resp
	n := len(p.Payload)
	switch {
	case qp.typ != QPTypeRC, qp.dead, qp.state < QPStateRTR, qp.state == QPStateErr,
		qp.state == QPStateRTR && !qp.commEst,
		lp.Src.Addr().Unmap() != qp.dst.Addr().Unmap(),
		r.inMsg != msgWrite, r.nakSeqSent, p.BTH.PSN != r.ePSN,
		qp.attr.QPAccessFlags&AccessRemoteWrite == 0:
		return false
	case p.Mask&wire.Middle != 0:
		return n == qp.pmtu && r.wRem > qp.pmtu
	}
	return n == r.wRem && n <= qp.pmtu
}

// newRes takes the next responder resource, overwriting the oldest (docs/protocol.md §5.7, §10.3).
// Call finishOldest first.
func (qp *QP) newRes() *respRes {
	r := &qp.resp
	x := &r.res[r.resIdx]
	r.resIdx = (r.resIdx + 1) % len(r.res)
	return x
}

// finishOldest sends, out of pace, the rest of the READ in the resource a
// new READ or atomic is about to take: rxe answers a READ to its end
// before it takes the next request, so the resource it overwrites is
// finished (docs/protocol.md §5.7). It returns false if that READ failed
// (the QP is then in ERR).
func (qp *QP) finishOldest() bool {
	r := &qp.resp
	if len(r.res) == 0 {
		return true
	}
	x := &r.res[r.resIdx]
	if !x.valid || x.kind != kindRead || !x.sending {
		return true
	}
	n, ok := qp.readResponses(x, -1)
	if p := r.pace; p != nil {
		p.tokens -= n // the tick's budget, and the window, count them
		p.inWin += n
	}
	return ok
}

func (qp *QP) rcRead(p *wire.Packet) {
	r := &qp.resp
	psn := p.BTH.PSN
	if !qp.finishOldest() {
		return
	}
	// rxe only NAKs reads when max_dest_rd_atomic == 0 (docs/protocol.md §5.7).
	if len(r.res) == 0 || p.RETH.Length > maxMsgSize {
		qp.nakError(psn, wire.SyndromeNAKInvReq, WCRemInvReqErr)
		return
	}
	if p.RETH.Length > 0 {
		mr, _ := qp.rAcquire(p.RETH.RKey, p.RETH.VA, uint64(p.RETH.Length), AccessRemoteRead)
		if mr == nil {
			qp.nakError(psn, wire.SyndromeNAKRemAcc, WCRemAccessErr)
			return
		}
		mr.release()
	}
	n := 1
	if p.RETH.Length > 0 {
		n = (int(p.RETH.Length) + qp.pmtu - 1) / qp.pmtu
	}
	x := qp.newRes()
	*x = respRes{kind: kindRead, valid: true, first: psn, last: wire.PSNAdd(psn, n-1), va: p.RETH.VA,
		rkey: p.RETH.RKey, length: p.RETH.Length}
	r.msn++ // MSN increments on receipt of a READ (C9-148)
	r.ePSN = wire.PSNAdd(psn, n)
	qp.startRead(x)
}

// rcAtomic executes COMPARE_SWAP, FETCH_ADD, FLUSH and ATOMIC_WRITE (docs/protocol.md §5.3, §7.2).
func (qp *QP) rcAtomic(p *wire.Packet) {
	r := &qp.resp
	psn := p.BTH.PSN
	m := p.Mask
	if !qp.finishOldest() {
		return
	}
	if len(r.res) == 0 {
		qp.nakError(psn, wire.SyndromeNAKInvReq, WCRemInvReqErr)
		return
	}
	x := respRes{valid: true, first: psn, last: psn}
	switch {
	case m&wire.IsAtomic != 0:
		va := p.AtomicETH.VA
		if va&7 != 0 { // atomic VA % 8 != 0 -> NAK 0x61
			qp.nakError(psn, wire.SyndromeNAKInvReq, WCRemInvReqErr)
			return
		}
		mr, off := qp.rAcquire(p.AtomicETH.RKey, va, 8, AccessRemoteAtomic)
		if mr == nil {
			qp.nakError(psn, wire.SyndromeNAKRemAcc, WCRemAccessErr)
			return
		}
		qp.dev.atomMu.Lock()
		orig, ok := memAtomic(mr.buf[off:off+8], p.BTH.Opcode == wire.RCCompareSwap, p.AtomicETH.Compare, p.AtomicETH.SwapAdd)
		qp.dev.atomMu.Unlock()
		mr.release()
		if !ok {
			qp.nakError(psn, wire.SyndromeNAKRemAcc, WCRemAccessErr)
			return
		}
		x.kind, x.orig = kindAtomic, orig
	case m&wire.IsAtomicWrite != 0:
		va := p.RETH.VA
		if va&7 != 0 || p.RETH.Length != 8 {
			qp.nakError(psn, wire.SyndromeNAKInvReq, WCRemInvReqErr)
			return
		}
		mr, off := qp.rAcquire(p.RETH.RKey, va, 8, AccessRemoteWrite)
		if mr == nil {
			qp.nakError(psn, wire.SyndromeNAKRemAcc, WCRemAccessErr)
			return
		}
		qp.dev.atomMu.Lock()
		ok := memCopy(mr.buf[off:off+8], p.Payload)
		qp.dev.atomMu.Unlock()
		mr.release()
		if !ok {
			qp.nakError(psn, wire.SyndromeNAKRemAcc, WCRemAccessErr)
			return
		}
		x.kind = kindAtomicWrite
	default: // FLUSH
		need := AccessFlushGlobal
		if p.FETH.PLT == wire.FlushPersistence {
			need = AccessFlushPersistent
		}
		n := uint64(p.RETH.Length)
		va := p.RETH.VA
		if p.FETH.SEL == wire.FlushSelWholeMR {
			n, va = 0, 0
		}
		if p.FETH.SEL == wire.FlushSelWholeMR || n > 0 {
			mr := qp.dev.lookupMR(p.RETH.RKey)
			ok := false
			if mr != nil {
				mr.mu.RLock()
				ok = mr.key == p.RETH.RKey && mr.valid && mr.pd == qp.pd && mr.access&need != 0
				if ok && n > 0 {
					ok = va >= mr.iova && n <= uint64(len(mr.buf)) && va-mr.iova <= uint64(len(mr.buf))-n
				}
				mr.mu.RUnlock()
			}
			if !ok {
				qp.nakError(psn, wire.SyndromeNAKRemAcc, WCRemAccessErr)
				return
			}
		}
		x.kind = kindFlush // Go memory is coherent: nothing to flush
	}
	r.msn++
	r.ePSN = wire.PSNAdd(psn, 1)
	res := qp.newRes()
	*res = x
	qp.atomicResponse(res)
}

func (qp *QP) atomicResponse(x *respRes) {
	var h wire.Packet
	h.BTH = wire.BTH{Opcode: wire.RCReadResponseOnly, DestQP: qp.attr.DestQPNum, PSN: x.first}
	h.AETH = wire.AETH{Syndrome: wire.SyndromeACK, MSN: qp.resp.msn & wire.PSNMask}
	if x.kind == kindAtomic {
		h.BTH.Opcode = wire.RCAtomicAcknowledge
		h.AtomicAckETH.Orig = x.orig
	}
	tos, ttl := qp.grh()
	qp.newPacket(&h, 0, qp.dst, tos, ttl)
}

// rcDuplicate answers a request with PSN < ePSN (docs/protocol.md §5.7).
func (qp *QP) rcDuplicate(p *wire.Packet) {
	st := &qp.dev.stats
	m := p.Mask
	psn := p.BTH.PSN
	switch {
	case m&(wire.IsSend|wire.IsWrite) != 0:
		// Duplicate SEND/WRITE: ACK with PSN ePSN-1 even without AckReq; not re-placed.
		st.DupRequests.Add(1)
		qp.sendAck(wire.PSNAdd(qp.resp.ePSN, -1), wire.SyndromeACK)
	case m&wire.IsRead != 0:
		for i := range qp.resp.res {
			x := &qp.resp.res[i]
			if !x.valid || x.kind != kindRead || wire.PSNDiff(psn, x.first) < 0 || wire.PSNDiff(psn, x.last) > 0 {
				continue
			}
			end := p.RETH.VA + uint64(p.RETH.Length)
			if p.RETH.RKey != x.rkey || p.RETH.VA < x.va || end > x.va+uint64(x.length) {
				break
			}
			st.DupRequests.Add(1)
			k := 1
			if p.RETH.Length > 0 {
				k = (int(p.RETH.Length) + qp.pmtu - 1) / qp.pmtu
			}
			if i := int(wire.PSNDiff(psn, x.first)); wire.PSNDiff(wire.PSNAdd(psn, k-1), x.last) < 0 {
				// Part of the READ, short of its end: a requester that kept
				// the responses after a gap asks for the missing ones
				// (readgap.go). Only those, at once, as rxe.
				if !qp.resp.selective {
					qp.resp.selective = true
					qp.unpace()
				}
				qp.readRange(x, i, k)
				return
			}
			qp.replayRead(x, psn)
			return
		}
		st.DropDuplicate.Add(1)
	default:
		for i := range qp.resp.res {
			x := &qp.resp.res[i]
			if x.valid && x.kind != kindRead && x.first == psn {
				st.DupRequests.Add(1)
				qp.atomicResponse(x) // cached result; not re-executed
				return
			}
		}
		st.DropDuplicate.Add(1)
	}
}

// udReceive is the UD responder (docs/protocol.md §6.1): Q_Key check, one receive WQE per
// packet, 40-byte GRH area then the payload.
func (qp *QP) udReceive(lp *link.Packet, p *wire.Packet) {
	st := &qp.dev.stats
	if p.DETH.QKey != qp.attr.QKey {
		st.DropQKey.Add(1)
		return
	}
	need := uint64(grhLen + len(p.Payload))
	var w recvWQE
	if qp.srq != nil {
		if !qp.srq.take(&w) {
			st.DropNoRecv.Add(1)
			return
		}
		if w.cap < need {
			st.DropLength.Add(1)
			qp.pushRecvWC(&w, WCLocLenErr, WCRecv, 0, 0, 0, false) // SRQ: error completion (docs/protocol.md §6.1)
			return
		}
	} else {
		c, ok := qp.rq.peekCap()
		if !ok {
			st.DropNoRecv.Add(1)
			return
		}
		if c < need {
			st.DropLength.Add(1) // too small: dropped (docs/protocol.md §6.1)
			return
		}
		qp.rq.pop(&w)
	}
	var grh [grhLen]byte
	buildGRH(&grh, lp)
	if !qp.dev.scatter(qp.pd, w.sges(), 0, grh[:]) || !qp.dev.scatter(qp.pd, w.sges(), grhLen, p.Payload) {
		qp.pushRecvWC(&w, WCLocProtErr, WCRecv, 0, 0, 0, false)
		return
	}
	fl := WCWithGRH
	if p.Mask&wire.HasImmDt != 0 {
		fl |= WCWithImm
	}
	wc := WC{WRID: w.wrid, Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(need), ImmData: p.Imm,
		QPNum: qp.qpn, SrcQP: p.DETH.SrcQP, Flags: fl, SL: rocePktType(lp)}
	if !qp.recvCQ.push(&wc, p.BTH.SE, qp.rxBatched) {
		qp.dev.event(AsyncEvent{Type: EventQPFatal, QP: qp})
		qp.toError()
	}
}

const grhLen = 40

// RoCE packet types a UD receive completion reports in its SL, as mlx5
// reports them (its CQE's roce_pkt_type): bit 3 says the frame had a UDP
// header (RoCEv2), bits 0-2 the L3 header that fills the GRH area.
const (
	// WCSLRoCEv2IPv6 is the SL of a UD receive that came over IPv6.
	WCSLRoCEv2IPv6 = 0x8 | 0x1
	// WCSLRoCEv2IPv4 is the SL of a UD receive that came over IPv4: the
	// IPv4 header is in the last 20 bytes of the GRH area.
	WCSLRoCEv2IPv4 = 0x8 | 0x2
)

// rocePktType is the SL of a UD receive completion. SL has no other
// meaning on Ethernet (rxe reports 0), and UCX (before 1.18) takes its low
// three bits for the L3 type when it checks the GRH's destination: with 0
// it read an IPv4 packet's GRH area as an IPv6 header and dropped every
// datagram.
func rocePktType(lp *link.Packet) uint8 {
	if lp.IPHdrLen == 40 || lp.IPHdrLen != 20 && !lp.Src.Addr().Unmap().Is4() {
		return WCSLRoCEv2IPv6
	}
	return WCSLRoCEv2IPv4
}

// buildGRH fills the 40-byte GRH area of a UD receive (docs/protocol.md §6.1): the IPv6 header,
// or 20 zero bytes and the IPv4 header.
func buildGRH(g *[grhLen]byte, lp *link.Packet) {
	udpLen := 8 + lp.N
	src, dst := lp.Src.Addr().Unmap(), lp.Dst.Addr().Unmap()
	if lp.IPHdrLen == 20 || lp.IPHdrLen == 40 {
		copy(g[grhLen-lp.IPHdrLen:], lp.IPHdr[:lp.IPHdrLen])
		return
	}
	ttl := lp.TTL
	if ttl == 0 {
		ttl = 64
	}
	if src.Is4() {
		h := wire.IPv4Header{TOS: lp.TOS, TotalLen: uint16(wire.IPv4HeaderLen + udpLen), DF: true, TTL: ttl, Src: src.As4(), Dst: dst.As4()}
		h.Put(g[grhLen-wire.IPv4HeaderLen:])
		return
	}
	h := wire.IPv6Header{TrafficClass: lp.TOS, PayloadLen: uint16(udpLen), HopLimit: ttl, Src: src.As16(), Dst: dst.As16()}
	h.Put(g[:])
}

func isEnd(m wire.Mask) bool { return m&(wire.Last|wire.Only) != 0 }

func isStart(m wire.Mask) bool { return m&(wire.First|wire.Only) != 0 }
