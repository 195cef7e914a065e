package cm

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/verbs"
	"github.com/softroce/softroce/wire"
)

// state is an ID's protocol state (IB CM states merged with rdma_cm's).
type state uint8

const (
	stIdle state = iota
	stAddrResolved
	stRouteResolved
	stListen
	stReqSent     // active: REQ sent, waiting for REP
	stRepRcvd     // active: REP received, no QP: waiting for Establish (CONNECT_RESPONSE)
	stReqRcvd     // passive: CONNECT_REQUEST delivered, application deciding
	stMRAReqSent  // passive: as stReqRcvd, MRA sent
	stRepSent     // passive: REP sent, waiting for RTU
	stEstablished // connected
	stDREQSent    // DREQ sent, waiting for DREP
	stTimeWait    // closed; duplicates still answered
	stSIDRReqSent // active UD: SIDR_REQ sent
	stSIDRReqRcvd // passive UD: CONNECT_REQUEST delivered
	stDestroyed
)

var stateNames = [...]string{"IDLE", "ADDR_RESOLVED", "ROUTE_RESOLVED", "LISTEN", "REQ_SENT", "REP_RCVD",
	"REQ_RCVD", "MRA_REQ_SENT", "REP_SENT", "ESTABLISHED", "DREQ_SENT", "TIMEWAIT", "SIDR_REQ_SENT",
	"SIDR_REQ_RCVD", "DESTROYED"}

// String returns the state's name, as in Linux's CM state names.
func (s state) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "?"
}

// Default connection values, rdma_cm's.
const (
	defaultACKTimeout = 19 // packet lifetime 18 + 1, as in the rxe captures
	defaultHopLimit   = 64
	maxRdAtomic       = 128 // rxe's max_qp_rd_atom
)

// ID is a communication identifier (struct rdma_cm_id): one endpoint of a
// connection, or a listener. Create it with EventChannel.CreateID. An ID's
// methods are safe for concurrent use with the CM's own activity, but an
// application should not call two of them on the same ID at once.
type ID struct {
	// Context is the application's (rdma_cm_id.context).
	Context any

	ps     mad.PortSpace
	qpType verbs.QPType

	// Set by the application's calls (before the protocol runs).
	agent  *Agent
	local  netip.AddrPort
	remote netip.AddrPort
	bound  bool

	listen    listenState  // a listener's backlog and counters
	passive   passiveState // a passive ID's listener and the REQ's timing
	resolving resolveState // Config.Resolve in progress

	// Protocol state, guarded by agent.mu once agent is set.
	ch         *EventChannel
	qp         *verbs.QP
	st         state
	destroyed  bool
	localComm  uint32
	remoteComm uint32
	peer       netip.Addr // GSI peer
	serviceID  uint64
	wasUp      bool // reached ESTABLISHED (TIMEWAIT_EXIT is reported)

	xchg madExchange // the MAD in flight: transaction, resends, timer
	path pathParams  // what the QPs are moved to RTR/RTS with
}

// listenState is a listener's: its backlog and the passive IDs it counts.
type listenState struct {
	backlog  atomic.Int32 // 0: not listening (written under reg.mu; read by the agent without it)
	pending  atomic.Int32 // requests not yet accepted or rejected
	halfOpen atomic.Int32 // bound of its half-open connections (SetHalfOpen; 0: the default)
	// defHalfOpen is the default bound: the backlog, at least DefaultHalfOpen.
	defHalfOpen atomic.Int32
}

// passiveState is a passive ID's: the listener it came from, and the REP's
// resend interval and count from the REQ.
type passiveState struct {
	listener    *ID
	counted     atomic.Bool // counted in listener.listen.pending
	peerRTO     time.Duration
	peerRetries int
	shortREP    bool      // the REP went out under pressure and is resent once at most
	repAt       time.Time // when the REP went out (addHalfOpen), by the agent's clock
}

// resolveState is an address resolution in progress: Config.Resolve runs;
// cancel stops it (Destroy). Both guarded by agent.mu.
type resolveState struct {
	active bool
	cancel context.CancelFunc
}

// madExchange is the ID's MAD exchange in flight: its transaction ID, the
// retransmission timer and what it resends.
type madExchange struct {
	tid     uint64
	timer   clock.Timer
	tgen    uint64
	retries int
	resend  []byte // MAD resent on timeout
	answer  []byte // MAD resent on a duplicate
	mraWait bool
}

// pathParams are the connection's parameters, negotiated in REQ and REP
// or set by the application (SetOption), that the QPs are moved with.
type pathParams struct {
	myPSN, peerPSN   uint32
	peerQPN          uint32
	mtu              wire.MTU
	flowLabel        uint32
	respRes, initDep uint8
	retry, rnr       uint8
	peerGID          verbs.GID
	minRNR           uint8
	ackTO            uint8
	tos              uint8 // the GRH traffic class (SetTOS; passive: the REQ's)
}

