package cm

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
)

// madLoss returns a pipe filter dropping a fraction of the GSI (QP1) datagrams.
func madLoss(rate float64, seed uint64) pipe.Filter {
	rng := rand.New(rand.NewPCG(seed, 1))
	return func(p *link.Packet) pipe.Verdict {
		b := p.Bytes()
		if len(b) >= 12 && b[5] == 0 && b[6] == 0 && b[7] == 1 && rng.Float64() < rate {
			return pipe.Drop
		}
		return pipe.Pass
	}
}

// TestMADLoss: with 10 % of the CM MADs lost each way, every connect
// completes or fails with the right event, and every disconnect finishes.
func TestMADLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.MaxRetries = 8
		p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
		p.pa.SetFilter(madLoss(0.10, 1))
		p.pb.SetFilter(madLoss(0.10, 2))
		ctx := ctxT(t, 60*time.Second)
		l, err := Listen(p.addrB().String()+":7100", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept(ctx)
				if err != nil {
					return
				}
				go func() {
					select {
					case <-c.Disconnected():
					case <-ctx.Done():
					}
					c.Close()
				}()
			}
		}()
		n := 40
		if testing.Short() {
			n = 10
		}
		okN := 0
		for i := range n {
			c, err := Dial(ctx, p.addrB().String()+":7100", nil)
			if err != nil {
				var ee *EventError
				if !errors.As(err, &ee) || ee.Event != EventUnreachable {
					t.Fatalf("connect %d: %v", i, err)
				}
				continue
			}
			okN++
			c.Disconnect()
			select {
			case <-c.Disconnected():
			case <-ctx.Done():
				t.Fatalf("connect %d: no DISCONNECTED", i)
			}
			c.Close()
		}
		// UD (SIDR) under the same loss.
		lu, err := Listen(p.addrB().String()+":7101", &Options{PortSpace: mad.PortSpaceUDP})
		if err != nil {
			t.Fatal(err)
		}
		defer lu.Close()
		go func() {
			for {
				c, err := lu.Accept(ctx)
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		for i := range n / 2 {
			c, err := Dial(ctx, p.addrB().String()+":7101", &Options{PortSpace: mad.PortSpaceUDP})
			if err != nil {
				var ee *EventError
				if !errors.As(err, &ee) || ee.Event != EventUnreachable {
					t.Fatalf("UD connect %d: %v", i, err)
				}
				continue
			}
			if c.UD == nil || c.UD.QKey != mad.UDPQKey {
				t.Fatalf("UD connect %d: %+v", i, c.UD)
			}
			c.Close()
		}
		t.Logf("%d/%d connected; A: %d retransmits, %d duplicates; B: %d retransmits, %d duplicates",
			okN, n, p.aa.Stats().Retransmits.Load(), p.aa.Stats().Duplicates.Load(),
			p.ab.Stats().Retransmits.Load(), p.ab.Stats().Duplicates.Load())
		if okN < n*8/10 {
			t.Errorf("only %d of %d connects succeeded", okN, n)
		}
		waitFor(t, 10*time.Second, "all IDs released", func() bool { return p.aa.IDs() == 0 && p.ab.IDs() == 0 })
	})
}

// TestConnectCycles runs sequential connect/disconnect cycles and checks
// that IDs, goroutines and memory do not leak.
func TestConnectCycles(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	ctx := ctxT(t, 120*time.Second)
	// One PD per side: deallocating it at the end proves no QP (or AH, MR)
	// of any cycle is left (ibv_dealloc_pd's EBUSY rule).
	pdA, _ := p.da.AllocPD()
	pdB, _ := p.db.AllocPD()
	l, err := Listen(p.addrB().String()+":7200", &Options{PD: pdB})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cycle := func() {
		acc := make(chan *Conn, 1)
		go func() {
			c, err := l.Accept(ctx)
			if err != nil {
				acc <- nil
				return
			}
			acc <- c
		}()
		c, err := Dial(ctx, p.addrB().String()+":7200", &Options{PD: pdA})
		if err != nil {
			t.Fatal(err)
		}
		s := <-acc
		if s == nil {
			t.Fatal("accept failed")
		}
		c.Disconnect()
		<-s.Disconnected()
		<-c.Disconnected()
		c.Close()
		s.Close()
	}
	var m0, m1 runtime.MemStats
	for range 20 {
		cycle()
	}
	waitFor(t, 5*time.Second, "warm-up IDs released", func() bool { return p.aa.IDs() == 0 && p.ab.IDs() == 0 })
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	start := time.Now()
	for range n {
		cycle()
	}
	el := time.Since(start)
	waitFor(t, 5*time.Second, "IDs released", func() bool { return p.aa.IDs() == 0 && p.ab.IDs() == 0 })
	waitFor(t, 5*time.Second, "goroutines to settle", func() bool { return runtime.NumGoroutine() <= g0+2 })
	runtime.GC()
	runtime.ReadMemStats(&m1)
	grow := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("%d cycles in %v (%v each); heap %+d bytes; goroutines %d -> %d", n, el, el/time.Duration(n), grow, g0, runtime.NumGoroutine())
	if grow > 4<<20 {
		t.Errorf("heap grew by %d bytes over %d cycles", grow, n)
	}
	l.Close()
	if err := pdA.Dealloc(); err != nil {
		t.Errorf("client PD: %v (a QP leaked)", err)
	}
	if err := pdB.Dealloc(); err != nil {
		t.Errorf("server PD: %v (a QP leaked)", err)
	}
}

