package cm

import (
	"math/rand/v2"
	"net/netip"
	"syscall"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/verbs"
	"github.com/softroce/softroce/wire"
)

// Everything in this file runs with a.mu held.

// post delivers an event for id unless the application destroyed it.
func (id *ID) post(ev *Event) {
	if id.destroyed || id.ch == nil {
		return
	}
	ev.ID = id
	id.ch.post(ev)
}

func (id *ID) stopTimer() {
	id.xchg.tgen++
	if id.xchg.timer != nil {
		id.xchg.timer.Stop()
	}
}

// arm (re)starts the ID's single timer.
func (id *ID) arm(d time.Duration) {
	a := id.agent
	id.xchg.tgen++
	gen := id.xchg.tgen
	f := func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if id.xchg.tgen != gen || a.closed.Load() {
			return
		}
		a.onTimer(id)
	}
	if id.xchg.timer != nil {
		id.xchg.timer.Stop()
	}
	id.xchg.timer = a.clock.AfterFunc(d, f)
}

// startExchange sends b and arms its retransmission.
func (id *ID) startExchange(b []byte) {
	id.xchg.resend = b
	id.xchg.retries = 0
	id.xchg.mraWait = false
	id.agent.sendTC(id.peer, id.path.tos, b)
	id.arm(id.timeout())
}

// timeout is how long the ID waits for an answer before resending:
// Config.Timeout, or for a passive ID of an agent with Linux's default
// timing, what ib_cm waits for the RTU after its REP: the REQ's local CM
// response timeout (as cm_convert_to_ms: 4096 ms for rdma_cm's 20) plus
// 256 ms (kernel rxe resends an unanswered REP every 4.35 s).
func (id *ID) timeout() time.Duration {
	if id.passive.peerRTO > 0 {
		return id.passive.peerRTO
	}
	return id.agent.cfg.Timeout
}

// maxRetries is Config.MaxRetries, and no more than the peer's REQ asked
// for on a passive ID (ib_cm resends its REP max_cm_retries times), or
// than shortREPRetries for a REP sent under pressure.
func (id *ID) maxRetries() int {
	if id.passive.peerRetries > 0 { // the REQ's max CM retries + 1
		n := min(id.agent.cfg.MaxRetries, id.passive.peerRetries-1)
		if id.passive.shortREP && id.st == stRepSent {
			n = min(n, shortREPRetries)
		}
		return n
	}
	return id.agent.cfg.MaxRetries
}

// shortREPRetries is how many times a REP sent under pressure is resent
// (ID.SetHalfOpen): once, so that a real peer whose REP or RTU was lost
// still connects, while a spoofed request costs two REPs instead of up to
// sixteen.
const shortREPRetries = 1

// addHalfOpen enters id, whose REP just went out, in its listener's
// half-open connections on this agent. Over the listener's bound, the
// oldest are dropped (evictHalfOpen), and returned; from half of it on,
// id's REP is resent once at most.
func (a *Agent) addHalfOpen(id *ID) []*ID {
	l := id.passive.listener
	if l == nil || id.qpType != verbs.QPTypeRC {
		return nil
	}
	q := a.halfOpen[l]
	delete(a.halfOpen, l) // evictHalfOpen's forget must not see q
	live := q[:0]
	for _, x := range q {
		if x.st == stRepSent && x != id {
			live = append(live, x)
		}
	}
	clear(q[len(live):]) // no stale pointers in the array's tail
	bound := l.halfOpenMax()
	if len(live) > 0 && 2*len(live) >= bound {
		id.passive.shortREP = true
		a.stats.HalfOpenShortREPs.Add(1)
	}
	now := a.clock.Now()
	id.passive.repAt = now
	live = append(live, id)
	var evict []*ID
	n := len(live) - bound
	if n > 0 && !l.halfOpenSet() {
		// The default bound drops only connections half-open for
		// halfOpenGrace at least, oldest first.
		k := 0
		for k < n && now.Sub(live[k].passive.repAt) >= halfOpenGrace {
			k++
		}
		n = k
	}
	if n > 0 {
		evict = append(evict, live[:n]...)
		live = append(live[:0], live[n:]...)
		clear(live[len(live):cap(live)][:n])
	}
	a.halfOpen[l] = live
	for _, x := range evict {
		a.evictHalfOpen(x)
	}
	return evict
}