// CreateID creates an ID in port space ps (rdma_create_id): mad.PortSpaceTCP
// for RC connections, mad.PortSpaceUDP for UD (SIDR). Its events arrive on c.
func (c *EventChannel) CreateID(ctx any, ps mad.PortSpace) (*ID, error) {
	if c == nil {
		return nil, newErr("create id", "nil event channel", syscall.EINVAL)
	}
	id := &ID{Context: ctx, ps: ps, ch: c, path: pathParams{ackTO: defaultACKTimeout}}
	switch ps {
	case mad.PortSpaceTCP, mad.PortSpaceIB:
		id.qpType = verbs.QPTypeRC
	case mad.PortSpaceUDP, mad.PortSpaceIPoIB:
		id.qpType = verbs.QPTypeUD
	default:
		return nil, newErr("create id", "unknown port space (use mad.PortSpaceTCP or mad.PortSpaceUDP)", syscall.EINVAL)
	}
	return id, nil
}

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() mad.PortSpace { return id.ps }

// QPType returns the QP type of the ID's port space (RC or UD).
func (id *ID) QPType() verbs.QPType { return id.qpType }

// Agent returns the agent (device) the ID is bound to, or nil.
func (id *ID) Agent() *Agent { return id.agent }

// Device returns the ID's device (rdma_cm_id.verbs), or nil before the
// address is resolved.
func (id *ID) Device() *verbs.Device {
	if id.agent == nil {
		return nil
	}
	return id.agent.dev
}

// PD returns the device's default protection domain (rdma_cm_id.pd), or nil.
func (id *ID) PD() *verbs.PD {
	if id.agent == nil {
		return nil
	}
	return id.agent.pd
}

// QP returns the ID's QP (rdma_cm_id.qp), or nil.
func (id *ID) QP() *verbs.QP {
	if a := id.agent; a != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
	}
	return id.qp
}

// LocalAddr returns the bound IP address and port (rdma_get_local_addr).
func (id *ID) LocalAddr() netip.AddrPort { return id.local }

// RemoteAddr returns the peer's IP address and port (rdma_get_peer_addr).
func (id *ID) RemoteAddr() netip.AddrPort { return id.remote }

// Listener returns the listening ID a passive ID came from, or nil.
func (id *ID) Listener() *ID { return id.passive.listener }

// Channel returns the event channel the ID's events go to.
func (id *ID) Channel() *EventChannel {
	if a := id.agent; a != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
	}
	return id.ch
}

// Migrate moves the ID's future events to channel c (rdma_migrate_id).
func (id *ID) Migrate(c *EventChannel) error {
	if c == nil {
		return newErr("migrate id", "nil event channel", syscall.EINVAL)
	}
	if a := id.agent; a != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
	}
	id.ch = c
	return nil
}

// SetACKTimeout sets the local ACK timeout (log2 of 4.096 µs units, 0..31)
// of the ID's RC QP (rdma_set_option RDMA_OPTION_ID_ACK_TIMEOUT); it is
// also announced in the REQ. Default 19. Call it before Connect or Accept.
func (id *ID) SetACKTimeout(t uint8) error {
	if t > 31 {
		return newErr("set option", "ACK timeout is 5 bits (0..31)", syscall.EINVAL)
	}
	id.path.ackTO = t
	return nil
}

// SetTOS sets the type of service of the ID's connection (rdma_set_option
// RDMA_OPTION_ID_TOS): over RoCE the GRH traffic class (DSCP and ECN bits)
// of its RC QP's packets. Connect announces it in the REQ's primary path,
// whose traffic class the passive side's QP takes, as the kernel's rdma_cm
// does. Default 0. Call it before Connect.
func (id *ID) SetTOS(tos uint8) error {
	id.path.tos = tos
	return nil
}

// SetMinRNRTimer sets the minimum RNR NAK timer (IB encoding 0..31) of the
// ID's RC QP (RDMA_OPTION_ID_MIN_RNR_TIMER). Default 0 (655 ms), as rdma_cm.
func (id *ID) SetMinRNRTimer(t uint8) error {
	if t > 31 {
		return newErr("set option", "min RNR timer is 5 bits (0..31)", syscall.EINVAL)
	}
	id.path.minRNR = t
	return nil
}

// State returns the ID's protocol state, for diagnostics ("ESTABLISHED", ...).
func (id *ID) State() string {
	if a := id.agent; a != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
	}
	return id.st.String()
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr). An
// unspecified IP binds to every device (listeners); port 0 picks a free
// port.
func (id *ID) BindAddr(addr netip.AddrPort) error {
	if id.bound {
		return newErr("bind", "ID already bound", syscall.EINVAL)
	}
	ip := addr.Addr().Unmap()
	if !ip.IsValid() {
		ip = netip.IPv4Unspecified()
	}
	if !ip.IsUnspecified() {
		a := agentFor(ip)
		if a == nil {
			return ErrNoDevice
		}
		id.agent = a
	}
	return id.bindPort(netip.AddrPortFrom(ip, addr.Port()))
}

