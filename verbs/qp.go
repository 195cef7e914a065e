package verbs

import (
	"math/bits"
	"net/netip"
	"sync"
	"syscall"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// wqeKind classifies a send WQE.
type wqeKind uint8

const (
	kindSend wqeKind = iota
	kindWrite
	kindRead
	kindAtomic
	kindFlush
	kindAtomicWrite
	kindLocal
)

// sending reports the states in which the requester and completer work
// (RTS, and SQD while the send queue drains).
func (qp *QP) sending() bool { return qp.state == QPStateRTS || qp.state == QPStateSQD }

// sqHeadWQE is the oldest WQE of the send queue (the queue must not be empty).
func (qp *QP) sqHeadWQE() *sendWQE { return &qp.sq[qp.sqHead%uint32(len(qp.sq))] }

// rdLike reports kinds that wait for a response and count against max_rd_atomic.
func (k wqeKind) rdLike() bool { return k >= kindRead && k <= kindAtomicWrite }

type sendWQE struct {
	wr       SendWR
	sge      [MaxSGE]SGE
	inline   []byte
	length   uint32
	kind     wqeKind
	signaled bool
	dst      netip.AddrPort // UD destination
	tos, ttl uint8
	started  bool
	done     bool
	status   WCStatus
	firstPSN uint32
	lastPSN  uint32
	npkts    int
	acked    int // packets acknowledged (send/write) or responses received in order from the first (read)
	// READ responses kept after a gap (comp.go: readResponse): bit
	// i%readKeep of got says response i (acked < i < acked+readKeep) has
	// landed; gotHi is one past the highest response landed, or npkts once
	// the responder answered a later request (the rest of this one was lost).
	got   [readKeep / 64]uint64
	gotHi int
	// The last gap re-request (a duplicate READ for responses rrFrom to
	// rrTo-1): rrTo 0 when none is outstanding. Re-requests never start
	// below an earlier one's start, as rxe's responder requires.
	rrFrom, rrTo int
}

// QP is a queue pair (ibv_qp).
type QP struct {
	dev    *Device
	pd     *PD
	ctx    any
	typ    QPType
	qpn    uint32
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	sigAll bool
	cap    QPCap
	// noMcastLB: the QP's multicast datagrams are not delivered to this
	// device's QPs (QPCreateBlockSelfMcastLB; recv.go multicastInput).
	noMcastLB bool

	mu    sync.Mutex
	state QPState
	attr  QPAttr
	dst   netip.AddrPort // peer (RC/UC)
	sport uint16
	pmtu  int
	dead  bool // destroyed

	// The device's send budget (budget.go): the QP waits in its FIFO, or
	// serveBudget is letting it send.
	budgetWaiting, budgetServed bool

	commEst   bool // EventCommEst raised
	sqdNotify bool // raise EventSQDrained when the SQ drains

	// Send queue (shared by PostSend, the requester and the completer).
	sq     []sendWQE
	sqHead uint32 // oldest WQE not yet completed
	sqTail uint32 // next free slot

	req  reqState  // requester (req.go)
	comp compState // completer and its timers (comp.go, timer.go)

	// Receive queue and responder state.
	rq   recvRing
	resp respState

	// Staging batch of the transmit path (tx.go), used under mu.
	txb    []link.Packet // made at the QP's first packet (txPacket)
	txref  []zcRef       // what txb[i] lends (zero-copy send, zc.go)
	txn    int
	txOwed bool // packets handed to the device queue since the last flushUnlock
	inPost bool // PostSend is running (its few packets may go ahead of the QP's queued ACK: tx.go)
	// rxBatched: input is running on the receive loop, which sends at the
	// end of its batch (positive ACKs may wait for it).
	rxBatched bool
}

// CreateQP creates a QP (ibv_create_qp).
func (pd *PD) CreateQP(attr *QPInitAttr) (*QP, error) { return pd.createQP(attr, 0) }

// CreateGSIQP creates the device's GSI QP: a UD QP with QPN 1 that accepts
// only Q_Key 0x80010000 (docs/protocol.md §6.1, §8.1), for the connection manager's MADs.
func (pd *PD) CreateGSIQP(attr *QPInitAttr) (*QP, error) {
	a := *attr
	a.QPType = QPTypeUD
	return pd.createQP(&a, 1)
}

func (pd *PD) createQP(attr *QPInitAttr, qpn uint32) (*QP, error) {
	d := pd.dev
	if d.closed.Load() {
		return nil, ErrClosed
	}
	if attr == nil {
		return nil, newErr("create qp", "nil attributes", syscall.EINVAL)
	}
	switch attr.QPType {
	case QPTypeRC, QPTypeUC, QPTypeUD:
	default:
		return nil, newErr("create qp", "QP type must be RC, UC or UD", syscall.EOPNOTSUPP)
	}
	if attr.CreateFlags&^QPCreateBlockSelfMcastLB != 0 {
		return nil, newErr("create qp", "unsupported create flags (only IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)", syscall.EINVAL)
	}
	c := attr.Cap
	if attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, newErr("create qp", "send_cq and recv_cq are required", syscall.EINVAL)
	}
	if attr.SendCQ.dev != d || attr.RecvCQ.dev != d || (attr.SRQ != nil && attr.SRQ.dev != d) {
		return nil, newErr("create qp", "CQ or SRQ belongs to another device", syscall.EINVAL)
	}
	if c.MaxSendWR > maxQPWR || c.MaxRecvWR > maxQPWR || c.MaxSendSGE > MaxSGE || c.MaxRecvSGE > MaxSGE ||
		c.MaxInlineData > MaxInline {
		return nil, newErr("create qp", "caps above the device limits (max_qp_wr "+utoa(maxQPWR)+", max_sge "+utoa(MaxSGE)+", max_inline_data "+utoa(MaxInline)+")", syscall.EINVAL)
	}
	if err := pd.ref(); err != nil {
		return nil, err
	}
	// Rings are powers of two (the free-running indices wrap cleanly);
	// like rxe, the QP reports the sizes it really has.
	c.MaxSendWR = uint32(roundPow2(int(max(c.MaxSendWR, 1))))
	c.MaxSendSGE = max(c.MaxSendSGE, 1)
	c.MaxRecvSGE = max(c.MaxRecvSGE, 1)
	if attr.SRQ != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	} else {
		c.MaxRecvWR = max(c.MaxRecvWR, 1)
	}
	// rxe reports the inline size it really supports.
	c.MaxInlineData = MaxInline
	qp := &QP{dev: d, pd: pd, ctx: attr.Context, typ: attr.QPType, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ,
		srq: attr.SRQ, sigAll: attr.SQSigAll, cap: c, noMcastLB: attr.CreateFlags&QPCreateBlockSelfMcastLB != 0}
	qp.sq = make([]sendWQE, c.MaxSendWR)
	if attr.SRQ == nil {
		qp.rq = makeRecvRing(int(c.MaxRecvWR), int(c.MaxRecvSGE))
	}
	if err := d.addQP(qp, qpn); err != nil {
		pd.unref()
		return nil, err
	}
	if qp.qpn == 1 {
		qp.attr.QKey = wire.GSIQKey
	}
	qp.sport = rxeSport(qp.qpn)
	qp.comp.rng = uint64(qp.qpn)*0x9E3779B97F4A7C15 | 1
	qp.comp.retryTimer = d.clock.AfterFunc(1<<62, qp.onRetryTimer)
	qp.comp.retryTimer.Stop()
	qp.comp.rnrTimer = d.clock.AfterFunc(1<<62, qp.onRNRTimer)
	qp.comp.rnrTimer.Stop()
	for _, cq := range [...]*CQ{qp.sendCQ, qp.recvCQ} {
		cq.mu.Lock()
		cq.users++
		cq.mu.Unlock()
	}
	if qp.srq != nil {
		qp.srq.mu.Lock()
		qp.srq.users++
		qp.srq.mu.Unlock()
	}
	return qp, nil
}

