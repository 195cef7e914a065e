// Package cmtime is "softroce cmtime": rdma-core's cmtime over softroce's
// connection manager, with its options and output. The client times each
// step of setting up and tearing down -c RC connections at once (create
// ID, bind, resolve address, resolve route, create QP, connect, disconnect,
// destroy); the server accepts and tears down whatever arrives until it is
// stopped. Its command registers itself with the softroce command table.
package cmtime

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/verbs"
)

func init() {
	cli.Register(&cli.Command{Name: "cmtime", Summary: "time rdma_cm connection set-up and teardown (rdma-core's cmtime)", Run: run})
}

// The steps cmtime times, in its order and with its names.
const (
	stepCreateID = iota
	stepBind
	stepResolveAddr
	stepResolveRoute
	stepCreateQP
	stepConnect
	stepDisconnect
	stepDestroy
	steps
)

var stepNames = [steps]string{"create id", "bind addr", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"}

type options struct {
	dst, src  string
	conns     int
	port      int
	retries   int
	timeoutMS int
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, cancel := toolkit.SignalContext()
	defer cancel()
	return runCtx(ctx, args, stdout, stderr)
}

// runCtx is run until ctx ends (a signal): the server stops, the client
// gives up the step it is in.
func runCtx(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := options{conns: 100, port: 7471, retries: 2, timeoutMS: 2000}
	g := cli.Getopt{Prog: "softroce cmtime", Synopsis: "[-s server_address] [-b bind_address] [-c connections] [-p port_number] [-r retries] [-t timeout_ms]"}
	g.Str('s', "", &o.dst).Describe("server_address", "connect to this server (client); without it, be the server")
	g.Str('b', "", &o.src).Describe("bind_address", "the device's address (the server's listening address)")
	g.NumIn('c', "", &o.conns, 1, 1<<20).Describe("connections", "connections at once (default 100)")
	g.NumIn('p', "", &o.port, 0, 65535).Describe("port_number", "port (default 7471)")
	g.NumIn('r', "", &o.retries, 0, 7).Describe("retries", "address and route resolution retries, and the connections' retry count (default 2)")
	g.NumIn('t', "", &o.timeoutMS, 1, 1<<30).Describe("timeout_ms", "address and route resolution timeout (default 2000)")
	ops, code, ok := g.ParseArgs(args, stdout, stderr, nil)
	if !ok {
		return code
	}
	if len(ops) > 0 {
		return cli.UsageErr(stderr, g.Prog, "unexpected argument %q", ops[0])
	}
	var src, dst netip.Addr
	var err error
	if o.src != "" {
		if src, err = lookup(o.src); err != nil {
			return cli.UsageErr(stderr, g.Prog, "-b %q: %v", o.src, err)
		}
	}
	if o.dst != "" {
		if dst, err = lookup(o.dst); err != nil {
			return cli.UsageErr(stderr, g.Prog, "-s %q: %v", o.dst, err)
		}
	}
	if cli.ArgsOnly {
		return cli.ExitOK
	}
	dev, agent, err := openDevice(src, dst)
	if err != nil {
		fmt.Fprintln(stderr, "cmtime:", err)
		return cli.ExitFailure
	}
	defer dev.Close()
	defer agent.Close()
	ch := cm.NewEventChannel()
	defer ch.Close()
	// The kernel's rdma_cm file counts a request against its listener's
	// backlog until the program takes it, as the C library's channels do:
	// a burst of -c 2000 is not cut at the backlog while the server
	// accepts.
	ch.SetBacklogOnTake(true)
	if !dst.IsValid() {
		return serve(ctx, ch, netip.AddrPortFrom(dev.LocalAddr().Addr(), uint16(o.port)), stderr)
	}
	c := &client{o: o, ch: ch, nodes: make([]node, o.conns), out: stdout,
		src: netip.AddrPortFrom(dev.LocalAddr().Addr(), 0), dst: netip.AddrPortFrom(dst, uint16(o.port))}
	if !src.IsValid() {
		c.src = netip.AddrPort{}
	}
	err = c.run(ctx)
	c.destroy()
	c.show()
	if err != nil {
		fmt.Fprintln(stderr, "cmtime:", err)
		return cli.ExitFailure
	}
	// rdma-core's cmtime exits 0 whatever its connections did; a failed
	// connection (its event printed above) makes this one exit 1.
	if n := c.failures(); n > 0 {
		fmt.Fprintf(stderr, "cmtime: %d of %d connections failed\n", n, len(c.nodes))
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// lookup resolves an address or host name (getaddrinfo).
func lookup(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.LookupIP(s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("cannot resolve it: %v", err)
	}
	a, _ := netip.AddrFromSlice(ips[0])
	return a.Unmap(), nil
}

// openDevice opens the tool's device with a CM agent: on -b, else on the
// default device (server), the address after a loopback server's, or the
// address the kernel would send from toward the server.
func openDevice(src, dst netip.Addr) (*verbs.Device, *cm.Agent, error) {
	addr := src
	switch {
	case addr.IsValid():
	case !dst.IsValid():
		d, err := toolkit.ResolveDevice("")
		if err != nil {
			return nil, nil, err
		}
		addr = d.Addr.Addr().Unmap()
	case dst.Is4() && dst.IsLoopback():
		addr = dst.Next()
	default:
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 4791)))
		if err != nil {
			return nil, nil, err
		}
		addr = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
		c.Close()
	}
	ap := netip.AddrPortFrom(addr, 4791)
	ep, err := udp.Listen(ap, toolkit.UDPOptions(toolkit.DeviceAt(ap))...)
	if err != nil {
		return nil, nil, fmt.Errorf("opening a softroce device on %v: %w", addr, err)
	}
	dev, err := verbs.Open(ep, &verbs.Config{Name: "softroce0", Logger: toolkit.Logger})
	if err != nil {
		ep.Close()
		return nil, nil, err
	}
	agent, err := cm.Attach(dev, toolkit.AgentConfig())
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return dev, agent, nil
}