// bindPort binds the ID to addr (port 0: a free one) in its agent's port
// table (portsOf).
func (id *ID) bindPort(addr netip.AddrPort) error {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	ports := portsOf(id.agent)
	conflict := func(port uint16) bool {
		for _, o := range ports[portKey{id.ps, port}] {
			oa, na := o.local.Addr(), addr.Addr()
			if oa == na || oa.IsUnspecified() || na.IsUnspecified() {
				return true
			}
		}
		return false
	}
	port := addr.Port()
	if port == 0 {
		for range 65536 {
			p := uint16(32768 + rand.IntN(28232)) // Linux's ip_local_port_range
			if !conflict(p) {
				port = p
				break
			}
		}
		if port == 0 {
			return newErr("bind", "no free port", syscall.EADDRNOTAVAIL)
		}
	} else if conflict(port) {
		return ErrAddrInUse
	}
	id.local = netip.AddrPortFrom(addr.Addr(), port)
	k := portKey{id.ps, port}
	ports[k] = append(ports[k], id)
	id.bound = true
	return nil
}

func (id *ID) unbind() {
	if !id.bound {
		return
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	ports := portsOf(id.agent)
	k := portKey{id.ps, id.local.Port()}
	l := ports[k]
	for i, o := range l {
		if o == id {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(ports, k)
	} else {
		ports[k] = l
	}
	id.bound = false
}

// findListener returns the listener for a request that agent a received
// for port space ps, port and local address dst (a specific bind wins over
// a wildcard one), among the IDs of a's port table (portsOf).
func findListener(a *Agent, ps mad.PortSpace, port uint16, dst netip.Addr) *ID {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	var wild *ID
	for _, l := range portsOf(a)[portKey{ps, port}] {
		if l.listen.backlog.Load() <= 0 {
			continue
		}
		switch la := l.local.Addr(); {
		case la == dst.Unmap():
			return l
		case la.IsUnspecified() && (la.Is4() == dst.Unmap().Is4() || la.Is6()):
			wild = l // "::" also takes IPv4, as Linux with bindv6only=0
		}
	}
	return wild
}

// DefaultHalfOpen is the least default bound of a listening ID's half-open
// connections (ID.SetHalfOpen): its listen backlog, if larger.
const DefaultHalfOpen = 128

// SetHalfOpen bounds the listening ID's half-open connections, those
// accepted (REP sent) whose RTU has not arrived, on each device: when
// Accept sends one REP more, the oldest half-open connection is dropped (a
// REJ with reason Timeout to its peer, UNREACHABLE with -ETIMEDOUT to the
// application, as when the REP's resends run out), as a TCP SYN cache
// drops its oldest entry: REQs from spoofed addresses, whose RTU never
// comes, cannot keep real peers out, whose RTU arrives at once. While at
// least half of the bound is taken, a new REP is resent once at most
// (Stats.HalfOpenShortREPs) instead of as often as the REQ asks. n <= 0
// means the default: the listen backlog, at least DefaultHalfOpen (128),
// so that a burst of real requests as large as the backlog (cmtime -c
// 1000 against the default 1024) is not cut short by its own REPs; and
// the default bound drops only connections half-open for halfOpenGrace
// at least, so that a larger burst (cmtime -c 2000, whose client sends
// its RTUs tens of ms behind) is not cut short either: a program that
// knows no such bound may not expect UNREACHABLE on an accepted ID (stock
// cmtime's server crashes on it). softroce's own: rdma_cm has no bound.
func (id *ID) SetHalfOpen(n int) error {
	id.listen.halfOpen.Store(int32(min(max(n, 0), 1<<30)))
	return nil
}

// halfOpenGrace is how long a half-open connection is kept past the
// default bound (SetHalfOpen not called): a real peer's RTU comes within a
// round trip, a burst's within tens of ms; a spoofed one never. A flood
// then holds at most its rate × halfOpenGrace connections beyond the
// bound.
const halfOpenGrace = 250 * time.Millisecond

// halfOpenSet reports whether SetHalfOpen gave the bound.
func (id *ID) halfOpenSet() bool { return id.listen.halfOpen.Load() > 0 }

// halfOpenMax is the listening ID's bound (SetHalfOpen).
func (id *ID) halfOpenMax() int {
	if n := id.listen.halfOpen.Load(); n > 0 {
		return int(n)
	}
	return int(max(id.listen.defHalfOpen.Load(), DefaultHalfOpen))
}

// Listen makes the ID listen for connection requests (rdma_listen); an
// unbound ID is bound to the wildcard address and a free port first.
// backlog bounds the requests delivered but not yet accepted or rejected
// (further REQs are dropped, and the peer retransmits); <= 0 means 1024.
// On a channel with SetBacklogOnTake it bounds those whose CONNECT_REQUEST
// is not yet taken from the channel, as the kernel's rdma_cm file does.
// Accepted requests waiting for their RTU are bounded apart (SetHalfOpen).
func (id *ID) Listen(backlog int) error {
	if !id.bound {
		if err := id.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
			return err
		}
	}
	if backlog <= 0 {
		backlog = 1024
	}
	reg.mu.Lock()
	id.listen.backlog.Store(int32(min(backlog, 1<<30)))
	reg.mu.Unlock()
	id.listen.defHalfOpen.Store(int32(min(backlog, 1<<30)))
	if a := id.agent; a != nil {
		a.mu.Lock()
		id.st = stListen
		a.mu.Unlock()
	} else {
		id.st = stListen
	}
	return nil
}

// ResolveAddr resolves dst (and src, if valid) to a device
// (rdma_resolve_addr): the device with address src, or the one that
// reaches dst. It posts ADDR_RESOLVED, or ADDR_ERROR when no attached
// device fits. With a Config.Resolve on the device's agent, dst must also
// answer it within timeout (default 2 s, as the rdma_cm tools use), else
// ADDR_ERROR with status -ETIMEDOUT, as when ARP gets no answer; an
// address Config.Resolved vouches for resolves before ResolveAddr returns.
func (id *ID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	if !dst.Addr().IsValid() || dst.Addr().IsUnspecified() {
		return newErr("resolve addr", "destination address missing", syscall.EINVAL)
	}
	if !id.idle() {
		return ErrState
	}
	var a *Agent
	switch {
	case id.agent != nil:
		a = id.agent
	case src.Addr().IsValid() && !src.Addr().IsUnspecified():
		a = agentFor(src.Addr())
	default:
		a = agentToward(dst.Addr())
	}
	if a == nil || a.addr.Is4() != dst.Addr().Unmap().Is4() {
		id.ch.post(&Event{Type: EventAddrError, ID: id, Status: -int(syscall.EADDRNOTAVAIL)})
		return nil
	}
	if id.bound && id.local.Addr().IsUnspecified() {
		id.unbind()
		id.agent = a
		if err := id.bindPort(netip.AddrPortFrom(a.addr, id.local.Port())); err != nil {
			return err
		}
	}
	id.agent = a
	if !id.bound {
		if err := id.bindPort(netip.AddrPortFrom(a.addr, src.Port())); err != nil {
			return err
		}
	}
	id.remote = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if a.cfg.Resolve != nil && id.remote.Addr() != a.addr && (a.cfg.Resolved == nil || !a.cfg.Resolved(a.addr, id.remote.Addr())) {
		if timeout <= 0 {
			timeout = 2 * time.Second
		}
		// Destroy and the agent's Close end the lookup.
		ctx, cancel := context.WithTimeout(a.ctx, timeout)
		a.mu.Lock()
		id.resolving.active, id.resolving.cancel = true, cancel
		a.mu.Unlock()
		go id.resolve(ctx, cancel, a, id.remote.Addr())
		return nil
	}
	a.mu.Lock()
	id.st = stAddrResolved
	id.ch.post(&Event{Type: EventAddrResolved, ID: id})
	a.mu.Unlock()
	return nil
}

// idle reports whether the ID may start ResolveAddr: idle, not destroyed,
// no lookup running.
func (id *ID) idle() bool {
	if a := id.agent; a != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
	}
	return id.st == stIdle && !id.destroyed && !id.resolving.active
}