// rxeSport is the UDP source port rxe gives a QP at creation (docs/protocol.md §1.3):
// 0xC000 + hash_32_generic(qpn) folded to 14 bits.
func rxeSport(qpn uint32) uint16 {
	return 0xC000 + uint16((qpn*0x61C88647)>>(32-14))&0x3FFF
}

// UDPSport returns the source port for an RC/UC QP with an AV (docs/protocol.md §1.3,
// rdma_get_udp_sport): a hash of the flow label or of both QPNs.
func UDPSport(flowLabel, lqpn, rqpn uint32) uint16 {
	fl := flowLabel & 0xFFFFF
	if fl == 0 {
		v := uint64(lqpn) * uint64(rqpn)
		v ^= v >> 20
		v ^= v >> 40
		fl = uint32(v & 0xFFFFF)
	}
	return 0xC000 | uint16((fl&0x3FFF)^((fl&0xFC000)>>14))
}

// QPN returns the QP number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Type returns the QP type.
func (qp *QP) Type() QPType { return qp.typ }

// Context returns the user context given at creation.
func (qp *QP) Context() any { return qp.ctx }

// State returns the current state.
func (qp *QP) State() QPState { qp.mu.Lock(); defer qp.mu.Unlock(); return qp.state }

// Device returns the QP's device.
func (qp *QP) Device() *Device { return qp.dev }

