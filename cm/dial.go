package cm

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/verbs"
)

// Options configure Dial and Listen. The zero value (or nil) gives an RC
// connection with 64 send and receive WRs of one SGE, 16 outstanding RDMA
// READs each way, retry and RNR retry 7, no private data.
type Options struct {
	// Src is the local IP address; it selects the device. Zero: the device
	// that reaches the destination (Dial), every device (Listen).
	Src netip.Addr
	// PortSpace is mad.PortSpaceTCP (RC, the default) or mad.PortSpaceUDP (UD).
	PortSpace mad.PortSpace
	// PD is the protection domain of the QP; nil allocates one per
	// connection, freed by Conn.Close.
	PD *verbs.PD
	// Cap sizes the QP (zero fields: 64 WRs, 1 SGE).
	Cap verbs.QPCap
	// CQE sizes each CQ (default MaxSendWR and MaxRecvWR).
	CQE int
	// CompChannel creates the CQs on a completion channel (Conn.CompChannel).
	CompChannel bool
	// Param overrides the connection parameters (Dial: REQ; Listen: REP,
	// default echoing the peer's READ depths).
	Param *ConnParam
	// PrivateData is sent in the REQ (Dial, up to 56 bytes; UD 180) or REP
	// (Accept, up to 196; UD 136) when Param is nil or has none.
	PrivateData []byte
	// Prepare is called with the new connection after its QP is created (in
	// INIT) and before the REQ or REP is sent: post receive buffers here.
	Prepare func(c *Conn) error
	// Release is called once for every connection Prepare was called on,
	// after its QP is destroyed and before its CQs and PD are freed: from
	// Conn.Close, or when the connection fails, is rejected or is dropped
	// before Dial or Accept returns it (also when Prepare itself failed).
	// Deregister here what Prepare registered; the PD cannot be freed
	// while it has MRs. c.QP is nil by then.
	Release func(c *Conn)
	// Decide is called by a Listener for each connection request (after
	// Prepare); a non-nil error rejects it, with the private data of a
	// *RejectedError. It may set c.AcceptParam.
	Decide func(c *Conn) error
	// Backlog bounds a Listener's connections established or being
	// established but not yet accepted (default 128); further requests wait
	// (the CM sends MRAs) until Accept makes room. A connection being
	// established counts only for the first 20 ms after its REP, as long as
	// a real peer's RTU takes on a LAN (rtuGrace): one still half-open then
	// is presumed spoofed and bounded by HalfOpen alone. Requests not yet
	// answered, which hold no QP, are bounded at 8 × Backlog, so that a
	// burst of them is not lost: REQs beyond are dropped (Stats.DropBacklog;
	// the peer resends).
	Backlog int
	// HalfOpen bounds a Listener's half-open connections, whose REP is sent
	// and whose RTU has not arrived (default the larger of Backlog and
	// DefaultHalfOpen; ID.SetHalfOpen): one more drops the oldest (REJ,
	// resources released), as a SYN cache does, so that spoofed REQs cannot
	// block real peers, whose RTU comes at once; from half of it on, a REP
	// is resent once at most.
	HalfOpen int
	// HalfOpenTimeout bounds how long a connection may wait for its RTU
	// before the Listener drops it (default 4 × the CM's Timeout: the REP
	// and three resends, ≈ 25 s).
	HalfOpenTimeout time.Duration
	// ACKTimeout sets the RC QP's local ACK timeout (0: 19, as rdma_cm).
	ACKTimeout uint8
	// MinRNRTimer sets the RC QP's minimum RNR NAK timer (0: 655 ms, as rdma_cm).
	MinRNRTimer uint8
	// TOS is the type of service of a dialled connection (ID.SetTOS): over
	// RoCE its GRH traffic class, which the accepting side takes from the
	// REQ (a Listener's TOS is not used).
	TOS uint8
}

