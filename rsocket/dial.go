package rsocket

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/cm/mad"
)

// Dial connects to an rsocket listening on addr ("ip:port"), through the
// cm agent of the device that reaches it (cm.Dial), as rconnect does. A
// port nobody listens on gives an error for which errors.Is(err,
// syscall.ECONNREFUSED) holds.
func Dial(ctx context.Context, addr string, cfg *Config) (*Conn, error) {
	return dial(ctx, nil, addr, cfg)
}

// DialAgent is Dial through agent a.
func DialAgent(ctx context.Context, a *cm.Agent, addr string, cfg *Config) (*Conn, error) {
	return dial(ctx, a, addr, cfg)
}

func dial(ctx context.Context, a *cm.Agent, addr string, cfg *Config) (*Conn, error) {
	c := newConn(cfg)
	o := cmOptions(c.cfg)
	// rs_do_connect's parameters: no RDMA READs, retries 7.
	p := &cm.ConnParam{FlowControl: true, RetryCount: 7, RNRRetryCount: 7}
	o.Param = p
	o.Prepare = func(cc *cm.Conn) error {
		if err := c.prepare(cc); err != nil {
			return err
		}
		p.PrivateData = c.marshalConnData()
		return nil
	}
	o.Release = c.release
	var cc *cm.Conn
	var err error
	if a != nil {
		cc, err = a.Dial(ctx, addr, &o)
	} else {
		cc, err = cm.Dial(ctx, addr, &o)
	}
	if err != nil {
		return nil, dialErr(err)
	}
	pd, err := ParseConnData(cc.PeerPrivateData)
	if err == nil {
		err = c.save(pd)
	}
	if err != nil {
		cc.Close()
		return nil, err
	}
	c.start()
	return c, nil
}

// dialErr gives rconnect's errno: ECONNREFUSED for a reject.
func dialErr(err error) error {
	var rj *cm.RejectedError
	if errors.As(err, &rj) {
		return &Error{Op: "connect", Reason: rj.Error(), Errno: syscall.ECONNREFUSED}
	}
	return err
}

// Listener accepts rsocket connections; it is a net.Listener.
type Listener struct {
	l   *cm.Listener
	cfg Config

	mu      sync.Mutex
	prep    map[*cm.Conn]*Conn // prepared, not yet accepted by cm
	ready   []*Conn
	cond    chan struct{}
	notify  func()
	closed  bool
	nonblk  bool
	done    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	acceptE error
}

// Listen listens for rsocket connections on addr ("ip:port", ip 0.0.0.0
// for every attached device, port 0 for a free one), as rbind+rlisten do.
func Listen(addr string, cfg *Config) (*Listener, error) { return listen(nil, addr, cfg) }

// ListenAgent is Listen on agent a's device.
func ListenAgent(a *cm.Agent, addr string, cfg *Config) (*Listener, error) {
	return listen(a, addr, cfg)
}

// ListenBacklog is Listen with a backlog (rlisten's), 0 for the default.
func ListenBacklog(a *cm.Agent, addr string, backlog int, cfg *Config) (*Listener, error) {
	return listenB(a, addr, backlog, cfg)
}

func listen(a *cm.Agent, addr string, cfg *Config) (*Listener, error) {
	return listenB(a, addr, 0, cfg)
}