// SourcePort returns the UDP source port the QP sends from (docs/protocol.md §1.3).
func (qp *QP) SourcePort() uint16 { qp.mu.Lock(); defer qp.mu.Unlock(); return qp.sport }

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, QPInitAttr) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.QPState, a.CurQPState = qp.state, qp.state
	a.Cap = qp.cap
	a.SQPSN = qp.req.nextPSN
	if qp.state >= QPStateRTR && qp.typ != QPTypeUD {
		a.RQPSN = qp.resp.ePSN
	}
	return a, QPInitAttr{Context: qp.ctx, SendCQ: qp.sendCQ, RecvCQ: qp.recvCQ, SRQ: qp.srq, Cap: qp.cap,
		QPType: qp.typ, SQSigAll: qp.sigAll}
}

// transition describes the attributes allowed in one state change (docs/protocol.md §5.9 table).
type transition struct{ req, opt [5]AttrMask } // indexed by QP type

var transitions = map[[2]QPState]transition{}

func init() {
	rc, uc, ud := QPTypeRC, QPTypeUC, QPTypeUD
	set := func(from, to QPState, typ QPType, req, opt AttrMask) {
		t := transitions[[2]QPState{from, to}]
		t.req[typ], t.opt[typ] = req, opt|req
		transitions[[2]QPState{from, to}] = t
	}
	for _, typ := range []QPType{rc, uc, ud} {
		for s := QPStateReset; s <= QPStateErr; s++ {
			set(s, QPStateReset, typ, 0, 0)
			if s != QPStateReset {
				set(s, QPStateErr, typ, 0, 0)
			}
		}
	}
	conn := QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
	set(QPStateReset, QPStateInit, rc, conn, 0)
	set(QPStateReset, QPStateInit, uc, conn, 0)
	set(QPStateReset, QPStateInit, ud, QPAttrPKeyIndex|QPAttrPort|QPAttrQKey, 0)
	set(QPStateInit, QPStateInit, rc, 0, conn)
	set(QPStateInit, QPStateInit, uc, 0, conn)
	set(QPStateInit, QPStateInit, ud, 0, QPAttrPKeyIndex|QPAttrPort|QPAttrQKey)
	set(QPStateInit, QPStateRTR, rc, QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer,
		QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex)
	set(QPStateInit, QPStateRTR, uc, QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN, QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex)
	set(QPStateInit, QPStateRTR, ud, 0, QPAttrPKeyIndex|QPAttrQKey)
	set(QPStateRTR, QPStateRTS, rc, QPAttrSQPSN|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRdAtomic,
		QPAttrCurState|QPAttrAltPath|QPAttrAccessFlags|QPAttrMinRNRTimer|QPAttrPathMigState)
	set(QPStateRTR, QPStateRTS, uc, QPAttrSQPSN, QPAttrCurState|QPAttrAltPath|QPAttrAccessFlags|QPAttrPathMigState)
	set(QPStateRTR, QPStateRTS, ud, QPAttrSQPSN, QPAttrCurState|QPAttrQKey)
	rtsOpt := map[QPType]AttrMask{
		rc: QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState | QPAttrMinRNRTimer,
		uc: QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState,
		ud: QPAttrCurState | QPAttrQKey,
	}
	sqdOpt := map[QPType]AttrMask{
		rc: rtsOpt[rc] | QPAttrAV | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic | QPAttrMaxDestRdAtomic | QPAttrPKeyIndex | QPAttrPort,
		uc: rtsOpt[uc] | QPAttrAV | QPAttrPKeyIndex | QPAttrPort,
		ud: rtsOpt[ud] | QPAttrPKeyIndex | QPAttrPort,
	}
	for typ, o := range rtsOpt {
		set(QPStateRTS, QPStateRTS, typ, 0, o)
		set(QPStateSQD, QPStateRTS, typ, 0, o)
		set(QPStateRTS, QPStateSQD, typ, 0, QPAttrEnSQDAsyncNotify)
		set(QPStateSQD, QPStateSQD, typ, 0, sqdOpt[typ])
	}
	set(QPStateSQE, QPStateRTS, uc, 0, QPAttrCurState|QPAttrAccessFlags)
	set(QPStateSQE, QPStateRTS, ud, 0, QPAttrCurState|QPAttrQKey)
}