// Conn is a connected QP from Dial or Listener.Accept, with its CQs and PD.
type Conn struct {
	// ID is the connection's rdma_cm ID.
	ID *ID
	// QP is connected (RC in RTS) or, for UD, in RTS with rdma_cm's Q_Key.
	QP          *verbs.QP
	PD          *verbs.PD
	SendCQ      *verbs.CQ
	RecvCQ      *verbs.CQ
	CompChannel *verbs.CompChannel // nil unless Options.CompChannel
	// PeerPrivateData is the peer's private data: the REP's (Dial) or the
	// REQ's user data after rdma_cm's header (Accept). The CM field is
	// zero-padded to its full size.
	PeerPrivateData []byte
	// PeerParam is what the peer asked for or granted.
	PeerParam ConnParam
	// UD (Dial on port space UDP) is the peer's QP and Q_Key, and AH an
	// address handle to it.
	UD *UDParam
	AH *verbs.AH
	// AcceptParam may be set by Options.Decide to change the REP.
	AcceptParam *ConnParam

	ch       *EventChannel
	ownPD    bool
	release  func(c *Conn) // Options.Release, until called
	halfOpen clock.Timer   // Listener: drops the connection if the RTU is late
	since    time.Time     // Listener: when the REP was sent (agent's clock)
	disc     chan struct{}
	discOnce sync.Once
	done     chan struct{}
	closeMu  sync.Mutex
	closed   bool
}

// LocalAddr returns the connection's local IP address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return c.ID.LocalAddr() }

// RemoteAddr returns the peer's IP address and port.
func (c *Conn) RemoteAddr() netip.AddrPort { return c.ID.RemoteAddr() }

// Disconnected is closed when the connection is torn down (DISCONNECTED,
// from either side).
func (c *Conn) Disconnected() <-chan struct{} { return c.disc }

func (c *Conn) handle(ev *Event) {
	switch ev.Type {
	case EventDisconnected, EventRejected, EventUnreachable, EventConnectError, EventDeviceRemoval:
		c.discOnce.Do(func() { close(c.disc) })
	}
}

// run consumes the connection's own event channel until it is closed.
func (c *Conn) run() {
	defer close(c.done)
	for {
		ev, err := c.ch.Get(context.Background())
		if err != nil {
			return
		}
		c.handle(ev)
	}
}

// Disconnect starts tearing the connection down (DREQ; the QP goes to
// ERR and its outstanding work requests are flushed).
func (c *Conn) Disconnect() error { return c.ID.Disconnect() }

// Close disconnects (if connected) and frees the ID, QP, CQs and, if
// Dial/Accept allocated it, the PD (after Options.Release). It does not
// wait for the peer's DREP: the CM keeps answering in time-wait. It
// returns the PD's error if MRs are still registered on it (EBUSY:
// deregister them in Options.Release).
func (c *Conn) Close() error {
	c.closeMu.Lock()
	if c.closed {
		c.closeMu.Unlock()
		return nil
	}
	c.closed = true
	c.closeMu.Unlock()
	c.ID.Destroy()
	c.discOnce.Do(func() { close(c.disc) })
	if c.ch != nil {
		c.ch.Close()
		if c.done != nil {
			<-c.done
		}
	}
	if c.AH != nil {
		c.AH.Destroy()
	}
	return c.free()
}

func (o *Options) ps() mad.PortSpace {
	if o.PortSpace == 0 {
		return mad.PortSpaceTCP
	}
	return o.PortSpace
}

