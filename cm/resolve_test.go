package cm

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
	"go.uber.org/goleak"
)

// TestResolveAddrNeighbour: with Config.Resolve, ResolveAddr reports what
// it says, and ETIMEDOUT when it does not answer within the timeout (an
// address nobody answers ARP for), as rdma_resolve_addr.
func TestResolveAddrNeighbour(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		silent := netip.MustParseAddr("10.98.0.99")
		refused := netip.MustParseAddr("10.98.0.98")
		cfg := testConfig()
		cfg.Resolve = func(ctx context.Context, src, dst netip.Addr) error {
			switch dst {
			case silent:
				<-ctx.Done()
				return ctx.Err()
			case refused:
				return syscall.EHOSTUNREACH
			}
			return nil
		}
		p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
		for _, tc := range []struct {
			dst    netip.Addr
			want   EventType
			status int
		}{
			{p.addrB(), EventAddrResolved, 0},
			{silent, EventAddrError, -int(syscall.ETIMEDOUT)},
			{refused, EventAddrError, -int(syscall.EHOSTUNREACH)},
		} {
			ch := NewEventChannel()
			id, _ := ch.CreateID(nil, mad.PortSpaceTCP)
			if err := id.ResolveAddr(netip.AddrPortFrom(p.addrA(), 0), netip.AddrPortFrom(tc.dst, 7000), 200*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			ev := expect(t, ch, tc.want)
			if ev.Status != tc.status {
				t.Errorf("%v: status %d, want %d", tc.dst, ev.Status, tc.status)
			}
			if tc.want == EventAddrError {
				// The ID may try again (perftest resolves up to 10 times).
				if err := id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(tc.dst, 7000), 50*time.Millisecond); err != nil {
					t.Errorf("second resolve: %v", err)
				} else {
					expect(t, ch, EventAddrError)
				}
			}
			id.Destroy()
			ch.Close()
		}
		// Dial reports it as an *EventError.
		_, err := Dial(ctxT(t, 10*time.Second), netip.AddrPortFrom(silent, 7000).String(), &Options{Src: p.addrA()})
		var ee *EventError
		if !errors.As(err, &ee) || ee.Event != EventAddrError || !errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("dial: %v", err)
		}
	})
}

// TestPassiveREPTiming: with Linux's default timing, a passive side resends
// an unanswered REP as ib_cm does (kernel rxe measured: every 4.35 s for
// rdma_cm's response timeout 20, max_cm_retries times), not on the active
// side's 6.144 s × 16 budget: here the REQ asks for 64 ms and 2 retries.
func TestPassiveREPTiming(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, &Config{})
	ch, _ := listenAt(t, netip.AddrPortFrom(p.addrB(), 7400))
	peer := netip.MustParseAddr("10.97.0.5")
	m := spoofREQ(peer, p.addrB(), 7400, 0x777)
	var req mad.REQ
	if err := req.Parse(m); err != nil {
		t.Fatal(err)
	}
	req.LocalCMResponseTimeout, req.MaxCMRetries = 14, 2
	m, _ = req.Append(nil)
	p.ab.input(peer, m)
	ev := expect(t, ch, EventConnectRequest)
	if err := ev.ID.Accept(&ConnParam{QPNum: 0x99}); err != nil {
		t.Fatal(err)
	}
	// ~1 s expected; the active side's timing would take 3 × 6.144 s.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev2, err := ch.Get(ctx)
	if err != nil {
		t.Fatalf("no UNREACHABLE for the unanswered REP: %v (retransmits %d)", err, p.ab.Stats().Retransmits.Load())
	}
	if ev2.Type != EventUnreachable || ev2.Status != -int(syscall.ETIMEDOUT) {
		t.Errorf("got %v status %d", ev2.Type, ev2.Status)
	}
	if got := p.ab.Stats().Retransmits.Load(); got != 2 {
		t.Errorf("REP resent %d times, want the REQ's 2", got)
	}
}