var errModify = func(reason string) error { return newErr("modify qp", reason, syscall.EINVAL) }

// Modify changes the QP's attributes selected by mask (ibv_modify_qp),
// following the state machine and the required attributes per transition (docs/protocol.md §5.9).
func (qp *QP) Modify(attr *QPAttr, mask AttrMask) error {
	if attr == nil {
		return errModify("nil attributes")
	}
	qp.mu.Lock()
	defer qp.flushUnlock()
	if qp.dead {
		return errModify("QP destroyed")
	}
	cur := qp.state
	if mask&QPAttrCurState != 0 && attr.CurQPState != cur {
		return errModify("cur_qp_state does not match the QP's state")
	}
	next := cur
	if mask&QPAttrState != 0 {
		next = attr.QPState
		if next > QPStateErr {
			return errModify("unknown qp_state")
		}
	}
	t, ok := transitions[[2]QPState{cur, next}]
	if !ok || (t.req[qp.typ] == 0 && t.opt[qp.typ] == 0 && next != QPStateReset && next != QPStateErr) {
		return errModify("transition " + cur.String() + " -> " + next.String() + " is not allowed for " + qp.typ.String())
	}
	rest := mask &^ (QPAttrState | QPAttrCurState)
	if miss := t.req[qp.typ] &^ rest; miss != 0 {
		return errModify("missing required attributes for " + cur.String() + " -> " + next.String() + ": " + maskNames(miss))
	}
	if extra := rest &^ (t.opt[qp.typ] | t.req[qp.typ] | QPAttrCurState); extra != 0 {
		return errModify("attributes not allowed in " + cur.String() + " -> " + next.String() + ": " + maskNames(extra))
	}
	if err := qp.checkAttrValues(attr, rest); err != nil {
		return err
	}
	qp.applyAttrs(attr, rest)
	if next == QPStateSQD && cur == QPStateRTS {
		qp.sqdNotify = rest&QPAttrEnSQDAsyncNotify != 0
	}
	if next != cur || next == QPStateReset {
		qp.enter(next)
	}
	if next == QPStateSQD {
		qp.checkDrained()
	}
	return nil
}

func maskNames(m AttrMask) string {
	names := [...]string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX", "PORT", "QKEY", "AV",
		"PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER",
		"SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN"}
	s := ""
	for i, n := range names {
		if m&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if m&QPAttrRateLimit != 0 {
		s += "|RATE_LIMIT"
	}
	return s
}