// evictHalfOpen drops a half-open connection to make room for a newer one,
// as if its REP's resends had run out: REJ (Timeout), QP to ERR, the ID
// forgotten at once (no time-wait: a late RTU or REQ retransmission is
// then unexpected, or a new request), UNREACHABLE for the application.
func (a *Agent) evictHalfOpen(id *ID) {
	a.stats.HalfOpenEvicted.Add(1)
	id.sendREJ(mad.MsgOther, mad.RejTimeout, nil)
	id.qpErr()
	id.forget()
	id.st = stIdle
	id.post(&Event{Type: EventUnreachable, Status: -int(syscall.ETIMEDOUT)})
}

// dropHalfOpen removes id from its listener's half-open connections.
func (a *Agent) dropHalfOpen(id *ID) {
	l := id.passive.listener
	if l == nil {
		return
	}
	q := a.halfOpen[l]
	for i, x := range q {
		if x == id {
			q = append(q[:i], q[i+1:]...)
			q[len(q):cap(q)][0] = nil
			if len(q) == 0 {
				delete(a.halfOpen, l)
			} else {
				a.halfOpen[l] = q
			}
			return
		}
	}
}

// ibCMms is ib_cm's cm_convert_to_ms: 4.096 µs × 2^t, approximated as
// 2^(t-8) ms.
func ibCMms(t uint8) time.Duration {
	return time.Duration(1<<max(int(t)-8, 0)) * time.Millisecond
}

// forget removes the ID from the agent's tables and stops its timer.
func (id *ID) forget() {
	a := id.agent
	id.stopTimer()
	if a.byLocal[id.localComm] == id {
		delete(a.byLocal, id.localComm)
	}
	for _, sidr := range [2]bool{false, true} {
		k := remoteKey{id.peer, id.remoteComm, sidr}
		if a.byRemote[k] == id {
			delete(a.byRemote, k)
		}
	}
	a.dropHalfOpen(id)
	id.xchg.resend, id.xchg.answer = nil, nil
}

// enterTimeWait keeps the ID for Config.TimeWait, answering duplicates with
// answer, then forgets it (TIMEWAIT_EXIT).
func (id *ID) enterTimeWait(answer []byte) {
	id.st = stTimeWait
	id.xchg.answer = answer
	id.xchg.resend = nil
	id.arm(id.agent.cfg.TimeWait)
}

func (id *ID) sendREJ(kind mad.MsgKind, reason mad.RejectReason, pdata []byte) []byte {
	m := mad.REJ{Header: mad.NewHeader(id.xchg.tid), LocalCommID: id.localComm, RemoteCommID: id.remoteComm,
		MessageRejected: kind, Reason: reason, PrivateData: pdata}
	b, _ := m.Append(nil)
	id.agent.stats.RejectsSent.Add(1)
	id.agent.sendTC(id.peer, id.path.tos, b)
	return b
}

func (id *ID) sendRTU() {
	m := mad.RTU{Header: mad.NewHeader(id.xchg.tid), LocalCommID: id.localComm, RemoteCommID: id.remoteComm}
	b, _ := m.Append(nil)
	id.xchg.answer = b
	id.agent.sendTC(id.peer, id.path.tos, b)
}

func (id *ID) sendDREQ() {
	a := id.agent
	m := mad.DREQ{Header: mad.NewHeader(a.newTID(id.localComm)), LocalCommID: id.localComm,
		RemoteCommID: id.remoteComm, RemoteQPN: id.path.peerQPN}
	b, _ := m.Append(nil)
	id.st = stDREQSent
	id.startExchange(b)
}