// TestResolveAddrRace: a second ResolveAddr while the lookup finishes
// reads the ID's state as the lookup's goroutine writes it (under -race:
// both under the agent's lock), and is refused.
func TestResolveAddrRace(t *testing.T) {
	cfg := testConfig()
	cfg.Resolve = func(ctx context.Context, src, dst netip.Addr) error { return nil }
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	for range 20 {
		ch := NewEventChannel()
		id, _ := ch.CreateID(nil, mad.PortSpaceTCP)
		dst := netip.AddrPortFrom(p.addrB(), 7000)
		if err := id.ResolveAddr(netip.AddrPortFrom(p.addrA(), 0), dst, time.Second); err != nil {
			t.Fatal(err)
		}
		for range 200 {
			if err := id.ResolveAddr(netip.AddrPort{}, dst, time.Second); !errors.Is(err, ErrState) {
				t.Fatalf("ResolveAddr during or after a lookup: %v, want ErrState", err)
			}
		}
		expect(t, ch, EventAddrResolved)
		id.Destroy()
		ch.Close()
	}
}

// TestResolveAddrEnds: Destroy, or the agent's Close, ends a lookup that
// would run for its whole timeout: no goroutine is left, no event posted.
func TestResolveAddrEnds(t *testing.T) {
	for _, how := range []string{"destroy", "agent-close"} {
		t.Run(how, func(t *testing.T) {
			silent := netip.MustParseAddr("10.98.0.99")
			cfg := testConfig()
			cfg.Resolve = func(ctx context.Context, src, dst netip.Addr) error {
				<-ctx.Done()
				return ctx.Err()
			}
			p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
			ch := NewEventChannel()
			defer ch.Close()
			before := goleak.IgnoreCurrent()
			id, _ := ch.CreateID(nil, mad.PortSpaceTCP)
			if err := id.ResolveAddr(netip.AddrPortFrom(p.addrA(), 0), netip.AddrPortFrom(silent, 7000), time.Hour); err != nil {
				t.Fatal(err)
			}
			if how == "destroy" {
				id.Destroy()
			} else {
				p.aa.Close()
			}
			if err := goleak.Find(before); err != nil {
				t.Fatalf("the lookup outlives %s: %v", how, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if ev, err := ch.Get(ctx); err == nil {
				t.Errorf("event after %s: %v", how, ev.Type)
			}
			id.Destroy()
		})
	}
}

// TestResolveAddrResolved: with Config.Resolved saying dst needs no
// lookup, ResolveAddr posts ADDR_RESOLVED before it returns and never
// calls Resolve; an address it does not vouch for still goes through
// Resolve.
func TestResolveAddrResolved(t *testing.T) {
	looked := make(chan netip.Addr, 4)
	near := netip.MustParseAddr("10.98.0.97")
	cfg := testConfig()
	cfg.Resolve = func(ctx context.Context, src, dst netip.Addr) error {
		looked <- dst
		return nil
	}
	var vouched netip.Addr
	cfg.Resolved = func(src, dst netip.Addr) bool { return dst == vouched }
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	vouched = p.addrB()
	ch := NewEventChannel()
	defer ch.Close()
	id, _ := ch.CreateID(nil, mad.PortSpaceTCP)
	defer id.Destroy()
	if err := id.ResolveAddr(netip.AddrPortFrom(p.addrA(), 0), netip.AddrPortFrom(p.addrB(), 7000), time.Second); err != nil {
		t.Fatal(err)
	}
	if ev, ok := ch.TryGet(); !ok || ev.Type != EventAddrResolved {
		t.Fatalf("no ADDR_RESOLVED waiting when ResolveAddr returned: %v %v", ev, ok)
	}
	select {
	case dst := <-looked:
		t.Fatalf("Resolve called for %v", dst)
	default:
	}
	id2, _ := ch.CreateID(nil, mad.PortSpaceTCP)
	defer id2.Destroy()
	if err := id2.ResolveAddr(netip.AddrPortFrom(p.addrA(), 0), netip.AddrPortFrom(near, 7000), time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, EventAddrResolved)
	if dst := <-looked; dst != near {
		t.Errorf("Resolve asked for %v, want %v", dst, near)
	}
}