func listenB(a *cm.Agent, addr string, backlog int, cfg *Config) (*Listener, error) {
	l := &Listener{cfg: cfg.norm(), prep: map[*cm.Conn]*Conn{}, cond: make(chan struct{}, 1), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	o := cmOptions(l.cfg)
	o.Backlog = backlog
	o.Prepare = func(cc *cm.Conn) error {
		l.mu.Lock()
		cfg := l.cfg
		l.mu.Unlock()
		c := newConn(&cfg)
		if err := c.prepare(cc); err != nil {
			c.release(cc)
			return err
		}
		l.mu.Lock()
		l.prep[cc] = c
		l.mu.Unlock()
		return nil
	}
	o.Release = func(cc *cm.Conn) {
		l.mu.Lock()
		c := l.prep[cc]
		delete(l.prep, cc)
		l.mu.Unlock()
		if c != nil {
			c.release(cc)
		}
	}
	o.Decide = func(cc *cm.Conn) error {
		l.mu.Lock()
		c := l.prep[cc]
		l.mu.Unlock()
		if c == nil {
			return &cm.RejectedError{Reason: mad.RejConsumerDefined}
		}
		pd, err := ParseConnData(cc.PeerPrivateData)
		if err == nil {
			err = c.save(pd)
		}
		if err != nil {
			if c.log != nil {
				c.log.Debug("rsocket: request rejected", "err", err)
			}
			return &cm.RejectedError{Reason: mad.RejConsumerDefined}
		}
		p := cm.ConnParam{ResponderResources: cc.PeerParam.ResponderResources, InitiatorDepth: cc.PeerParam.InitiatorDepth,
			FlowControl: true, RNRRetryCount: 7, PrivateData: c.marshalConnData()}
		cc.AcceptParam = &p
		return nil
	}
	var err error
	if a != nil {
		l.l, err = a.Listen(addr, &o)
	} else {
		l.l, err = cm.Listen(addr, &o)
	}
	if err != nil {
		return nil, err
	}
	go l.run(l.l)
	return l, nil
}

func (l *Listener) run(ll *cm.Listener) {
	defer close(l.done)
	for {
		cc, err := ll.Accept(l.ctx)
		l.mu.Lock()
		if err != nil {
			l.acceptE = err
			l.closed = true
			f := l.notify
			l.mu.Unlock()
			l.signal()
			if f != nil {
				f()
			}
			return
		}
		c := l.prep[cc]
		delete(l.prep, cc)
		if c == nil {
			l.mu.Unlock()
			cc.Close()
			continue
		}
		// From here the connection's own Close releases its buffers.
		c.start()
		l.ready = append(l.ready, c)
		f := l.notify
		l.mu.Unlock()
		l.signal()
		if f != nil {
			f()
		}
	}
}

func (l *Listener) signal() {
	select {
	case l.cond <- struct{}{}:
	default:
	}
}

// Accept waits for the next connection (raccept).
func (l *Listener) Accept() (net.Conn, error) { return l.AcceptRS(context.Background()) }

// AcceptRS waits for the next connection, or until ctx is done; with
// SetNonblock, it fails at once with EAGAIN when none is ready.
func (l *Listener) AcceptRS(ctx context.Context) (*Conn, error) {
	for {
		l.mu.Lock()
		if len(l.ready) > 0 {
			c := l.ready[0]
			l.ready = l.ready[1:]
			if len(l.ready) > 0 {
				l.signal()
			}
			l.mu.Unlock()
			return c, nil
		}
		closed, nb := l.closed, l.nonblk
		l.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		if nb {
			return nil, &Error{Op: "accept", Reason: "no connection ready", Errno: syscall.EAGAIN}
		}
		select {
		case <-l.cond:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// SetConfig changes the configuration of the connections accepted from
// now on (librdmacm's options set on a listening rsocket). The queue
// sizes are fixed at Listen.
func (l *Listener) SetConfig(cfg *Config) {
	n := cfg.norm()
	l.mu.Lock()
	n.SQSize, n.RQSize = l.cfg.SQSize, l.cfg.RQSize
	l.cfg = n
	l.mu.Unlock()
}

// SetNonblock makes Accept fail with EAGAIN instead of waiting.
func (l *Listener) SetNonblock(on bool) {
	l.mu.Lock()
	l.nonblk = on
	l.mu.Unlock()
}

// SetNotify sets a function called (from another goroutine) when a
// connection becomes ready to accept or the listener fails.
func (l *Listener) SetNotify(f func()) {
	l.mu.Lock()
	l.notify = f
	l.mu.Unlock()
}

// Poll reports PollIn when a connection is ready to accept.
func (l *Listener) Poll(events int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if events&PollIn != 0 && len(l.ready) > 0 {
		return PollIn
	}
	if l.closed {
		return PollErr
	}
	return 0
}

// Close stops listening; connections not yet accepted are closed.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed && l.l == nil {
		l.mu.Unlock()
		return net.ErrClosed
	}
	l.closed = true
	ll := l.l
	l.l = nil
	l.mu.Unlock()
	if ll == nil {
		return net.ErrClosed
	}
	err := ll.Close()
	l.cancel()
	<-l.done
	l.mu.Lock()
	ready := l.ready
	l.ready = nil
	l.mu.Unlock()
	for _, c := range ready {
		c.Close()
	}
	return err
}

// Addr returns the bound address.
func (l *Listener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.l == nil {
		return Addr{}
	}
	return Addr{l.l.Addr()}
}