func (qp *QP) checkAttrValues(a *QPAttr, m AttrMask) error {
	switch {
	case m&QPAttrPort != 0 && a.PortNum != 1:
		return errModify("port_num must be 1")
	case m&QPAttrPKeyIndex != 0 && a.PKeyIndex != 0:
		return errModify("pkey_index must be 0 (one P_Key, 0xFFFF)")
	case m&QPAttrPathMTU != 0 && !a.PathMTU.Valid():
		return errModify("path_mtu must be IBV_MTU_256..IBV_MTU_4096")
	case m&QPAttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > maxRdAtom:
		return errModify("max_dest_rd_atomic above " + utoa(maxRdAtom))
	case m&QPAttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > maxRdAtom:
		return errModify("max_rd_atomic above " + utoa(maxRdAtom))
	case m&QPAttrRetryCnt != 0 && a.RetryCnt > maxRetryCnt:
		return errModify("retry_cnt must be 0.." + utoa(maxRetryCnt))
	case m&QPAttrRNRRetry != 0 && a.RNRRetry > maxRetryCnt:
		return errModify("rnr_retry must be 0.." + utoa(maxRetryCnt) + " (" + utoa(rnrRetryInfinite) + ": retry forever)")
	case m&QPAttrTimeout != 0 && a.Timeout > maxTimerCode:
		return errModify("timeout must be 0.." + utoa(maxTimerCode))
	case m&QPAttrMinRNRTimer != 0 && a.MinRNRTimer > maxTimerCode:
		return errModify("min_rnr_timer must be 0.." + utoa(maxTimerCode))
	case m&QPAttrDestQPN != 0 && a.DestQPNum > maxQPNField:
		return errModify("dest_qp_num is 24 bits")
	case m&QPAttrRQPSN != 0 && a.RQPSN > wire.PSNMask, m&QPAttrSQPSN != 0 && a.SQPSN > wire.PSNMask:
		return errModify("PSNs are 24 bits")
	case m&QPAttrAccessFlags != 0 && a.QPAccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessMWBind|AccessFlushGlobal|AccessFlushPersistent|AccessRelaxedOrdering) != 0:
		return errModify("unknown qp_access_flags")
	case m&QPAttrCap != 0:
		return errModify("resizing queues with IBV_QP_CAP is not supported")
	}
	if m&QPAttrAV != 0 {
		if !a.AHAttr.IsGlobal {
			return errModify("RoCE address vectors need a GRH (ah_attr.is_global = 1)")
		}
		if int(a.AHAttr.GRH.SGIDIndex) >= len(qp.dev.gids) {
			return errModify("sgid_index names an empty GID table entry")
		}
		if _, err := avDest(&a.AHAttr); err != nil {
			return err
		}
	}
	if qp.qpn == 1 && m&QPAttrQKey != 0 && a.QKey != wire.GSIQKey {
		return errModify("the GSI QP's Q_Key is fixed at 0x80010000")
	}
	return nil
}

func (qp *QP) applyAttrs(a *QPAttr, m AttrMask) {
	q := &qp.attr
	if m&QPAttrAccessFlags != 0 {
		q.QPAccessFlags = a.QPAccessFlags
	}
	if m&QPAttrPKeyIndex != 0 {
		q.PKeyIndex = a.PKeyIndex
	}
	if m&QPAttrPort != 0 {
		q.PortNum = a.PortNum
	}
	if m&QPAttrQKey != 0 {
		q.QKey = a.QKey
	}
	if m&QPAttrPathMTU != 0 {
		q.PathMTU = a.PathMTU
		qp.pmtu = min(a.PathMTU.Bytes(), qp.dev.mtu.Bytes())
	}
	if m&QPAttrDestQPN != 0 {
		q.DestQPNum = a.DestQPNum
	}
	if m&QPAttrRQPSN != 0 {
		q.RQPSN = a.RQPSN
		qp.resp.ePSN = a.RQPSN
	}
	if m&QPAttrSQPSN != 0 {
		q.SQPSN = a.SQPSN
		qp.req.nextPSN, qp.req.sentPSN = a.SQPSN, a.SQPSN
		qp.budgetSync()
	}
	if m&QPAttrMaxDestRdAtomic != 0 {
		q.MaxDestRdAtomic = a.MaxDestRdAtomic
		// rxe rounds rd_atomic depths up to a power of two (docs/protocol.md §10.3, §10.3).
		qp.resp.res = make([]respRes, roundPow2(int(a.MaxDestRdAtomic)))
	}
	if m&QPAttrMaxQPRdAtomic != 0 {
		q.MaxRdAtomic = a.MaxRdAtomic
		qp.req.maxRdAtomic = roundPow2(int(a.MaxRdAtomic))
	}
	if m&QPAttrMinRNRTimer != 0 {
		q.MinRNRTimer = a.MinRNRTimer
	}
	if m&QPAttrTimeout != 0 {
		q.Timeout = a.Timeout
	}
	if m&QPAttrRetryCnt != 0 {
		q.RetryCnt = a.RetryCnt
		qp.comp.retryLeft = int(a.RetryCnt)
	}
	if m&QPAttrRNRRetry != 0 {
		q.RNRRetry = a.RNRRetry
		qp.comp.rnrLeft = int(a.RNRRetry)
	}
	if m&QPAttrAV != 0 {
		q.AHAttr = a.AHAttr
		qp.dst, _ = avDest(&a.AHAttr)
		if qp.typ != QPTypeUD {
			// Newer kernels: sport from the flow label or both QPNs (docs/protocol.md §1.3).
			rq := q.DestQPNum
			if m&QPAttrDestQPN != 0 {
				rq = a.DestQPNum
			}
			qp.sport = UDPSport(a.AHAttr.GRH.FlowLabel, qp.qpn, rq)
		}
	}
}