// resolve runs Config.Resolve for dst within ctx and posts the outcome
// (nothing once the ID is destroyed or the agent closed).
func (id *ID) resolve(ctx context.Context, cancel context.CancelFunc, a *Agent, dst netip.Addr) {
	err := a.cfg.Resolve(ctx, a.addr, dst)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	cancel()
	a.mu.Lock()
	defer a.mu.Unlock()
	id.resolving.active, id.resolving.cancel = false, nil
	if id.destroyed || id.st != stIdle || a.closed.Load() {
		return
	}
	if err != nil {
		st := -int(syscall.ETIMEDOUT)
		var errno syscall.Errno
		if errors.As(err, &errno) && errno != 0 {
			st = -int(errno)
		}
		id.post(&Event{Type: EventAddrError, Status: st})
		return
	}
	id.st = stAddrResolved
	id.post(&Event{Type: EventAddrResolved})
}

// ResolveRoute resolves the path to the resolved address
// (rdma_resolve_route) and posts ROUTE_RESOLVED.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	_ = timeout
	a := id.agent
	if a == nil {
		return ErrState
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if id.st != stAddrResolved {
		return ErrState
	}
	id.st = stRouteResolved
	id.ch.post(&Event{Type: EventRouteResolved, ID: id})
	return nil
}