// setup creates the PD, CQs and QP of a connection on id's device.
func setup(id *ID, o *Options) (*Conn, error) {
	c := &Conn{ID: id, disc: make(chan struct{})}
	dev := id.Device()
	if o.PD != nil {
		c.PD = o.PD
	} else {
		pd, err := dev.AllocPD()
		if err != nil {
			return nil, err
		}
		c.PD, c.ownPD = pd, true
	}
	cp := o.Cap
	if cp.MaxSendWR == 0 {
		cp.MaxSendWR = 64
	}
	if cp.MaxRecvWR == 0 {
		cp.MaxRecvWR = 64
	}
	cp.MaxSendSGE, cp.MaxRecvSGE = max(cp.MaxSendSGE, 1), max(cp.MaxRecvSGE, 1)
	if o.CompChannel {
		c.CompChannel = dev.CreateCompChannel()
	}
	var err error
	sq, rq := o.CQE, o.CQE
	if sq <= 0 {
		sq, rq = int(cp.MaxSendWR), int(cp.MaxRecvWR)
	}
	if c.SendCQ, err = dev.CreateCQ(sq, nil, c.CompChannel); err == nil {
		c.RecvCQ, err = dev.CreateCQ(rq, nil, c.CompChannel)
	}
	if err == nil {
		id.SetACKTimeout(orDefault(o.ACKTimeout, defaultACKTimeout))
		id.SetMinRNRTimer(o.MinRNRTimer)
		c.QP, err = id.CreateQP(c.PD, &verbs.QPInitAttr{SendCQ: c.SendCQ, RecvCQ: c.RecvCQ, Cap: cp})
	}
	if err == nil && o.Prepare != nil {
		c.release = o.Release
		err = o.Prepare(c)
	}
	if err != nil {
		c.free()
		return nil, err
	}
	return c, nil
}

func orDefault(v, def uint8) uint8 {
	if v == 0 {
		return def
	}
	return v
}

// free releases what setup created (the ID is the caller's): the QP, the
// application's resources (Options.Release), the CQs and an own PD, whose
// error it returns.
func (c *Conn) free() error {
	c.ID.DestroyQP()
	c.QP = nil
	if r := c.release; r != nil {
		c.release = nil
		r(c)
	}
	if c.SendCQ != nil {
		c.SendCQ.Destroy()
	}
	if c.RecvCQ != nil && c.RecvCQ != c.SendCQ {
		c.RecvCQ.Destroy()
	}
	if c.ownPD && c.PD != nil {
		if err := c.PD.Dealloc(); err != nil {
			return newErr("close", "the connection's PD cannot be freed ("+err.Error()+"): deregister what Options.Prepare registered in Options.Release", errnoOf(err))
		}
	}
	return nil
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EBUSY
}