func roundPow2(n int) int {
	if n <= 1 {
		return n
	}
	return 1 << bits.Len(uint(n-1))
}

// enter performs the side effects of entering state s.
func (qp *QP) enter(s QPState) {
	prev := qp.state
	qp.state = s
	qp.budgetFreed() // nothing counts in flight once the QP cannot send
	switch s {
	case QPStateReset:
		// RESET discards everything without completions (docs/protocol.md §5.9);
		// an ACK deferred for what was received still leaves.
		qp.emitAck()
		qp.stage()
		qp.stopTimers()
		qp.sqHead, qp.sqTail, qp.req.idx, qp.req.pkt = 0, 0, 0, 0
		for i := range qp.sq {
			qp.sq[i] = sendWQE{inline: qp.sq[i].inline[:0]}
		}
		qp.rq.head, qp.rq.n = 0, 0
		qp.comp.srtt, qp.comp.rttvar = 0, 0
		qp.req.rdOut, qp.req.noAckPkts, qp.comp.rnrWait, qp.comp.rewound, qp.comp.backoff, qp.req.narrow, qp.comp.heard, qp.comp.heardTimer = 0, 0, false, false, 0, 0, false, false
		res := qp.resp.res
		for i := range res {
			res[i] = respRes{}
		}
		qp.resp = respState{res: res}
		for i := range qp.txn {
			qp.txref[i].release()
		}
		qp.txn = 0
		a := QPAttr{QKey: qp.attr.QKey}
		if qp.qpn != 1 {
			a.QKey = 0
		}
		qp.attr = a
		qp.pmtu = 0
		qp.commEst = false
	case QPStateRTR:
		if qp.pmtu == 0 {
			qp.pmtu = qp.dev.mtu.Bytes()
		}
	case QPStateRTS:
		if prev == QPStateRTR {
			qp.comp.retryLeft, qp.comp.rnrLeft = int(qp.attr.RetryCnt), int(qp.attr.RNRRetry)
		}
		if qp.typ == QPTypeUD && qp.pmtu == 0 {
			qp.pmtu = qp.dev.mtu.Bytes()
		}
		qp.reqProgress()
	case QPStateErr:
		qp.flushAll()
	}
}

// PostSend posts send WRs (ibv_post_send). It returns how many were posted;
// if fewer than len(wrs), err says why wrs[n] was refused (bad_wr).
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	if qp.dev.closed.Load() {
		return 0, ErrClosed
	}
	qp.mu.Lock()
	// Doorbell batching: an RC QP with packets in flight is ACK-clocked —
	// the answer to them ends a received batch, and the receive loop then
	// sends everything queued — so what this post adds waits for it (or
	// for the retransmit timer) instead of costing a system call of its
	// own. Back-to-back posts of small messages leave together.
	clocked := qp.typ == QPTypeRC && qp.state == QPStateRTS && !qp.comp.rnrWait &&
		wire.PSNDiff(qp.req.sentPSN, qp.compPSN()) > 0
	qp.inPost = true
	defer qp.postUnlock(clocked)
	st := qp.state
	if st != QPStateRTS && st != QPStateSQD && st != QPStateSQE && st != QPStateErr {
		return 0, errPostSendState
	}
	n := len(wrs)
	var err error
	for i := range wrs {
		if err = qp.postOne(&wrs[i]); err != nil {
			n = i
			break
		}
	}
	if qp.state == QPStateErr {
		qp.flushAll() // posting to an ERR QP completes with WR_FLUSH_ERR (IBA 10.8.3)
	} else if qp.state == QPStateRTS {
		qp.reqProgress()
	}
	return n, err
}