// CreateQP creates the ID's QP on pd (nil: the device's default PD) and
// moves it to INIT (rdma_create_qp); a UD QP goes on to RTS with rdma_cm's
// Q_Key. attr.QPType is set from the port space. The CM moves an RC QP to
// RTR and RTS during Connect/Accept with the negotiated values.
func (id *ID) CreateQP(pd *verbs.PD, attr *verbs.QPInitAttr) (*verbs.QP, error) {
	a := id.agent
	if a == nil {
		return nil, newErr("create qp", "resolve the address (or get a CONNECT_REQUEST) first: the ID has no device", syscall.EINVAL)
	}
	if pd == nil {
		pd = a.pd
	}
	if pd.Device() != a.dev {
		return nil, newErr("create qp", "PD belongs to another device than the ID's", syscall.EINVAL)
	}
	if attr == nil {
		return nil, newErr("create qp", "nil attributes", syscall.EINVAL)
	}
	a.mu.Lock()
	has := id.qp != nil
	a.mu.Unlock()
	if has {
		return nil, newErr("create qp", "the ID already has a QP", syscall.EINVAL)
	}
	at := *attr
	at.QPType = id.qpType
	qp, err := pd.CreateQP(&at)
	if err != nil {
		return nil, err
	}
	if id.qpType == verbs.QPTypeUD {
		err = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QKey: mad.UDPQKey},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey)
		if err == nil {
			err = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState)
		}
		if err == nil {
			err = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN)
		}
	} else {
		err = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	}
	if err != nil {
		qp.Destroy()
		return nil, err
	}
	a.mu.Lock()
	id.qp = qp
	a.mu.Unlock()
	return qp, nil
}

// DestroyQP destroys the ID's QP (rdma_destroy_qp).
func (id *ID) DestroyQP() error {
	a := id.agent
	if a == nil {
		return nil
	}
	a.mu.Lock()
	qp := id.qp
	id.qp = nil
	a.mu.Unlock()
	if qp == nil {
		return nil
	}
	return qp.Destroy()
}

// InitQPAttr returns the attributes and mask that move a QP of this ID to
// state (INIT, RTR or RTS) with the connection's negotiated values
// (rdma_init_qp_attr), for applications that manage their own QP: a passive
// ID after CONNECT_REQUEST, an active one after CONNECT_RESPONSE.
func (id *ID) InitQPAttr(state verbs.QPState) (*verbs.QPAttr, verbs.AttrMask, error) {
	a := id.agent
	if a == nil {
		return nil, 0, ErrState
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return id.qpAttr(state)
}

func (id *ID) qpAttr(state verbs.QPState) (*verbs.QPAttr, verbs.AttrMask, error) {
	ud := id.qpType == verbs.QPTypeUD
	switch state {
	case verbs.QPStateInit:
		if ud {
			return &verbs.QPAttr{QPState: state, PortNum: 1, QKey: mad.UDPQKey},
				verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey, nil
		}
		acc := verbs.AccessRemoteWrite
		if id.path.respRes > 0 {
			acc |= verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
		}
		return &verbs.QPAttr{QPState: state, PortNum: 1, QPAccessFlags: acc},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags, nil
	case verbs.QPStateRTR, verbs.QPStateRTS:
		if ud {
			m := verbs.QPAttrState
			if state == verbs.QPStateRTS {
				m |= verbs.QPAttrSQPSN
			}
			return &verbs.QPAttr{QPState: state}, m, nil
		}
		if id.path.peerQPN == 0 {
			return nil, 0, newErr("init qp attr", "the connection's values are not known yet (state "+id.st.String()+")", syscall.EINVAL)
		}
		if state == verbs.QPStateRTR {
			return &verbs.QPAttr{QPState: state, PathMTU: id.path.mtu, DestQPNum: id.path.peerQPN,
					RQPSN: id.path.myPSN, MaxDestRdAtomic: id.path.respRes, MinRNRTimer: id.path.minRNR,
					AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: id.path.peerGID,
						FlowLabel: id.path.flowLabel, SGIDIndex: id.agent.sgid, HopLimit: defaultHopLimit, TrafficClass: id.path.tos}}},
				verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
					verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer, nil
		}
		return &verbs.QPAttr{QPState: state, SQPSN: id.path.peerPSN, Timeout: id.path.ackTO, RetryCnt: min(id.path.retry, 7),
				RNRRetry: min(id.path.rnr, 7), MaxRdAtomic: id.path.initDep},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
				verbs.QPAttrMaxQPRdAtomic, nil
	}
	return nil, 0, newErr("init qp attr", "state must be INIT, RTR or RTS", syscall.EINVAL)
}

// qpRTR moves the RC QP to RTR with the negotiated values (under a.mu).
func (id *ID) qpRTR() error {
	qp := id.qp
	if qp == nil || id.qpType != verbs.QPTypeRC {
		return nil
	}
	// rdma_cm refreshes the INIT attributes first (access flags from the
	// responder resources).
	at, m, _ := id.qpAttr(verbs.QPStateInit)
	if err := qp.Modify(at, m&^(verbs.QPAttrPKeyIndex|verbs.QPAttrPort)); err != nil {
		return err
	}
	at, m, err := id.qpAttr(verbs.QPStateRTR)
	if err != nil {
		return err
	}
	return qp.Modify(at, m)
}

