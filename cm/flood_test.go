package cm

import (
	"context"
	"maps"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softroce/softroce/cm/mad"
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
	if got := st.HalfOpenShortREPs.Load(); got != 2 || ids[0].shortREP || !ids[1].shortREP || !ids[2].shortREP {
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