func (qp *QP) postOne(wr *SendWR) error {
	if int(qp.sqTail-qp.sqHead) >= len(qp.sq) {
		return errSQFull
	}
	kind, ok := qp.kindOf(wr.Opcode)
	if !ok {
		return errBadOpcode
	}
	if len(wr.SGList) > int(qp.cap.MaxSendSGE) {
		return errTooManySGE
	}
	if wr.Opcode == WRBindMW {
		if err := qp.checkBindWR(wr); err != nil {
			return err
		}
	}
	w := &qp.sq[qp.sqTail%uint32(len(qp.sq))]
	inl := w.inline[:0]
	*w = sendWQE{wr: *wr, kind: kind}
	w.wr.SGList = nil
	w.wr.Inline = nil
	if kind != kindLocal || wr.Opcode != WRBindMW {
		w.wr.MW, w.wr.BindInfo = nil, MWBindInfo{} // keep no references the WR does not use
	}
	n := copy(w.sge[:], wr.SGList)
	var length uint64
	for _, s := range wr.SGList {
		length += uint64(s.Length)
	}
	if wr.Flags&SendInline != 0 && (kind == kindSend || kind == kindWrite) {
		if wr.Inline != nil {
			length = uint64(len(wr.Inline))
		}
		if length > MaxInline {
			return errInlineTooBig
		}
		if cap(inl) < MaxInline {
			inl = make([]byte, 0, MaxInline)
		}
		inl = inl[:length]
		if wr.Inline != nil {
			copy(inl, wr.Inline)
		} else if !qp.dev.gather(qp.pd, wr.SGList, 0, inl) {
			return errBadLKey
		}
		w.inline = inl
		n = 0
	} else {
		w.inline = inl[:0]
		if !qp.dev.cfg.LateSGECheck && !qp.dev.checkSGEs(qp.pd, wr.SGList, 0) {
			return errBadLKey
		}
	}
	w.wr.SGList = w.sge[:n]
	if length > maxMsgSize {
		return errMsgTooBig
	}
	switch kind {
	case kindAtomic:
		if length != 8 || n != 1 {
			return errAtomicLen
		}
		if wr.RemoteAddr&7 != 0 {
			return errAtomicAlign
		}
	case kindAtomicWrite:
		if wr.RemoteAddr&7 != 0 {
			return errAtomicAlign
		}
		length = 8
	case kindFlush:
		length = uint64(wr.FlushLen)
	case kindLocal:
		length = 0
	}
	if qp.typ == QPTypeUD {
		if wr.AH == nil || wr.AH.pd == nil {
			return errNoAH
		}
		w.dst = wr.AH.dst
		w.tos, w.ttl = wr.AH.attr.GRH.TrafficClass, 0 // the route's hop limit, as the kernel (see grh)
		w.wr.AH = nil
	}
	w.length = uint32(length)
	w.signaled = qp.sigAll || wr.Flags&SendSignaled != 0
	qp.sqTail++
	return nil
}

func (qp *QP) kindOf(op WROpcode) (wqeKind, bool) {
	switch op {
	case WRSend, WRSendWithImm:
		return kindSend, true
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return kindWrite, qp.typ != QPTypeUD
	case WRSendWithInv:
		return kindSend, qp.typ == QPTypeRC
	case WRRDMARead:
		return kindRead, qp.typ == QPTypeRC
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		return kindAtomic, qp.typ == QPTypeRC
	case WRFlush:
		return kindFlush, qp.typ == QPTypeRC
	case WRAtomicWrite:
		return kindAtomicWrite, qp.typ == QPTypeRC
	case WRLocalInv, WRBindMW:
		return kindLocal, qp.typ != QPTypeUD
	}
	return 0, false
}

// PostRecv posts receive WRs (ibv_post_recv); it returns how many were
// posted and, if fewer than len(wrs), why wrs[n] was refused.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	if qp.dev.closed.Load() {
		return 0, ErrClosed
	}
	qp.mu.Lock()
	defer qp.flushUnlock()
	if qp.srq != nil {
		return 0, errRecvOnSRQ
	}
	if qp.state == QPStateReset {
		return 0, errPostRecvState
	}
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGList) > int(qp.cap.MaxRecvSGE) {
			return i, errTooManyRecvSGE
		}
		if !qp.dev.cfg.LateSGECheck && !qp.dev.checkSGEs(qp.pd, wr.SGList, AccessLocalWrite) {
			return i, errBadLKey
		}
		if qp.rq.full() {
			return i, errRQFull
		}
		qp.rq.push(wr)
	}
	if qp.state == QPStateErr {
		qp.flushRecv()
	}
	return len(wrs), nil
}

