package cm

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/internal/spooftest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
	"github.com/softroce/softroce/wire"
)

// spoofREQ is a well-formed rdma_cm REQ for dst:port from peer, an address
// nobody answers from: its REP goes nowhere.
func spoofREQ(peer, dst netip.Addr, port uint16, comm uint32) []byte {
	hdr := mad.CMAHeader{SrcPort: uint16(40000 + comm%20000), Src: peer, Dst: dst}
	pd, _ := hdr.Append(nil)
	m := mad.REQ{Header: mad.NewHeader(uint64(comm)), LocalCommID: comm, ServiceID: mad.ServiceID(mad.PortSpaceTCP, port),
		LocalQPN: 0x100 + comm&0xFFFF, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		TransportType: mad.TransportRC, StartingPSN: comm & wire.PSNMask, LocalCMResponseTimeout: 20, RetryCount: 7,
		PKey: wire.DefaultPKey, PathMTU: wire.MTU1024, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: mad.Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: verbs.GIDFromAddr(peer),
			RemoteGID: verbs.GIDFromAddr(dst), HopLimit: 64, LocalACKTimeout: 19},
		PrivateData: pd}
	b, err := m.Append(nil)
	if err != nil {
		panic(err)
	}
	return b
}

// TestSpoofedREQFlood: REQs from addresses that never send the RTU do not
// keep a real client out, and every resource the listener and
// Options.Prepare made for them is released. The CM timers are long, as in
// production: the spoofed connections' REPs would be resent for 16 × 1 s.
//   - evict: 256 spoofed REQs (two backlogs' worth); the real Dial gets
//     through at once (the oldest half-open connection makes room), not
//     after the spoofed REPs' retries run out (32 s).
//   - expire: half-open connections are dropped after HalfOpenTimeout,
//     long before the CM gives up on them.
func TestSpoofedREQFlood(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		timeout time.Duration
		dial    bool
	}{
		{"evict", 256, time.Minute, true},
		{"expire", 20, 300 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := &Config{Timeout: time.Second, MaxRetries: 15, TimeWait: 50 * time.Millisecond}
				p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
				pd, err := p.db.AllocPD()
				if err != nil {
					t.Fatal(err)
				}
				mrs0 := p.db.Stats().MRs.Load()
				var prepared, released atomic.Int64
				opts := &Options{PD: pd, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}, HalfOpenTimeout: tc.timeout,
					Prepare: func(c *Conn) error {
						prepared.Add(1)
						mr, err := c.PD.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
						if err != nil {
							return err
						}
						c.ID.Context = mr // as an application keeps its buffers
						return nil
					},
					Release: func(c *Conn) {
						released.Add(1)
						if mr, ok := c.ID.Context.(*verbs.MR); ok {
							if err := mr.Deregister(); err != nil {
								t.Errorf("deregister: %v", err)
							}
						}
					},
				}
				l, err := Listen(p.addrB().String()+":7300", opts)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				for i := range tc.n {
					peer := netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)})
					p.ab.input(peer, spoofREQ(peer, p.addrB(), 7300, uint32(0x10000+i)))
				}
				if tc.dial {
					// A generous bound for a loaded machine, well below 32 s.
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					acc := make(chan *Conn, 1)
					go func() {
						c, err := l.Accept(ctx)
						if err != nil {
							t.Errorf("accept: %v", err)
						}
						acc <- c
					}()
					c, err := Dial(ctx, p.addrB().String()+":7300", nil)
					if err != nil {
						t.Fatalf("dial behind %d spoofed REQs: %v (half-open drops %d)", tc.n, err, l.HalfOpenDrops.Load())
					}
					c.Close()
					if sc := <-acc; sc != nil {
						if err := sc.Close(); err != nil {
							t.Errorf("close: %v", err)
						}
					}
				} else {
					// Dropped after 300 ms, before the CM gives up (16 s).
					waitFor(t, 8*time.Second, "the half-open connections to expire", func() bool {
						return l.HalfOpenDrops.Load() == uint64(tc.n) && released.Load() == prepared.Load()
					})
				}
				l.Close()
				if got, want := released.Load(), prepared.Load(); got != want || want < int64(tc.n)/2 {
					t.Errorf("Release called %d times for %d Prepare calls", got, want)
				}
				if got := p.db.Stats().MRs.Load(); got != mrs0 {
					t.Errorf("MRs on the listener's device: %d, want %d", got, mrs0)
				}
				// The PD frees only if no QP or MR of any connection is left on it.
				if err := pd.Dealloc(); err != nil {
					t.Errorf("the listener's PD still holds resources: %v", err)
				}
				waitFor(t, 10*time.Second, "the CM to forget the connections", func() bool { return p.ab.IDs() == 0 })
			})
		})
	}
}