// rejectStateless answers a MAD that matches no ID with a REJ.
func (a *Agent) rejectStateless(peer netip.Addr, tid uint64, remoteComm uint32, kind mad.MsgKind, reason mad.RejectReason) {
	m := mad.REJ{Header: mad.NewHeader(tid), RemoteCommID: remoteComm, MessageRejected: kind, Reason: reason}
	b, _ := m.Append(nil)
	a.stats.RejectsSent.Add(1)
	a.send(peer, b)
}

func (a *Agent) onTimer(id *ID) {
	switch id.st {
	case stReqSent, stRepSent, stDREQSent, stSIDRReqSent:
		if id.xchg.mraWait {
			id.xchg.mraWait = false
		} else if id.xchg.retries >= id.maxRetries() {
			a.timeout(id)
			return
		} else {
			id.xchg.retries++
		}
		a.stats.Retransmits.Add(1)
		a.sendTC(id.peer, id.path.tos, id.xchg.resend)
		id.arm(id.timeout())
	case stReqRcvd:
		// The application is slow: ask the peer to wait.
		m := mad.MRA{Header: mad.NewHeader(id.xchg.tid), LocalCommID: id.localComm, RemoteCommID: id.remoteComm,
			MessageMRAed: mad.MsgREQ, ServiceTimeout: a.cfg.ServiceTimeout}
		b, _ := m.Append(nil)
		id.st = stMRAReqSent
		id.xchg.answer = b
		a.stats.MRAsSent.Add(1)
		a.sendTC(id.peer, id.path.tos, b)
	case stTimeWait:
		id.forget()
		id.st = stIdle
		if id.destroyed {
			id.st = stDestroyed
		}
		if id.wasUp {
			id.post(&Event{Type: EventTimewaitExit}) // only connections that were up report it
		}
	}
}

// timeout ends an exchange whose MAD was never answered.
func (a *Agent) timeout(id *ID) {
	a.stats.Timeouts.Add(1)
	switch id.st {
	case stReqSent:
		id.sendREJ(mad.MsgOther, mad.RejTimeout, nil)
		id.forget()
		id.st = stIdle
		id.post(&Event{Type: EventUnreachable, Status: -int(syscall.ETIMEDOUT)})
	case stRepSent:
		id.sendREJ(mad.MsgOther, mad.RejTimeout, nil)
		id.qpErr()
		id.forget()
		id.st = stIdle
		id.post(&Event{Type: EventUnreachable, Status: -int(syscall.ETIMEDOUT)})
	case stSIDRReqSent:
		id.forget()
		id.st = stIdle
		id.post(&Event{Type: EventUnreachable, Status: -int(syscall.ETIMEDOUT)})
	case stDREQSent:
		id.enterTimeWait(nil)
		id.post(&Event{Type: EventDisconnected})
	}
}

// input processes one received MAD from peer (the GSI QP's receive path;
// tests and the fuzzer call it directly). Malformed and unexpected MADs are
// counted and dropped.
func (a *Agent) input(peer netip.Addr, b []byte) {
	a.stats.MADsReceived.Add(1)
	h, err := mad.ParseHeader(b)
	if err != nil || !peer.IsValid() {
		a.stats.DropMalformed.Add(1)
		return
	}
	if a.log != nil {
		a.log.Debug("cm recv", "dev", a.dev.Name(), "from", peer, "mad", h.AttrID, "tid", h.TID)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		a.stats.DropUnexpected.Add(1)
		return
	}
	switch h.AttrID {
	case mad.AttrREQ:
		handle(a, peer, b, a.onREQ)
	case mad.AttrMRA:
		handle(a, peer, b, a.onMRA)
	case mad.AttrREJ:
		handle(a, peer, b, a.onREJ)
	case mad.AttrREP:
		handle(a, peer, b, a.onREP)
	case mad.AttrRTU:
		handle(a, peer, b, a.onRTU)
	case mad.AttrDREQ:
		handle(a, peer, b, a.onDREQ)
	case mad.AttrDREP:
		handle(a, peer, b, a.onDREP)
	case mad.AttrSIDRREQ:
		handle(a, peer, b, a.onSIDRREQ)
	case mad.AttrSIDRREP:
		handle(a, peer, b, a.onSIDRREP)
	default:
		a.stats.DropUnknown.Add(1)
	}
}