// Destroy destroys the QP (ibv_destroy_qp); outstanding work is discarded.
func (qp *QP) Destroy() error {
	qp.mu.Lock()
	if qp.dead {
		qp.mu.Unlock()
		return newErr("destroy qp", "already destroyed", syscall.EINVAL)
	}
	// A deferred ACK for what the QP received still leaves: the peer's
	// requester waits for it (rxe has sent it by the time a CQE shows).
	qp.emitAck()
	qp.dead = true
	qp.state = QPStateReset
	qp.budgetFreed()
	qp.stopTimers()
	qp.flushUnlock()
	qp.dev.removeQP(qp)
	for _, cq := range [...]*CQ{qp.sendCQ, qp.recvCQ} {
		cq.mu.Lock()
		cq.users--
		cq.mu.Unlock()
	}
	if qp.srq != nil {
		qp.srq.mu.Lock()
		qp.srq.users--
		qp.srq.mu.Unlock()
	}
	qp.pd.unref()
	return nil
}

func (qp *QP) stopTimers() {
	qp.stopTimer()
	qp.comp.rnrTimer.Stop()
	qp.comp.probeArmed, qp.comp.probes, qp.comp.nakPending, qp.comp.probeAnswer, qp.comp.rttOn = false, 0, false, false, false
	qp.comp.retryArmed = false
	qp.comp.rnrWait = false
	qp.comp.firstWait = false
}

// toError moves the QP to ERR (docs/protocol.md §5.9: erroring WQE already has its status;
// everything else is flushed).
func (qp *QP) toError() {
	if qp.state == QPStateErr || qp.state == QPStateReset {
		return
	}
	if l := qp.dev.log; l != nil {
		st := WCSuccess
		if qp.sqHead != qp.sqTail {
			st = qp.sq[qp.sqHead%uint32(len(qp.sq))].status
		}
		l.Debug("QP to ERR", "qpn", qp.qpn, "from", qp.state.String(), "head status", st.String())
	}
	qp.enter(QPStateErr)
}

// flushAll completes every outstanding send WQE (with its own status if it
// failed, else WR_FLUSH_ERR) and every posted receive with WR_FLUSH_ERR.
func (qp *QP) flushAll() {
	qp.stopTimers()
	for qp.sqHead != qp.sqTail {
		w := qp.sqHeadWQE()
		if !w.done {
			w.done, w.status = true, WCWRFlushErr
		}
		qp.completeHead()
	}
	qp.req.idx, qp.req.pkt, qp.req.rdOut = qp.sqTail, 0, 0
	qp.flushRecv()
}

// flushRecv completes posted receive WQEs with WR_FLUSH_ERR (SRQ WQEs are not flushed).
func (qp *QP) flushRecv() {
	if qp.resp.haveWQE && !qp.resp.wqeSRQ {
		qp.pushRecvWC(&qp.resp.wqe, WCWRFlushErr, WCRecv, 0, 0, 0, false)
	}
	qp.resp.haveWQE = false
	var w recvWQE
	for qp.rq.pop(&w) {
		wc := WC{WRID: w.wrid, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qp.qpn}
		qp.recvCQ.push(&wc, false, false)
	}
}

// completeHead retires the head WQE, generating its completion if signaled
// or failed (error WCs are generated even for unsignaled WRs, docs/protocol.md §5.8).
func (qp *QP) completeHead() {
	w := qp.sqHeadWQE()
	if w.signaled || w.status != WCSuccess {
		wc := WC{WRID: w.wr.WRID, Status: w.status, Opcode: wcOpcode(w.wr.Opcode), QPNum: qp.qpn}
		if w.status == WCSuccess {
			switch w.kind {
			case kindRead:
				wc.ByteLen = w.length
			case kindAtomic:
				wc.ByteLen = 8
			}
		}
		if !qp.sendCQ.push(&wc, false, qp.rxBatched) && qp.state != QPStateErr {
			qp.sqHead++
			if qp.req.idx < qp.sqHead {
				qp.req.idx, qp.req.pkt = qp.sqHead, 0
			}
			qp.dev.event(AsyncEvent{Type: EventQPFatal, QP: qp})
			qp.toError()
			return
		}
	}
	if w.kind.rdLike() && w.started {
		qp.req.rdOut--
	}
	qp.sqHead++
	if qp.req.idx < qp.sqHead {
		qp.req.idx, qp.req.pkt = qp.sqHead, 0
	}
}

func wcOpcode(op WROpcode) WCOpcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	case WRFlush:
		return WCFlush
	case WRAtomicWrite:
		return WCAtomicWrite
	}
	return WCSend
}