// qpRTS moves the RC QP to RTS (under a.mu).
func (id *ID) qpRTS() error {
	qp := id.qp
	if qp == nil || id.qpType != verbs.QPTypeRC {
		return nil
	}
	at, m, err := id.qpAttr(verbs.QPStateRTS)
	if err != nil {
		return err
	}
	return qp.Modify(at, m)
}

// qpErr moves the QP to ERR, flushing outstanding work (under a.mu).
func (id *ID) qpErr() {
	if id.qp != nil && id.qpType == verbs.QPTypeRC {
		id.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	}
}

func clampRd(v uint8) uint8 { return min(v, maxRdAtomic) }

// Connect starts connecting to the resolved address (rdma_connect): a REQ
// for RC (the ID needs a QP, or p.QPNum), a SIDR_REQ for UD. The outcome
// arrives as ESTABLISHED (or CONNECT_RESPONSE when the ID has no QP),
// REJECTED, UNREACHABLE or CONNECT_ERROR. p may be nil (rdma_cm's
// defaults: no private data, 0 responder resources/initiator depth, retry
// 7, RNR retry 7).
func (id *ID) Connect(p *ConnParam) error {
	a := id.agent
	if a == nil {
		return ErrState
	}
	var cp ConnParam
	if p != nil {
		cp = *p
	} else {
		cp = ConnParam{RetryCount: 7, RNRRetryCount: 7}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return ErrClosed
	}
	if id.st != stRouteResolved && !(id.st == stAddrResolved && id.qpType == verbs.QPTypeUD) {
		return newErr("connect", "resolve the address and the route first (state "+id.st.String()+")", syscall.EINVAL)
	}
	hdr := mad.CMAHeader{SrcPort: id.local.Port(), Src: id.local.Addr(), Dst: id.remote.Addr()}
	pd, err := hdr.Append(make([]byte, 0, mad.CMAHeaderLen+len(cp.PrivateData)))
	if err != nil {
		return newErr("connect", err.Error(), syscall.EINVAL)
	}
	pd = append(pd, cp.PrivateData...)
	id.peer = id.remote.Addr()
	id.path.peerGID = verbs.GIDFromAddr(id.peer)
	id.localComm = a.newCommID()
	id.xchg.tid = a.newTID(id.localComm)
	id.serviceID = mad.ServiceID(id.ps, id.remote.Port())
	if id.qpType == verbs.QPTypeUD {
		if len(cp.PrivateData) > mad.MaxSIDRREQUserData {
			return ErrPrivateData
		}
		m := mad.SIDRREQ{Header: mad.NewHeader(id.xchg.tid), RequestID: id.localComm, PKey: wire.DefaultPKey,
			ServiceID: id.serviceID, PrivateData: pd}
		b, err := m.Append(nil)
		if err != nil {
			return ErrPrivateData
		}
		id.st = stSIDRReqSent
		a.byLocal[id.localComm] = id
		id.startExchange(b)
		return nil
	}
	if len(cp.PrivateData) > mad.MaxREQUserData {
		return ErrPrivateData
	}
	qpn := cp.QPNum
	if id.qp != nil {
		qpn = id.qp.QPN()
	}
	if qpn == 0 {
		return newErr("connect", "the ID has no QP: call CreateQP or give ConnParam.QPNum", syscall.EINVAL)
	}
	id.path.myPSN = rand.Uint32() & wire.PSNMask
	id.path.mtu = a.mtu
	id.path.flowLabel = flowLabel(id.local.Port(), id.remote.Port())
	id.path.retry, id.path.rnr = min(cp.RetryCount, 7), min(cp.RNRRetryCount, 7)
	exp := a.respExp
	m := mad.REQ{Header: mad.NewHeader(id.xchg.tid), LocalCommID: id.localComm, ServiceID: id.serviceID,
		LocalCAGUID: a.guid, LocalQPN: qpn, ResponderResources: clampRd(cp.ResponderResources),
		InitiatorDepth: clampRd(cp.InitiatorDepth), RemoteCMResponseTimeout: exp, TransportType: mad.TransportRC,
		EndToEndFlowControl: cp.FlowControl, StartingPSN: id.path.myPSN, LocalCMResponseTimeout: exp,
		RetryCount: id.path.retry, PKey: wire.DefaultPKey, PathMTU: id.path.mtu, RNRRetryCount: id.path.rnr,
		MaxCMRetries: uint8(min(a.cfg.MaxRetries, 15)), SRQ: cp.SRQ, VendorID: cp.ECE.VendorID & 0xFFFFFF,
		Primary: mad.Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: verbs.GIDFromAddr(id.local.Addr()),
			RemoteGID: id.path.peerGID, FlowLabel: id.path.flowLabel, TrafficClass: id.path.tos, HopLimit: defaultHopLimit, LocalACKTimeout: id.path.ackTO},
		PrivateData: pd}
	m.AttrMod = cp.ECE.Options
	b, err := m.Append(nil)
	if err != nil {
		return ErrPrivateData
	}
	id.st = stReqSent
	a.byLocal[id.localComm] = id
	id.startExchange(b)
	return nil
}