// handle parses one CM message of type M and passes it to on; a message
// that does not parse is dropped and counted as malformed.
func handle[M any, PM interface {
	*M
	Parse([]byte) error
}](a *Agent, peer netip.Addr, b []byte, on func(netip.Addr, *M)) {
	var m M
	if PM(&m).Parse(b) != nil {
		a.stats.DropMalformed.Add(1)
		return
	}
	on(peer, &m)
}

// lookup returns the ID a reply addressed to local comm ID comm from peer
// belongs to.
func (a *Agent) lookup(peer netip.Addr, comm uint32) *ID {
	id := a.byLocal[comm]
	if id == nil || id.peer != peer {
		return nil
	}
	return id
}

func (a *Agent) unexpected() { a.stats.DropUnexpected.Add(1) }

// handled counts a MAD that was acted on: an ID's state changed, an event
// was posted, or it was answered as the protocol says (a REJ or SIDR_REP
// for a service nobody listens on).
func (a *Agent) handled() { a.stats.Handled.Add(1) }

func (a *Agent) onREQ(peer netip.Addr, m *mad.REQ) {
	key := remoteKey{peer, m.LocalCommID, false}
	if id := a.byRemote[key]; id != nil {
		a.stats.Duplicates.Add(1)
		switch id.st {
		case stMRAReqSent, stRepSent, stTimeWait:
			if id.xchg.answer != nil {
				a.sendTC(peer, id.path.tos, id.xchg.answer) // the same MRA, REP or REJ again
			}
		}
		return
	}
	ps, port, ok := mad.ParseServiceID(m.ServiceID)
	if !ok || m.TransportType != mad.TransportRC {
		a.handled()
		a.rejectStateless(peer, m.TID, m.LocalCommID, mad.MsgREQ, mad.RejInvalidServiceID)
		return
	}
	hdr, user, err := mad.ParseCMAHeader(m.PrivateData)
	if err != nil {
		a.stats.DropMalformed.Add(1)
		a.rejectStateless(peer, m.TID, m.LocalCommID, mad.MsgREQ, mad.RejInvalidServiceID)
		return
	}
	l := findListener(a, ps, port, hdr.Dst)
	if l == nil || l.qpType != verbs.QPTypeRC {
		a.handled()
		a.rejectStateless(peer, m.TID, m.LocalCommID, mad.MsgREQ, mad.RejInvalidServiceID)
		return
	}
	if l.listen.pending.Load() >= l.listen.backlog.Load() {
		a.stats.DropBacklog.Add(1) // the peer retransmits
		return
	}
	l.listen.pending.Add(1)
	id := &ID{Context: l.Context, ps: ps, qpType: verbs.QPTypeRC, agent: a, ch: l.ch,
		passive: passiveState{listener: l},
		local:   netip.AddrPortFrom(hdr.Dst.Unmap(), port), remote: netip.AddrPortFrom(hdr.Src.Unmap(), hdr.SrcPort),
		st: stReqRcvd, peer: peer, xchg: madExchange{tid: m.TID}, remoteComm: m.LocalCommID, serviceID: m.ServiceID,
		path: pathParams{
			peerQPN: m.LocalQPN, peerPSN: m.StartingPSN, mtu: min(m.PathMTU, a.mtu), flowLabel: m.Primary.FlowLabel,
			ackTO: m.Primary.LocalACKTimeout, retry: m.RetryCount, rnr: m.RNRRetryCount,
			respRes: clampRd(m.InitiatorDepth), initDep: clampRd(m.ResponderResources),
			peerGID: m.Primary.LocalGID, minRNR: l.path.minRNR, tos: m.Primary.TrafficClass,
		}}
	id.passive.counted.Store(true)
	if !id.path.mtu.Valid() {
		id.path.mtu = a.mtu
	}
	if id.path.ackTO == 0 {
		id.path.ackTO = defaultACKTimeout
	}
	if verbs.GID(m.Primary.LocalGID).Addr() != peer {
		id.path.peerGID = verbs.GIDFromAddr(peer)
	}
	id.localComm = a.newCommID()
	id.path.myPSN = rand.Uint32() & wire.PSNMask
	id.passive.peerRetries = int(m.MaxCMRetries) + 1
	if a.defaultTiming {
		id.passive.peerRTO = ibCMms(m.LocalCMResponseTimeout) + 256*time.Millisecond
	}
	a.byLocal[id.localComm] = id
	a.byRemote[key] = id
	a.handled()
	id.post(&Event{Type: EventConnectRequest, Listen: l, Param: ConnParam{
		PrivateData: append([]byte(nil), user...), ResponderResources: id.path.respRes, InitiatorDepth: id.path.initDep,
		FlowControl: m.EndToEndFlowControl, RetryCount: m.RetryCount, RNRRetryCount: m.RNRRetryCount,
		SRQ: m.SRQ, QPNum: m.LocalQPN, ECE: ECE{VendorID: m.VendorID, Options: m.AttrMod}}})
	id.arm(a.cfg.MRADelay)
}