// TestHalfOpenEvictsOldest: a listening ID keeps at most SetHalfOpen
// connections waiting for their RTU. Accepting one more drops the oldest at
// once, however young: its peer gets a REJ (Timeout), the application
// UNREACHABLE (-ETIMEDOUT) as when a REP's resends run out, and the agent
// forgets it (no time-wait). From half the bound on, a REP is resent once
// instead of as often as the REQ asks (5 times here), and Stats count both.
func TestHalfOpenEvictsOldest(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 400 * time.Millisecond // no resend while the three are accepted
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	// The requests come from A's address, whose CM knows none of them
	// (it drops the REPs): the pipe carries nothing to other addresses.
	var rejs atomic.Value // the REJs B sends, by the comm ID of the request
	rejs.Store(map[uint32]mad.REJ{})
	p.pb.SetFilter(func(lp *link.Packet) pipe.Verdict {
		var w wire.Packet
		if w.Parse(lp.Bytes()) == nil && w.BTH.DestQP == 1 {
			var r mad.REJ
			if h, err := mad.ParseHeader(w.Payload); err == nil && h.AttrID == mad.AttrREJ && r.Parse(w.Payload) == nil {
				m := maps.Clone(rejs.Load().(map[uint32]mad.REJ))
				m[r.RemoteCommID] = r
				rejs.Store(m)
			}
		}
		return pipe.Pass
	})
	sch := NewEventChannel()
	defer sch.Close()
	lid, _ := sch.CreateID(nil, mad.PortSpaceTCP)
	if err := lid.BindAddr(netip.AddrPortFrom(p.addrB(), 7320)); err != nil {
		t.Fatal(err)
	}
	lid.SetHalfOpen(2)
	if err := lid.Listen(8); err != nil {
		t.Fatal(err)
	}
	defer lid.Destroy()
	st := p.ab.Stats()
	var ids []*ID
	for i := range 3 {
		p.ab.input(p.addrA(), spoofREQ(p.addrA(), p.addrB(), 7320, uint32(0x30000+i)))
		id := expect(t, sch, EventConnectRequest).ID
		defer id.Destroy()
		if err := id.Accept(&ConnParam{QPNum: uint32(0x200 + i)}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	ev := expect(t, sch, EventUnreachable)
	if ev.ID != ids[0] || ev.Status != -int(syscall.ETIMEDOUT) || ids[0].State() != "IDLE" {
		t.Errorf("UNREACHABLE for request %p status %d, want the oldest (%p, state %s) and %d",
			ev.ID, ev.Status, ids[0], ids[0].State(), -int(syscall.ETIMEDOUT))
	}
	var r mad.REJ
	waitFor(t, 5*time.Second, "the REJ", func() bool {
		var ok bool
		r, ok = rejs.Load().(map[uint32]mad.REJ)[0x30000]
		return ok
	})
	if r.Reason != mad.RejTimeout || r.LocalCommID != ids[0].localComm {
		t.Errorf("REJ to the dropped request's peer: %+v, want reason Timeout", r)
	}
	if got := st.HalfOpenEvicted.Load(); got != 1 {
		t.Errorf("HalfOpenEvicted %d, want 1", got)
	}
	if got := p.ab.IDs(); got != 2 {
		t.Errorf("the agent knows %d IDs, want the 2 half-open ones (the dropped one forgotten)", got)
	}
	// Under pressure from the second on: one resend each, then UNREACHABLE.
	if got := st.HalfOpenShortREPs.Load(); got != 2 || ids[0].passive.shortREP || !ids[1].passive.shortREP || !ids[2].passive.shortREP {
		t.Errorf("HalfOpenShortREPs %d, want 2 (the second and third REP)", got)
	}
	for range 2 {
		if ev := expect(t, sch, EventUnreachable); ev.ID != ids[1] && ev.ID != ids[2] {
			t.Errorf("UNREACHABLE for %p", ev.ID)
		}
	}
	if got := st.Retransmits.Load(); got != 2 {
		t.Errorf("%d REPs resent, want 2 (one each for the two under pressure)", got)
	}
	waitFor(t, 5*time.Second, "the agent to forget the requests", func() bool { return p.ab.IDs() == 0 })
}

// TestSpoofedREQFloodRealDial: under a sustained flood of spoofed REQs
// (valid MADs over loopback UDP, valid ICRC, from addresses that never
// answer the REP), 100 and 1,000 a second, a real Dial connects within 2 s
// every time, with Linux's CM timing (a REQ dropped or kept waiting would be
// resent only after 6.1 s); the listener's goroutines and the agent's IDs
// stay bounded, and Stats say what was dropped.
func TestSpoofedREQFloodRealDial(t *testing.T) {
	for _, rate := range floodRates() {
		t.Run(strconv.Itoa(rate), func(t *testing.T) {
			n := rand.IntN(200) + 20
			net := fmt.Sprintf("127.%d.%d.", n, rand.IntN(250)+1)
			srv, cli := netip.MustParseAddr(net+"1"), netip.MustParseAddr(net+"2")
			ds, err := verbs.OpenUDP(srv.String()+":4791", &verbs.Config{Name: "srv"})
			if err != nil {
				t.Skipf("cannot open a UDP device on %s: %v", srv, err)
			}
			defer ds.Close()
			dc, err := verbs.OpenUDP(cli.String()+":4791", &verbs.Config{Name: "cli"})
			if err != nil {
				t.Skipf("cannot open a UDP device on %s: %v", cli, err)
			}
			defer dc.Close()
			as, err := NewAgent(ds, nil) // Linux's timing
			if err != nil {
				t.Fatal(err)
			}
			defer as.Close()
			ac, err := NewAgent(dc, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ac.Close()
			l, err := as.Listen(srv.String()+":7330", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait() // after cancel (deferred later, run first)
			defer cancel()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := l.Accept(ctx)
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			var peers []netip.Addr
			for i := range 32 {
				peers = append(peers, netip.MustParseAddr(net+strconv.Itoa(10+i)))
			}
			f, err := spooftest.New(srv, peers)
			if err != nil {
				t.Skipf("cannot send from spoofed loopback addresses: %v", err)
			}
			defer f.Close() // after the flood stops
			fctx, stop := context.WithCancel(ctx)
			flooding := make(chan struct{})
			go func() {
				defer close(flooding)
				f.Run(fctx, rate, func(peer netip.Addr, i int) []byte { return spoofREQ(peer, srv, 7330, uint32(0x40000+i)) })
			}()
			defer func() { stop(); <-flooding }()
			g0 := runtime.NumGoroutine()
			// Past the half-open bound (Options.HalfOpen, default 128), and
			// a second of flood at least.
			waitFor(t, 10*time.Second, "the flood to fill the listener", func() bool { return f.Sent() >= max(DefaultHalfOpen+20, rate) })
			st := as.Stats()
			for i := range 3 {
				t0 := time.Now()
				dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
				c, err := ac.Dial(dctx, srv.String()+":7330", nil)
				dcancel()
				if err != nil {
					l.mu.Lock()
					waiting, half, ready := len(l.waiting), len(l.pending), len(l.ready)
					l.mu.Unlock()
					t.Fatalf("dial %d under %d spoofed REQ/s (%d sent): %v after %v; backlog drops %d, half-open evicted %d; "+
						"the listener: %d requests waiting, %d half-open, %d ready; %d IDs, %d MADs received, %d send errors, device drops %d (no receive WQE), %d send errors; "+
						"client: %d MADs sent, %d received, %d dropped unexpected, %d send errors, device drops %d (no receive WQE)",
						i, rate, f.Sent(), err, time.Since(t0), st.DropBacklog.Load(), st.HalfOpenEvicted.Load(),
						waiting, half, ready, as.IDs(), st.MADsReceived.Load(), st.SendErrors.Load(), ds.Stats().DropNoRecv.Load(), ds.Stats().TxErrors.Load(),
						ac.Stats().MADsSent.Load(), ac.Stats().MADsReceived.Load(), ac.Stats().DropUnexpected.Load(),
						ac.Stats().SendErrors.Load(), dc.Stats().DropNoRecv.Load())
				}
				t.Logf("dial %d: %v (%d spoofed REQs sent, %d IDs)", i, time.Since(t0).Round(time.Millisecond), f.Sent(), as.IDs())
				c.Close()
				// The connections with a QP, half-open ones (Options.HalfOpen,
				// 128) and a few being dropped; the IDs, those and the
				// requests waiting (8 × Backlog) and a few closing.
				l.mu.Lock()
				qps := len(l.pending)
				l.mu.Unlock()
				if qps > DefaultHalfOpen+8 {
					t.Errorf("the listener holds %d half-open connections", qps)
				}
				if ids := as.IDs(); ids > DefaultHalfOpen+requestsPerBacklog*128+8 {
					t.Errorf("the listener's agent holds %d IDs", ids)
				}
				if g := runtime.NumGoroutine(); g > g0+4 {
					t.Errorf("%d goroutines, %d when the flood began", g, g0)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if st.HalfOpenEvicted.Load() == 0 || st.HalfOpenShortREPs.Load() == 0 {
				t.Errorf("no half-open connection dropped (%d) or REP sent under pressure (%d)",
					st.HalfOpenEvicted.Load(), st.HalfOpenShortREPs.Load())
			}
			t.Logf("%d spoofed REQs: %d half-open dropped for newer ones, %d REPs under pressure, %d dropped (backlog), %d REJs; device: %d send errors, %d drops (no receive WQE)",
				f.Sent(), st.HalfOpenEvicted.Load(), st.HalfOpenShortREPs.Load(), st.DropBacklog.Load(), st.RejectsSent.Load(),
				ds.Stats().TxErrors.Load(), ds.Stats().DropNoRecv.Load())
		})
	}
}

// floodRates are the spoofed REQ rates of the flood tests: 100 and 1,000 a
// second, and 100 and 300 under the race detector, which slows the CM's
// handling of each MAD several times over (past its rate, REQs overflow
// the backlog and a real one waits for its 6.1 s resend).
func floodRates() []int {
	if raceEnabled {
		return []int{100, 300}
	}
	return []int{100, 1000}
}