// flowLabel is rdma_cm's RoCEv2 flow label: a hash of the ports
// (cma_get_roce_udp_flow_label), which also picks the QPs' UDP source port.
func flowLabel(sport, dport uint16) uint32 {
	return (uint32(sport)*31 + uint32(dport)) & 0xFFFFF
}

// Accept accepts a connection request (rdma_accept). For RC the ID's QP
// (or p.QPNum) goes to RTR and RTS and a REP is sent; ESTABLISHED follows
// with the RTU. For UD a SIDR_REP announces the QP. p may be nil (echo the
// peer's values, RNR retry 7).
func (id *ID) Accept(p *ConnParam) error {
	_, err := id.accept(p)
	return err
}

// DefaultAcceptParam returns the parameters Accept(nil) uses: the peer's
// initiator depth and responder resources echoed, RNR retry 7. A caller
// that adds to the defaults (ECE, say) starts from it.
func (id *ID) DefaultAcceptParam() *ConnParam {
	if id.agent == nil {
		return &ConnParam{RNRRetryCount: 7}
	}
	id.agent.mu.Lock()
	defer id.agent.mu.Unlock()
	return &ConnParam{ResponderResources: id.path.respRes, InitiatorDepth: id.path.initDep, RNRRetryCount: 7}
}

// accept is Accept; it also returns the half-open connections of the
// listener that the new REP made the agent drop (addHalfOpen).
func (id *ID) accept(p *ConnParam) ([]*ID, error) {
	a := id.agent
	if a == nil {
		return nil, ErrState
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil, ErrClosed
	}
	var cp ConnParam
	if p != nil {
		cp = *p
	} else {
		cp = ConnParam{ResponderResources: id.path.respRes, InitiatorDepth: id.path.initDep, RNRRetryCount: 7}
	}
	qpn := cp.QPNum
	if id.qp != nil {
		qpn = id.qp.QPN()
	}
	switch id.st {
	case stSIDRReqRcvd:
		if len(cp.PrivateData) > mad.MaxSIDRREPUserData {
			return nil, ErrPrivateData
		}
		if qpn == 0 {
			return nil, newErr("accept", "the ID has no QP: call CreateQP or give ConnParam.QPNum", syscall.EINVAL)
		}
		m := mad.SIDRREP{Header: mad.NewHeader(id.xchg.tid), RequestID: id.remoteComm, Status: mad.SIDRSuccess,
			QPN: qpn, ServiceID: id.serviceID, QKey: mad.UDPQKey, PrivateData: cp.PrivateData}
		b, _ := m.Append(nil)
		id.uncount()
		a.sendTC(id.peer, id.path.tos, b)
		id.enterTimeWait(b)
		return nil, nil
	case stReqRcvd, stMRAReqSent:
	default:
		return nil, newErr("accept", "no connection request pending on this ID (state "+id.st.String()+")", syscall.EINVAL)
	}
	if len(cp.PrivateData) > mad.MaxREPUserData {
		return nil, ErrPrivateData
	}
	if qpn == 0 {
		return nil, newErr("accept", "the ID has no QP: call CreateQP or give ConnParam.QPNum", syscall.EINVAL)
	}
	id.path.respRes, id.path.initDep = clampRd(cp.ResponderResources), clampRd(cp.InitiatorDepth)
	if err := id.qpRTR(); err != nil {
		return nil, err
	}
	if err := id.qpRTS(); err != nil {
		return nil, err
	}
	m := mad.REP{Header: mad.NewHeader(id.xchg.tid), LocalCommID: id.localComm, RemoteCommID: id.remoteComm,
		LocalQPN: qpn, StartingPSN: id.path.myPSN, ResponderResources: id.path.respRes, InitiatorDepth: id.path.initDep,
		TargetACKDelay: 15, EndToEndFlowControl: cp.FlowControl, RNRRetryCount: min(cp.RNRRetryCount, 7),
		SRQ: cp.SRQ, LocalCAGUID: a.guid, PrivateData: cp.PrivateData, VendorID: cp.ECE.VendorID & 0xFFFFFF}
	m.AttrMod = cp.ECE.Options
	b, err := m.Append(nil)
	if err != nil {
		return nil, ErrPrivateData
	}
	id.uncount()
	id.st = stRepSent
	id.xchg.answer = b
	id.startExchange(b)
	return a.addHalfOpen(id), nil
}

// Reject rejects a connection request (rdma_reject) with reason 28
// (consumer defined) and up to 148 bytes of private data (136 for UD, in a
// SIDR_REP with status REJECT).
func (id *ID) Reject(pdata []byte) error { return id.RejectReason(pdata, mad.RejConsumerDefined) }