func (a *Agent) onMRA(peer netip.Addr, m *mad.MRA) {
	id := a.lookup(peer, m.RemoteCommID)
	if id == nil {
		a.unexpected()
		return
	}
	switch {
	case id.st == stReqSent && m.MessageMRAed == mad.MsgREQ, id.st == stRepSent && m.MessageMRAed == mad.MsgREP:
		if id.st == stReqSent && id.remoteComm == 0 {
			id.remoteComm = m.LocalCommID
		}
		id.xchg.mraWait = true
		id.arm(expDuration(m.ServiceTimeout) + id.timeout())
		a.handled()
	default:
		a.unexpected()
	}
}

func (a *Agent) onREJ(peer netip.Addr, m *mad.REJ) {
	id := a.lookup(peer, m.RemoteCommID)
	if id == nil {
		// A REJ of our REQ may carry no comm ID of ours if the peer
		// rejected statelessly; match it by transaction ID.
		for _, x := range a.byLocal {
			if x.peer == peer && x.xchg.tid == m.TID && x.st == stReqSent {
				id = x
				break
			}
		}
	}
	if id == nil {
		a.unexpected()
		return
	}
	ev := &Event{Type: EventRejected, Status: int(m.Reason), Reason: m.Reason,
		Param: ConnParam{PrivateData: append([]byte(nil), m.PrivateData...)}}
	switch id.st {
	case stReqSent, stRepRcvd, stRepSent, stMRAReqSent, stReqRcvd:
		if id.st == stReqRcvd || id.st == stMRAReqSent {
			id.uncount()
			ev = &Event{Type: EventConnectError, Status: -int(syscall.ECONNRESET)} // the peer gave up
		}
		id.qpErr()
		id.forget()
		id.st = stIdle
		a.handled()
		id.post(ev)
	case stEstablished:
		if m.Reason == mad.RejStaleConn || m.Reason == mad.RejTimeout {
			id.qpErr()
			id.enterTimeWait(nil)
			a.handled()
			id.post(&Event{Type: EventDisconnected})
			return
		}
		a.unexpected()
	default:
		a.unexpected()
	}
}