// qpAttr is cmtime's QP: RC, one work request and one SGE each way.
func qpAttr(cq *verbs.CQ) *verbs.QPInitAttr {
	return &verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// createQP gives id a QP on a CQ of its own, as rdma_create_qp without CQs
// does.
func createQP(id *cm.ID) (*verbs.CQ, error) {
	cq, err := id.Device().CreateCQ(2, nil, nil)
	if err != nil {
		return nil, err
	}
	if _, err := id.CreateQP(nil, qpAttr(cq)); err != nil {
		cq.Destroy()
		return nil, err
	}
	return cq, nil
}

// serve accepts every connection request (a QP each) and tears down every
// disconnected connection, until ctx ends.
func serve(ctx context.Context, ch *cm.EventChannel, at netip.AddrPort, stderr io.Writer) int {
	l, err := ch.CreateID(nil, mad.PortSpaceTCP)
	if err != nil {
		fmt.Fprintln(stderr, "listen request failed:", err)
		return cli.ExitFailure
	}
	defer l.Destroy()
	if err := l.BindAddr(at); err != nil {
		fmt.Fprintln(stderr, "bind address failed:", err)
		return cli.ExitFailure
	}
	// cmtime listens with backlog 0: the most rdma_cm allows.
	if err := l.Listen(toolkit.ListenBacklog()); err != nil {
		fmt.Fprintln(stderr, "failure trying to listen:", err)
		return cli.ExitFailure
	}
	cqs := map[*cm.ID]*verbs.CQ{}
	for {
		ev, err := ch.Get(ctx)
		if err != nil {
			for id, cq := range cqs {
				id.Destroy()
				cq.Destroy()
			}
			return cli.ExitOK // stopped
		}
		switch ev.Type {
		case cm.EventConnectRequest:
			cq, err := createQP(ev.ID)
			if err == nil {
				err = ev.ID.Accept(nil)
			}
			if err != nil {
				fmt.Fprintln(stderr, "failing connection request:", err)
				ev.ID.Reject(nil)
				ev.ID.Destroy()
				if cq != nil {
					cq.Destroy()
				}
				continue
			}
			cqs[ev.ID] = cq
		case cm.EventDisconnected:
			ev.ID.Disconnect()
			ev.ID.Destroy()
			if cq := cqs[ev.ID]; cq != nil {
				cq.Destroy()
				delete(cqs, ev.ID)
			}
		}
	}
}

// node is one of the client's connections and its step times.
type node struct {
	id      *cm.ID
	cq      *verbs.CQ
	times   [steps][2]time.Time
	retries int
	failed  bool
}

type client struct {
	o        options
	ch       *cm.EventChannel
	nodes    []node
	src, dst netip.AddrPort
	out      io.Writer
	times    [steps][2]time.Time

	mu   sync.Mutex
	cond *sync.Cond
	done [steps]int // completions of the asynchronous steps
}

// run runs the client's steps, each for every connection at once.
func (c *client) run(ctx context.Context) error {
	c.cond = sync.NewCond(&c.mu)
	fmt.Fprintln(c.out, "creating id")
	c.times[stepCreateID][0] = time.Now()
	for i := range c.nodes {
		n := &c.nodes[i]
		n.times[stepCreateID][0] = time.Now()
		id, err := c.ch.CreateID(n, mad.PortSpaceTCP)
		if err != nil {
			return err
		}
		n.id = id
		n.times[stepCreateID][1] = time.Now()
	}
	c.times[stepCreateID][1] = time.Now()
	evctx, stop := context.WithCancel(ctx)
	defer stop()
	go c.events(evctx)
	if c.src.IsValid() {
		fmt.Fprintln(c.out, "binding source address")
		c.sync(stepBind, func(n *node) error { return n.id.BindAddr(c.src) })
	}
	timeout := time.Duration(c.o.timeoutMS) * time.Millisecond
	fmt.Fprintln(c.out, "resolving address")
	c.async(ctx, stepResolveAddr, func(n *node) error {
		n.retries = c.o.retries
		return n.id.ResolveAddr(c.src, c.dst, timeout)
	})
	fmt.Fprintln(c.out, "resolving route")
	c.async(ctx, stepResolveRoute, func(n *node) error {
		n.retries = c.o.retries
		return n.id.ResolveRoute(timeout)
	})
	fmt.Fprintln(c.out, "creating qp")
	c.sync(stepCreateQP, func(n *node) (err error) {
		n.cq, err = createQP(n.id)
		return err
	})
	fmt.Fprintln(c.out, "connecting")
	p := &cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: uint8(c.o.retries), RNRRetryCount: 7}
	c.async(ctx, stepConnect, func(n *node) error { return n.id.Connect(p) })
	fmt.Fprintln(c.out, "disconnecting")
	c.async(ctx, stepDisconnect, func(n *node) error {
		err := n.id.Disconnect()
		n.id.DestroyQP()
		return err
	})
	return ctx.Err()
}