// RejectReason is Reject with another reason in the REJ: rdma_reject_ece
// sends mad.RejVendorOptionNotSupported (35). A UD request's SIDR_REP has
// no reason, only status REJECT.
func (id *ID) RejectReason(pdata []byte, reason mad.RejectReason) error {
	a := id.agent
	if a == nil {
		return ErrState
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch id.st {
	case stSIDRReqRcvd:
		if len(pdata) > mad.MaxSIDRREPUserData {
			return ErrPrivateData
		}
		m := mad.SIDRREP{Header: mad.NewHeader(id.xchg.tid), RequestID: id.remoteComm, Status: mad.SIDRReject,
			ServiceID: id.serviceID, PrivateData: pdata}
		b, _ := m.Append(nil)
		id.uncount()
		a.sendTC(id.peer, id.path.tos, b)
		id.enterTimeWait(b)
		return nil
	case stReqRcvd, stMRAReqSent:
		if len(pdata) > mad.MaxREJUserData {
			return ErrPrivateData
		}
		id.uncount()
		b := id.sendREJ(mad.MsgREQ, reason, pdata)
		id.enterTimeWait(b)
		return nil
	case stRepRcvd:
		if len(pdata) > mad.MaxREJUserData {
			return ErrPrivateData
		}
		b := id.sendREJ(mad.MsgREP, reason, pdata)
		id.enterTimeWait(b)
		return nil
	}
	return newErr("reject", "no connection request or response to reject (state "+id.st.String()+")", syscall.EINVAL)
}

// Establish completes a connection whose REP was reported as
// CONNECT_RESPONSE (the ID had no QP): it sends the RTU (rdma_establish).
func (id *ID) Establish() error {
	a := id.agent
	if a == nil {
		return ErrState
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if id.st != stRepRcvd {
		return newErr("establish", "no CONNECT_RESPONSE pending (state "+id.st.String()+")", syscall.EINVAL)
	}
	id.sendRTU()
	id.st = stEstablished
	id.wasUp = true
	return nil
}

// Disconnect tears the connection down (rdma_disconnect): the QP goes to
// ERR (outstanding work requests complete with WR_FLUSH_ERR) and a DREQ is
// sent; DISCONNECTED follows on both sides.
func (id *ID) Disconnect() error {
	a := id.agent
	if a == nil {
		return ErrState
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch id.st {
	case stEstablished, stRepSent, stRepRcvd:
		id.qpErr()
		id.sendDREQ()
		return nil
	case stDREQSent, stTimeWait:
		id.qpErr()
		return nil
	}
	return newErr("disconnect", "not connected (state "+id.st.String()+")", syscall.EINVAL)
}

// Destroy destroys the ID (rdma_destroy_id): a live connection is torn
// down (DREQ), a pending request rejected, a listener stops listening. The
// QP is not destroyed (DestroyQP). No more events are posted for the ID.
func (id *ID) Destroy() error {
	dropMulticasts(id)
	id.unbind()
	reg.mu.Lock()
	id.listen.backlog.Store(0)
	reg.mu.Unlock()
	a := id.agent
	if a == nil {
		id.st = stDestroyed
		id.destroyed = true
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if id.destroyed {
		return nil
	}
	id.destroyed = true
	id.uncount()
	if id.resolving.cancel != nil {
		id.resolving.cancel() // the lookup ends; resolve posts nothing
	}
	switch id.st {
	case stEstablished:
		id.qpErr()
		id.sendDREQ()
	case stRepSent, stRepRcvd:
		// Not established yet: reject, as ib_cm's cm_destroy_id does (a
		// DREQ to a peer that never answered the REP would be resent for
		// the whole retry budget).
		id.qpErr()
		kind := mad.MsgOther // the message rejected, as ib_cm's cm_format_rej
		if id.st == stRepRcvd {
			kind = mad.MsgREP
		}
		b := id.sendREJ(kind, mad.RejConsumerDefined, nil)
		id.enterTimeWait(b)
	case stReqSent:
		id.sendREJ(mad.MsgOther, mad.RejTimeout, nil)
		id.forget()
	case stReqRcvd, stMRAReqSent:
		b := id.sendREJ(mad.MsgREQ, mad.RejConsumerDefined, nil)
		id.enterTimeWait(b)
	case stSIDRReqRcvd:
		m := mad.SIDRREP{Header: mad.NewHeader(id.xchg.tid), RequestID: id.remoteComm, Status: mad.SIDRReject,
			ServiceID: id.serviceID}
		b, _ := m.Append(nil)
		a.sendTC(id.peer, id.path.tos, b)
		id.enterTimeWait(b)
	case stDREQSent, stTimeWait:
		// finishing on its own
	default:
		id.forget()
		id.st = stDestroyed
	}
	return nil
}

// uncount releases the passive ID's slot in its listener's backlog.
func (id *ID) uncount() {
	if id.passive.counted.CompareAndSwap(true, false) {
		id.passive.listener.listen.pending.Add(-1)
	}
}