func (a *Agent) onREP(peer netip.Addr, m *mad.REP) {
	id := a.lookup(peer, m.RemoteCommID)
	if id == nil {
		a.unexpected()
		return
	}
	switch id.st {
	case stReqSent:
	case stEstablished, stRepRcvd, stDREQSent, stTimeWait:
		a.stats.Duplicates.Add(1)
		if id.xchg.answer != nil && (id.st == stEstablished || id.remoteComm == m.LocalCommID) {
			a.sendTC(peer, id.path.tos, id.xchg.answer) // the RTU again
		}
		return
	default:
		a.unexpected()
		return
	}
	id.stopTimer()
	id.remoteComm = m.LocalCommID
	a.byRemote[remoteKey{peer, id.remoteComm, false}] = id
	id.path.peerQPN = m.LocalQPN
	id.path.peerPSN = m.StartingPSN
	id.path.respRes, id.path.initDep = clampRd(m.InitiatorDepth), clampRd(m.ResponderResources)
	id.path.rnr = m.RNRRetryCount
	param := ConnParam{PrivateData: append([]byte(nil), m.PrivateData...), ResponderResources: id.path.respRes,
		InitiatorDepth: id.path.initDep, FlowControl: m.EndToEndFlowControl, RNRRetryCount: m.RNRRetryCount,
		SRQ: m.SRQ, QPNum: m.LocalQPN, ECE: ECE{VendorID: m.VendorID, Options: m.AttrMod}}
	if id.qp == nil {
		id.st = stRepRcvd
		id.xchg.answer = nil
		a.handled()
		id.post(&Event{Type: EventConnectResponse, Param: param})
		return
	}
	err := id.qpRTR()
	if err == nil {
		err = id.qpRTS()
	}
	if err != nil {
		if a.log != nil {
			a.log.Debug("cm: QP to RTS failed", "err", err)
		}
		b := id.sendREJ(mad.MsgREP, mad.RejNoQP, nil)
		id.qpErr()
		id.enterTimeWait(b)
		a.handled()
		id.post(&Event{Type: EventConnectError, Status: -int(syscall.EINVAL)})
		return
	}
	id.sendRTU()
	id.st = stEstablished
	id.wasUp = true
	a.handled()
	id.post(&Event{Type: EventEstablished, Param: param})
}

func (a *Agent) onRTU(peer netip.Addr, m *mad.RTU) {
	id := a.lookup(peer, m.RemoteCommID)
	if id == nil || id.remoteComm != m.LocalCommID {
		a.unexpected()
		return
	}
	if id.st != stRepSent {
		a.stats.Duplicates.Add(1)
		return
	}
	id.stopTimer()
	id.st = stEstablished
	id.wasUp = true
	id.xchg.resend = nil
	a.handled()
	id.post(&Event{Type: EventEstablished, Param: ConnParam{PrivateData: append([]byte(nil), m.PrivateData...),
		ResponderResources: id.path.respRes, InitiatorDepth: id.path.initDep, QPNum: id.path.peerQPN}})
}

func (a *Agent) onDREQ(peer netip.Addr, m *mad.DREQ) {
	id := a.lookup(peer, m.RemoteCommID)
	drep := func(id *ID) []byte {
		r := mad.DREP{Header: mad.NewHeader(m.TID), LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID}
		b, _ := r.Append(nil)
		var tc uint8
		if id != nil {
			tc = id.path.tos
		}
		a.sendTC(peer, tc, b)
		return b
	}
	if id == nil || id.remoteComm != m.LocalCommID {
		// Unknown connection: answer anyway so the peer stops (cm_issue_drep).
		a.unexpected()
		drep(nil)
		return
	}
	switch id.st {
	case stEstablished, stRepSent, stRepRcvd, stDREQSent:
		id.qpErr()
		b := drep(id)
		id.enterTimeWait(b)
		a.handled()
		id.post(&Event{Type: EventDisconnected})
	case stTimeWait:
		a.stats.Duplicates.Add(1)
		if id.xchg.answer != nil {
			a.sendTC(peer, id.path.tos, id.xchg.answer)
		} else {
			drep(id)
		}
	default:
		a.unexpected()
	}
}