// sync times a step that completes in its call.
func (c *client) sync(s int, f func(*node) error) {
	c.times[s][0] = time.Now()
	c.startAll(s, f, true)
	c.times[s][1] = time.Now()
}

// startAll runs f, step s's call, on every connection not failed yet,
// stamping each one's start (and its end too if done: a step that
// completes in its call); it returns how many started.
func (c *client) startAll(s int, f func(*node) error, done bool) int {
	started := 0
	for i := range c.nodes {
		n := &c.nodes[i]
		c.mu.Lock()
		failed := n.failed
		if !failed {
			n.times[s][0] = time.Now()
		}
		c.mu.Unlock()
		if failed {
			continue
		}
		err := f(n)
		c.mu.Lock()
		if err != nil {
			fmt.Fprintf(c.out, "failure %s: %v\n", stepNames[s], err)
			n.failed = true
		} else if done {
			n.times[s][1] = time.Now()
		}
		c.mu.Unlock()
		if err == nil {
			started++
		}
	}
	return started
}

// async times a step that completes with an event: it starts it on every
// connection, then waits for as many completions (or ctx).
func (c *client) async(ctx context.Context, s int, f func(*node) error) {
	c.times[s][0] = time.Now()
	started := c.startAll(s, f, false)
	stop := context.AfterFunc(ctx, func() { c.mu.Lock(); c.cond.Broadcast(); c.mu.Unlock() })
	defer stop()
	c.mu.Lock()
	for c.done[s] < started && ctx.Err() == nil {
		c.cond.Wait()
	}
	c.mu.Unlock()
	c.times[s][1] = time.Now()
}