// TestConcurrentConnects: 64 clients connect to one listener at once.
func TestConcurrentConnects(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	ctx := ctxT(t, 60*time.Second)
	l, err := Listen(p.addrB().String()+":7300", &Options{Backlog: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	conns := make(chan *Conn, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(ctx, p.addrB().String()+":7300", nil)
			if err != nil {
				errs <- err
				return
			}
			conns <- c
		}()
	}
	var server []*Conn
	for range n {
		s, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		server = append(server, s)
	}
	wg.Wait()
	close(errs)
	close(conns)
	for err := range errs {
		t.Error(err)
	}
	seen := map[uint32]bool{}
	for c := range conns {
		if seen[c.QP.QPN()] {
			t.Errorf("QPN %#x twice", c.QP.QPN())
		}
		seen[c.QP.QPN()] = true
		c.Close()
	}
	for _, s := range server {
		s.Close()
	}
	if len(seen) != n {
		t.Fatalf("%d clients connected, want %d", len(seen), n)
	}
	waitFor(t, 10*time.Second, "IDs released", func() bool { return p.aa.IDs() == 0 && p.ab.IDs() == 0 })
	_ = context.Background
}

// TestListenerBacklog: with Backlog 2, six clients connect at once while
// the application accepts slowly; the requests beyond the backlog wait
// (MRAs keep their peers from timing out) and all connect.
//
// A half-open connection counts against Backlog only for rtuGrace (20 ms)
// after its REP (Options.Backlog): later it is presumed spoofed, and the
// listener admits the next request. Here every peer is real but may be
// slow to send its RTU (on a loaded machine, with the race detector, 25 ms
// was seen), so the test lengthens the grace to the test's own bound:
// every half-open connection counts, and ready + pending never exceeds
// Backlog.
func TestListenerBacklog(t *testing.T) {
	cfg := testConfig()
	cfg.ServiceTimeout = 16 // MRA: ~270 ms more per wait
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	ctx := ctxT(t, 30*time.Second)
	l, err := Listen(p.addrB().String()+":7301", &Options{Backlog: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.mu.Lock()
	l.rtuGrace = time.Minute // beyond ctx: no RTU is late
	l.mu.Unlock()
	const n = 6
	errs := make(chan error, n)
	conns := make(chan *Conn, n)
	for range n {
		go func() {
			c, err := Dial(ctx, p.addrB().String()+":7301", nil)
			if err != nil {
				errs <- err
				return
			}
			conns <- c
		}()
	}
	for i := range n {
		time.Sleep(80 * time.Millisecond) // a slow application: waiting requests outlive MRADelay (20 ms)
		l.mu.Lock()
		ready := len(l.ready) + len(l.pending)
		var half []string
		for _, c := range l.pending {
			since := "its REP on its way"
			if !c.since.IsZero() {
				since = time.Since(c.since).Round(time.Millisecond).String() + " after its REP"
			}
			half = append(half, c.ID.State()+" "+since)
		}
		l.mu.Unlock()
		if ready > 2 {
			t.Errorf("before accept %d: %d connections established or being established, beyond the backlog of 2 (half-open: %v)", i, ready, half)
		}
		s, err := l.Accept(ctx)
		if err != nil {
			t.Fatalf("accept %d: %v", i, err)
		}
		defer s.Close()
	}
	for range n {
		select {
		case err := <-errs:
			t.Fatal(err)
		case c := <-conns:
			c.Close()
		}
	}
	if p.ab.Stats().MRAsSent.Load() == 0 {
		t.Error("no MRA sent for the waiting requests")
	}
}

// TestListenerAdmitsNoRoomTwice: a request admit has taken from the
// waiting ones counts against Backlog until its connection is pending:
// another admit beside it (here the listener goroutine's, for a new
// request, while Accept's admit is in Decide) finds no room. Both took the
// same room before (ready + pending reached 3 with Backlog 2 in
// TestListenerBacklog, with no connection half-open).
func TestListenerAdmitsNoRoomTwice(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	ctx := ctxT(t, 30*time.Second)
	var decides atomic.Int32
	entered := make(chan struct{}, 8)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // before l.Close, which waits for the request in Decide
	l, err := Listen(p.addrB().String()+":7302", &Options{Backlog: 1, Decide: func(*Conn) error {
		n := decides.Add(1)
		entered <- struct{}{}
		if n == 2 {
			<-release // the second request's, taken by Accept's admit
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 4
	conns := make(chan *Conn, n)
	dial := func() {
		go func() {
			c, err := Dial(ctx, p.addrB().String()+":7302", nil)
			if err != nil {
				t.Error(err)
				return
			}
			conns <- c
		}()
	}
	listener := func(what string, cond func() bool) {
		t.Helper()
		waitFor(t, 10*time.Second, what, func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return cond()
		})
	}
	dial() // admitted at once
	<-entered
	listener("the first connection ready", func() bool { return len(l.ready) == 1 })
	dial()
	listener("1 request waiting", func() bool { return len(l.waiting) == 1 })
	dial()
	listener("2 requests waiting", func() bool { return len(l.waiting) == 2 })
	accepted := make(chan *Conn, 1)
	go func() {
		// Takes the first connection; its admit takes the second
		// request, and waits in Decide.
		s, err := l.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		accepted <- s
	}()
	<-entered
	dial() // the listener goroutine's admit, for this request, must find no room
	listener("the fourth request waiting, or the third admitted", func() bool {
		return len(l.waiting) == 2 || decides.Load() > 2
	})
	time.Sleep(100 * time.Millisecond) // had it taken the third, Decide would have been called
	if d := decides.Load(); d != 2 {
		t.Errorf("Decide called %d times with the second request's in progress, want 2: the backlog of 1 admitted two", d)
	}
	unblock()
	if s := <-accepted; s != nil {
		s.Close()
	}
	for range n - 1 {
		s, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	for range n {
		select {
		case c := <-conns:
			c.Close()
		case <-ctx.Done():
			t.Fatal("not every client connected")
		}
	}
}