func (a *Agent) onDREP(peer netip.Addr, m *mad.DREP) {
	id := a.lookup(peer, m.RemoteCommID)
	if id == nil || id.remoteComm != m.LocalCommID {
		a.unexpected()
		return
	}
	if id.st != stDREQSent {
		a.stats.Duplicates.Add(1)
		return
	}
	id.enterTimeWait(nil)
	a.handled()
	id.post(&Event{Type: EventDisconnected})
}

func (a *Agent) onSIDRREQ(peer netip.Addr, m *mad.SIDRREQ) {
	key := remoteKey{peer, m.RequestID, true}
	if id := a.byRemote[key]; id != nil {
		a.stats.Duplicates.Add(1)
		if id.xchg.answer != nil {
			a.sendTC(peer, id.path.tos, id.xchg.answer)
		}
		return
	}
	reply := func(st mad.SIDRStatus) {
		r := mad.SIDRREP{Header: mad.NewHeader(m.TID), RequestID: m.RequestID, Status: st, ServiceID: m.ServiceID}
		b, _ := r.Append(nil)
		a.send(peer, b)
	}
	ps, port, ok := mad.ParseServiceID(m.ServiceID)
	if !ok {
		a.handled()
		reply(mad.SIDRUnsupported)
		return
	}
	hdr, user, err := mad.ParseCMAHeader(m.PrivateData)
	if err != nil {
		a.stats.DropMalformed.Add(1)
		reply(mad.SIDRUnsupported)
		return
	}
	l := findListener(a, ps, port, hdr.Dst)
	if l == nil || l.qpType != verbs.QPTypeUD {
		a.handled()
		reply(mad.SIDRUnsupported)
		return
	}
	if l.listen.pending.Load() >= l.listen.backlog.Load() {
		a.stats.DropBacklog.Add(1)
		return
	}
	l.listen.pending.Add(1)
	id := &ID{Context: l.Context, ps: ps, qpType: verbs.QPTypeUD, agent: a, ch: l.ch,
		passive: passiveState{listener: l},
		local:   netip.AddrPortFrom(hdr.Dst.Unmap(), port), remote: netip.AddrPortFrom(hdr.Src.Unmap(), hdr.SrcPort),
		st: stSIDRReqRcvd, peer: peer, xchg: madExchange{tid: m.TID}, remoteComm: m.RequestID, serviceID: m.ServiceID,
		path: pathParams{peerGID: verbs.GIDFromAddr(peer)}}
	id.passive.counted.Store(true)
	id.localComm = a.newCommID()
	a.byLocal[id.localComm] = id
	a.byRemote[key] = id
	a.handled()
	id.post(&Event{Type: EventConnectRequest, Listen: l, Param: ConnParam{PrivateData: append([]byte(nil), user...)}})
}

func (a *Agent) onSIDRREP(peer netip.Addr, m *mad.SIDRREP) {
	id := a.lookup(peer, m.RequestID)
	if id == nil || id.st != stSIDRReqSent {
		if id != nil {
			a.stats.Duplicates.Add(1)
		} else {
			a.unexpected()
		}
		return
	}
	id.forget()
	id.st = stIdle
	pdata := append([]byte(nil), m.PrivateData...)
	if m.Status != mad.SIDRSuccess {
		// rdma_cm reports a failed SIDR as UNREACHABLE with the SIDR status.
		a.handled()
		id.post(&Event{Type: EventUnreachable, Status: int(m.Status), Param: ConnParam{PrivateData: pdata}})
		return
	}
	id.path.peerQPN = m.QPN
	a.handled()
	id.post(&Event{Type: EventEstablished, Param: ConnParam{PrivateData: pdata, QPNum: m.QPN},
		UD: &UDParam{QPNum: m.QPN, QKey: m.QKey, PrivateData: pdata, AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1,
			GRH: verbs.GlobalRoute{DGID: id.path.peerGID, SGIDIndex: a.sgid, HopLimit: defaultHopLimit}}}})
}