// failures counts the connections that failed a step.
func (c *client) failures() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for i := range c.nodes {
		if c.nodes[i].failed {
			n++
		}
	}
	return n
}

// end records that node n finished step s (in error or not).
func (c *client) end(n *node, s int, failed bool) {
	c.mu.Lock()
	n.times[s][1] = time.Now()
	if failed {
		n.failed = true
	}
	c.done[s]++
	c.cond.Broadcast()
	c.mu.Unlock()
}

// events is the client's event thread (cmtime's cma_handler).
func (c *client) events(ctx context.Context) {
	timeout := time.Duration(c.o.timeoutMS) * time.Millisecond
	for {
		ev, err := c.ch.Get(ctx)
		if err != nil {
			return
		}
		n, _ := ev.ID.Context.(*node)
		if n == nil {
			continue
		}
		switch ev.Type {
		case cm.EventAddrResolved:
			c.end(n, stepResolveAddr, false)
		case cm.EventRouteResolved:
			c.end(n, stepResolveRoute, false)
		case cm.EventEstablished:
			c.end(n, stepConnect, false)
		case cm.EventAddrError:
			if n.retries > 0 {
				n.retries--
				if ev.ID.ResolveAddr(c.src, c.dst, timeout) == nil {
					continue
				}
			}
			fmt.Fprintf(c.out, "RDMA_CM_EVENT_ADDR_ERROR, error: %d\n", ev.Status)
			c.end(n, stepResolveAddr, true)
		case cm.EventRouteError:
			if n.retries > 0 {
				n.retries--
				if ev.ID.ResolveRoute(timeout) == nil {
					continue
				}
			}
			fmt.Fprintf(c.out, "RDMA_CM_EVENT_ROUTE_ERROR, error: %d\n", ev.Status)
			c.end(n, stepResolveRoute, true)
		case cm.EventConnectError, cm.EventUnreachable, cm.EventRejected:
			fmt.Fprintf(c.out, "event: %s, error: %d\n", ev.Type, ev.Status)
			c.end(n, stepConnect, true)
		case cm.EventDisconnected:
			c.end(n, stepDisconnect, false)
		}
	}
}

// destroy destroys the IDs (the last step) and the CQs.
func (c *client) destroy() {
	fmt.Fprintln(c.out, "destroying id")
	c.times[stepDestroy][0] = time.Now()
	for i := range c.nodes {
		n := &c.nodes[i]
		n.times[stepDestroy][0] = time.Now()
		if n.id != nil {
			n.id.Destroy()
		}
		n.times[stepDestroy][1] = time.Now()
		if n.cq != nil {
			n.cq.Destroy()
		}
	}
	c.times[stepDestroy][1] = time.Now()
}

// show prints cmtime's table: per step the total time, the slowest and
// fastest connection, and the total per connection.
func (c *client) show() {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintln(c.out, "step              total ms     max ms     min us  us / conn")
	for s := 0; s < steps; s++ {
		if s == stepBind && !c.src.IsValid() {
			continue
		}
		maxUS, minUS := 0.0, 999999999.0
		for i := range c.nodes {
			t := &c.nodes[i].times[s]
			if t[0].IsZero() || t[1].IsZero() {
				continue
			}
			us := float64(t[1].Sub(t[0])) / 1e3
			maxUS, minUS = max(maxUS, us), min(minUS, us)
		}
		us := float64(c.times[s][1].Sub(c.times[s][0])) / 1e3
		fmt.Fprintf(c.out, "%-13s: %11.2f%11.2f%11.2f%11.2f\n", stepNames[s], us/1000, maxUS/1000, minUS, us/float64(len(c.nodes)))
	}
}