// ParseAddr parses "ip:port" or "[ipv6]:port".
func ParseAddr(addr string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return ap, newErr("parse address", strconv.Quote(addr)+": want IP:port", syscall.EINVAL)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// waitEvent returns the next event of ch, or ctx's error.
func waitEvent(ctx context.Context, ch *EventChannel, want ...EventType) (*Event, error) {
	ev, err := ch.Get(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range want {
		if ev.Type == w {
			return ev, nil
		}
	}
	return ev, eventErr(ev)
}

func eventErr(ev *Event) error {
	switch ev.Type {
	case EventRejected:
		return &RejectedError{Reason: ev.Reason, PrivateData: ev.Param.PrivateData}
	case EventUnreachable:
		if ev.Status > 0 { // UD: SIDR status
			r := mad.RejConsumerDefined
			if mad.SIDRStatus(ev.Status) == mad.SIDRUnsupported {
				r = mad.RejInvalidServiceID
			}
			return &RejectedError{Reason: r, PrivateData: ev.Param.PrivateData}
		}
	}
	st := ev.Status
	if st == 0 {
		st = -int(syscall.ECONNABORTED)
	}
	return &EventError{Event: ev.Type, Status: st}
}

// Dial connects to addr ("ip:port") through the attached agent of
// Options.Src's device, or else of the device that reaches addr (see
// Attach), and returns the connected QP as Agent.Dial does.
func Dial(ctx context.Context, addr string, opts *Options) (*Conn, error) {
	dst, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	return dial(ctx, nil, dst, opts)
}

// Dial connects to addr ("ip:port") from the agent's device and returns
// the connected QP: an RC connection through REQ/REP/RTU, or for
// Options.PortSpace UDP a UD QP and the peer's QPN/Q_Key through SIDR.
// Options.Src, if set, must be the agent's address. The context bounds the
// whole exchange; the CM's own timeout and retries apply within it. A
// rejected connection gives a *RejectedError, an unanswered one an
// *EventError (UNREACHABLE, ETIMEDOUT).
func (a *Agent) Dial(ctx context.Context, addr string, opts *Options) (*Conn, error) {
	dst, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if opts != nil && opts.Src.IsValid() && !opts.Src.IsUnspecified() && opts.Src.Unmap() != a.addr {
		return nil, newErr("dial", "Options.Src "+opts.Src.String()+" is not the agent's address "+a.addr.String(), syscall.EADDRNOTAVAIL)
	}
	if a.isClosed() {
		return nil, ErrClosed
	}
	return dial(ctx, a, dst, opts)
}

// dial connects to dst through agent a, or (a nil) the agent ResolveAddr
// picks from the registry.
func dial(ctx context.Context, a *Agent, dst netip.AddrPort, opts *Options) (*Conn, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	ch := NewEventChannel()
	id, err := ch.CreateID(nil, o.ps())
	if err != nil {
		return nil, err
	}
	id.agent = a // nil: ResolveAddr looks the agent up
	fail := func(c *Conn, err error) (*Conn, error) {
		id.Destroy()
		if c != nil {
			c.free()
		}
		ch.Close()
		return nil, err
	}
	if err := id.ResolveAddr(netip.AddrPortFrom(o.Src, 0), dst, 2*time.Second); err != nil {
		return fail(nil, err)
	}
	if _, err := waitEvent(ctx, ch, EventAddrResolved); err != nil {
		return fail(nil, err)
	}
	if id.qpType == verbs.QPTypeRC {
		if err := id.ResolveRoute(2 * time.Second); err != nil {
			return fail(nil, err)
		}
		if _, err := waitEvent(ctx, ch, EventRouteResolved); err != nil {
			return fail(nil, err)
		}
	}
	c, err := setup(id, &o)
	if err != nil {
		return fail(nil, err)
	}
	p := ConnParam{ResponderResources: 16, InitiatorDepth: 16, RetryCount: 7, RNRRetryCount: 7}
	if o.Param != nil {
		p = *o.Param
	}
	if p.PrivateData == nil {
		p.PrivateData = o.PrivateData
	}
	id.SetTOS(o.TOS)
	if err := id.Connect(&p); err != nil {
		return fail(c, err)
	}
	ev, err := waitEvent(ctx, ch, EventEstablished)
	if err != nil {
		return fail(c, err)
	}
	c.PeerPrivateData = ev.Param.PrivateData
	c.PeerParam = ev.Param
	if ev.UD != nil {
		c.UD = ev.UD
		if c.AH, err = c.PD.CreateAH(&ev.UD.AHAttr); err != nil {
			return fail(c, err)
		}
	}
	c.ch = ch
	c.done = make(chan struct{})
	go c.run()
	return c, nil
}

// Listener accepts connections on an address (Listen).
type Listener struct {
	id   *ID
	ch   *EventChannel
	opts Options

	mu      sync.Mutex
	cond    chan struct{} // signalled when ready grows or the listener closes
	waiting []*Event      // connection requests beyond the backlog
	// admitting counts the requests admit took from waiting whose
	// request call has not returned: until their connection is pending
	// (or ready) they count against Backlog here, so that an admit beside
	// (Accept's, the listener goroutine's, admitTimer's) does not take
	// their room too.
	admitting int
	ready     []*Conn
	pending   map[*ID]*Conn // half-open: REP sent, no RTU yet
	closed    bool
	// rtuGrace is how long a half-open connection counts against Backlog:
	// the constant rtuGrace (tests lengthen it).
	rtuGrace time.Duration
	// admitTimer, if armed, calls admit when the oldest half-open
	// connection stops counting against Backlog (rtuGrace; the agent's
	// clock; stopped by Close).
	admitTimer clock.Timer
	done       chan struct{}
	// requests counts admit's calls of request in progress: admit runs on
	// the listener's goroutine, Accept's and admitTimer's, and Close waits
	// for them before it disposes of the half-open connections (a request
	// that finished after would leave its connection, QP and ID behind).
	requests sync.WaitGroup

	// HalfOpenDrops counts half-open connections dropped because a newer
	// request needed the room (Options.HalfOpen; the agent's
	// Stats.HalfOpenEvicted counts them too), their REP's resends ran out,
	// or their RTU was late (Options.HalfOpenTimeout).
	HalfOpenDrops atomic.Uint64
}

// Listen listens for connections on addr ("ip:port"; IP 0.0.0.0 or :: for
// every attached device, port 0 for a free one) in the port space of opts:
// with a device's IP, on its attached agent (Agent.Listen).
func Listen(addr string, opts *Options) (*Listener, error) {
	ap, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if ip := ap.Addr(); !ip.IsUnspecified() {
		a := agentFor(ip)
		if a == nil {
			return nil, ErrNoDevice
		}
		return listen(a, ap, opts)
	}
	return listen(nil, ap, opts)
}

// Listen listens for connections to the agent's address on addr's port
// ("ip:port", port 0 for a free one) in the port space of opts. The IP must
// be the agent's address, or 0.0.0.0 or :: for it.
func (a *Agent) Listen(addr string, opts *Options) (*Listener, error) {
	ap, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if ip := ap.Addr(); !ip.IsUnspecified() && ip != a.addr {
		return nil, newErr("listen", ip.String()+" is not the agent's address "+a.addr.String(), syscall.EADDRNOTAVAIL)
	}
	if a.isClosed() {
		return nil, ErrClosed
	}
	return listen(a, ap, opts)
}

// listen starts a Listener bound to agent a's address and port (a nil: to
// ap, the wildcard address, for every attached agent).
func listen(a *Agent, ap netip.AddrPort, opts *Options) (*Listener, error) {
	l := &Listener{ch: NewEventChannel(), pending: map[*ID]*Conn{}, cond: make(chan struct{}, 1),
		done: make(chan struct{}), rtuGrace: rtuGrace}
	if opts != nil {
		l.opts = *opts
	}
	if l.opts.Backlog <= 0 {
		l.opts.Backlog = 128
	}
	if l.opts.HalfOpen <= 0 {
		l.opts.HalfOpen = max(l.opts.Backlog, DefaultHalfOpen)
	}
	var err error
	if l.id, err = l.ch.CreateID(l, l.opts.ps()); err != nil {
		return nil, err
	}
	l.id.SetHalfOpen(l.opts.HalfOpen)
	if a != nil {
		l.id.agent = a
		err = l.id.bindPort(netip.AddrPortFrom(a.addr, ap.Port()))
	} else {
		err = l.id.BindAddr(ap)
	}
	if err != nil {
		l.id.Destroy()
		return nil, err
	}
	if err := l.id.Listen(requestsPerBacklog * l.opts.Backlog); err != nil {
		l.id.Destroy()
		return nil, err
	}
	go l.run()
	return l, nil
}

// Addr returns the bound address (with the chosen port).
func (l *Listener) Addr() netip.AddrPort { return l.id.LocalAddr() }

// ID returns the listening ID.
func (l *Listener) ID() *ID { return l.id }

func (l *Listener) run() {
	defer close(l.done)
	for {
		ev, err := l.ch.Get(context.Background())
		if err != nil {
			return
		}
		if ev.Type == EventConnectRequest {
			l.mu.Lock()
			l.waiting = append(l.waiting, ev)
			l.mu.Unlock()
			l.admit()
			continue
		}
		l.mu.Lock()
		c := l.pending[ev.ID]
		l.mu.Unlock()
		if c == nil {
			continue
		}
		switch ev.Type {
		case EventEstablished:
			l.established(c, ev)
		default:
			// The request failed before establishment: UNREACHABLE when
			// its REP's resends ran out or the agent dropped it for a
			// newer one (Options.HalfOpen).
			if l.drop(c) && ev.Type == EventUnreachable {
				l.HalfOpenDrops.Add(1)
			}
			l.admit()
		}
	}
}

// drop abandons a half-open connection (REJ if the CM still knows it) and
// releases it, unless it left the pending set already.
func (l *Listener) drop(c *Conn) bool {
	l.mu.Lock()
	if l.pending[c.ID] != c || c.ID.State() == stEstablished.String() {
		// Gone, or its RTU has arrived: ESTABLISHED is on its way.
		l.mu.Unlock()
		return false
	}
	delete(l.pending, c.ID)
	l.mu.Unlock()
	if c.halfOpen != nil {
		c.halfOpen.Stop()
	}
	c.ID.Destroy()
	if err := c.free(); err != nil {
		if a := c.ID.agent; a != nil && a.log != nil {
			a.log.Warn("cm: a dropped connection's resources leak", "err", err)
		}
	}
	return true
}

// requestsPerBacklog × Options.Backlog bounds a Listener's requests not
// yet answered (its ID's listen backlog): they hold no QP, and a flood's
// burst of them must not push a real peer's REQ out, whose resend is 6 s
// away.
const requestsPerBacklog = 8

// rtuGrace is how long a half-open connection counts against a Listener's
// Backlog: a real peer's RTU comes within a round trip, a spoofed one
// never. Under a flood the bound is HalfOpen, the agent's, and Backlog
// still admits Backlog / rtuGrace requests a second (6,400 with 128).
const rtuGrace = 20 * time.Millisecond

// young returns the number of half-open connections whose REP went out
// less than l.rtuGrace ago, and when the oldest of them stops counting, by
// its agent's clock (under l.mu).
func (l *Listener) young() (n int, next time.Duration, clk clock.Clock) {
	for _, c := range l.pending {
		if c.since.IsZero() {
			n++ // its REP is on its way
			continue
		}
		if c.ID.State() == stEstablished.String() {
			n++ // the RTU arrived: ready once l.run takes its event
			continue
		}
		if left := l.rtuGrace - c.ID.agent.clock.Now().Sub(c.since); left > 0 {
			n++
			if next == 0 || left < next {
				next, clk = left, c.ID.agent.clock
			}
		}
	}
	return n, next, clk
}

// admit handles waiting connection requests while fewer than
// Options.Backlog connections are established or being established but not
// yet accepted; the others wait (the CM asks their peers to wait with MRAs)
// until Accept makes room.
//
// A half-open connection counts only for rtuGrace: after that it is
// presumed spoofed, and the agent bounds those (Options.HalfOpen,
// ID.SetHalfOpen), dropping the oldest for a newer one, which request
// then releases, so that peers that never answer cannot hold the
// listener.
func (l *Listener) admit() {
	for {
		l.mu.Lock()
		if l.closed || len(l.waiting) == 0 {
			l.mu.Unlock()
			return
		}
		if n, next, clk := l.young(); len(l.ready)+n+l.admitting >= l.opts.Backlog {
			if next > 0 && l.admitTimer == nil {
				l.admitTimer = clk.AfterFunc(next, func() {
					l.mu.Lock()
					l.admitTimer = nil
					l.mu.Unlock()
					l.admit()
				})
			}
			l.mu.Unlock()
			return
		}
		ev := l.waiting[0]
		l.waiting = l.waiting[1:]
		l.admitting++
		l.requests.Add(1) // l.closed is false: Close has not begun to wait
		l.mu.Unlock()
		l.request(ev)
		l.mu.Lock()
		l.admitting-- // pending, ready or released now; the loop looks again
		l.mu.Unlock()
		l.requests.Done()
	}
}

// expire drops c if it is still half-open (Options.HalfOpenTimeout).
func (l *Listener) expire(c *Conn) {
	if l.drop(c) {
		l.HalfOpenDrops.Add(1)
		l.admit()
	}
}

func (l *Listener) request(ev *Event) {
	id := ev.ID
	c, err := setup(id, &l.opts)
	if err != nil {
		id.Reject(nil)
		id.Destroy()
		return
	}
	c.PeerPrivateData = ev.Param.PrivateData
	c.PeerParam = ev.Param
	if l.opts.Decide != nil {
		if err := l.opts.Decide(c); err != nil {
			var rj *RejectedError
			var pd []byte
			if errors.As(err, &rj) {
				pd = rj.PrivateData
			}
			id.Reject(pd)
			id.Destroy()
			c.free()
			return
		}
	}
	p := ConnParam{ResponderResources: ev.Param.ResponderResources, InitiatorDepth: ev.Param.InitiatorDepth,
		RNRRetryCount: 7}
	if l.opts.Param != nil {
		p = *l.opts.Param
	}
	if c.AcceptParam != nil {
		p = *c.AcceptParam
	}
	if p.PrivateData == nil {
		p.PrivateData = l.opts.PrivateData
	}
	if id.qpType == verbs.QPTypeRC {
		l.mu.Lock()
		l.pending[id] = c // since zero: counted as young
		l.mu.Unlock()
	}
	evicted, err := id.accept(&p)
	// Release at once what the agent dropped to make room (their
	// UNREACHABLE events, queued behind other requests, find them gone):
	// a burst of requests would otherwise hold that many QPs.
	for _, x := range evicted {
		l.mu.Lock()
		old := l.pending[x]
		l.mu.Unlock()
		if old != nil && l.drop(old) {
			l.HalfOpenDrops.Add(1)
		}
	}
	if err != nil {
		l.mu.Lock()
		delete(l.pending, id)
		l.mu.Unlock()
		id.Reject(nil)
		id.Destroy()
		c.free()
		return
	}
	if id.qpType == verbs.QPTypeRC {
		to := l.opts.HalfOpenTimeout
		if to <= 0 {
			to = 4 * id.agent.cfg.Timeout
		}
		l.mu.Lock()
		if l.pending[id] == c { // not established or failed already
			c.since = id.agent.clock.Now()
			c.halfOpen = id.agent.clock.AfterFunc(to, func() { l.expire(c) })
		}
		l.mu.Unlock()
	}
	if id.qpType == verbs.QPTypeUD {
		l.established(c, nil)
	}
}

// established moves c to its own event channel and queues it for Accept.
func (l *Listener) established(c *Conn, ev *Event) {
	ch := NewEventChannel()
	c.ID.Migrate(ch)
	c.ch = ch
	c.done = make(chan struct{})
	go c.run()
	if c.ID.qpType == verbs.QPTypeRC && c.ID.State() != stEstablished.String() {
		c.handle(&Event{Type: EventDisconnected}) // torn down before the migration
	}
	l.mu.Lock()
	delete(l.pending, c.ID)
	if c.halfOpen != nil {
		c.halfOpen.Stop()
	}
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return
	}
	l.ready = append(l.ready, c)
	l.mu.Unlock()
	select {
	case l.cond <- struct{}{}:
	default:
	}
}

// Accept waits for the next established connection.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	for {
		l.mu.Lock()
		if len(l.ready) > 0 {
			c := l.ready[0]
			l.ready = l.ready[1:]
			more := len(l.ready) > 0
			l.mu.Unlock()
			if more {
				select {
				case l.cond <- struct{}{}:
				default:
				}
			}
			l.admit()
			return c, nil
		}
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		select {
		case <-l.cond:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close stops listening; connections not yet accepted are closed, and
// connection requests not yet answered are rejected (their peers get a
// REJ), including those a concurrent Accept is setting up, which Close
// waits for. Accepted connections are unaffected.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	if l.admitTimer != nil {
		l.admitTimer.Stop()
		l.admitTimer = nil
	}
	ready := l.ready
	l.ready = nil
	l.mu.Unlock()
	select {
	case l.cond <- struct{}{}:
	default:
	}
	l.id.Destroy()
	l.ch.Close() // rejects the requests the listener's goroutine had not read yet
	<-l.done
	l.requests.Wait()
	l.mu.Lock()
	pend := l.pending
	l.pending = map[*ID]*Conn{}
	waiting := l.waiting
	l.waiting = nil
	l.mu.Unlock()
	for _, ev := range waiting {
		ev.ID.Reject(nil)
		ev.ID.Destroy()
	}
	for _, c := range pend {
		if c.halfOpen != nil {
			c.halfOpen.Stop()
		}
		c.ID.Destroy()
		c.free()
	}
	for _, c := range ready {
		c.Close()
	}
	return nil
}
