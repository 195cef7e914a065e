package cm

import (
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/clock/clocktest"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// fakeClockPair is a pipe pair whose passive side (b) runs on a fake
// clock, with Linux's CM timeout and retries.
func fakeClockPair(t *testing.T) (*pair, *clocktest.Fake) {
	t.Helper()
	fc := clocktest.NewFake(time.Unix(1e9, 0))
	n := netSeq.Add(1)
	ca := pipe.Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.1:4791", 100+n/250, n%250)), Seed: uint64(n)}
	cb := pipe.Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.2:4791", 100+n/250, n%250)), Seed: uint64(n) + 7}
	cfg := &Config{Timeout: 30 * time.Second, MaxRetries: 15, TimeWait: 50 * time.Millisecond}
	return newPairWith(t, ca, cb, verbs.Config{Name: "pa"}, verbs.Config{Name: "pb", Clock: fc}, cfg), fc
}

// TestListenerTimersOnAgentClock: the listener's timers run on the agent's
// clock, so a fake clock drives them, and Close stops them:
//   - expire: a connection whose RTU is late is dropped;
//   - evict: a request beyond Options.HalfOpen drops the oldest half-open
//     connection at once, however young;
//   - grace: a half-open connection counts against Backlog for rtuGrace
//     only: a request waits behind it until then, and is admitted after.
//
// The spoofed REQs ask for REP resends every ~137 s (response timeout 25),
// beyond the times advanced here.
func TestListenerTimersOnAgentClock(t *testing.T) {
	p, fc := fakeClockPair(t)
	pd, err := p.db.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	listen := func(port int, o Options) *Listener {
		o.PD, o.Cap, o.HalfOpenTimeout = pd, verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}, time.Minute
		l, err := Listen(fmt.Sprintf("%v:%d", p.addrB(), port), &o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	spoof := func(port, i int) {
		peer := netip.AddrFrom4([4]byte{10, 96, 0, byte(i)})
		var req mad.REQ
		if err := req.Parse(spoofREQ(peer, p.addrB(), uint16(port), uint32(0x20000+i))); err != nil {
			t.Fatal(err)
		}
		req.LocalCMResponseTimeout = 25
		m, _ := req.Append(nil)
		p.ab.input(peer, m)
	}
	halfOpen := func(l *Listener) int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.pending) }
	timer := func(l *Listener) clock.Timer {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, c := range l.pending {
			return c.halfOpen
		}
		return nil
	}
	armed := func(l *Listener) clock.Timer { l.mu.Lock(); defer l.mu.Unlock(); return l.admitTimer }

	// Expire: the RTU is late by the fake clock's minute.
	l := listen(7310, Options{HalfOpen: 1, Backlog: 4})
	spoof(7310, 1)
	waitFor(t, 10*time.Second, "the first half-open connection", func() bool { return halfOpen(l) == 1 && timer(l) != nil })
	fc.Advance(time.Minute + time.Second)
	waitFor(t, 10*time.Second, "the late connection to be dropped", func() bool {
		return l.HalfOpenDrops.Load() == 1 && halfOpen(l) == 0
	})

	// Evict: a second request drops the half-open connection in its way
	// at once, though the fake clock stands still.
	spoof(7310, 2)
	waitFor(t, 10*time.Second, "the second half-open connection", func() bool { return halfOpen(l) == 1 })
	spoof(7310, 3)
	waitFor(t, 10*time.Second, "the oldest connection to make room", func() bool {
		return l.HalfOpenDrops.Load() == 2 && p.ab.Stats().HalfOpenEvicted.Load() == 1 && halfOpen(l) == 1
	})

	// Grace: with Backlog 1, a request waits while the half-open
	// connection is younger than rtuGrace, then joins it.
	g := listen(7311, Options{HalfOpen: 4, Backlog: 1})
	spoof(7311, 4)
	waitFor(t, 10*time.Second, "a half-open connection", func() bool { return halfOpen(g) == 1 && timer(g) != nil })
	spoof(7311, 5)
	waitFor(t, 10*time.Second, "the admit timer", func() bool { return armed(g) != nil })
	if halfOpen(g) != 1 {
		t.Fatalf("%d half-open connections before rtuGrace, want 1", halfOpen(g))
	}
	fc.Advance(rtuGrace)
	waitFor(t, 10*time.Second, "the waiting request to be admitted", func() bool { return halfOpen(g) == 2 && armed(g) == nil })

	// Close stops the timers.
	spoof(7311, 6)
	waitFor(t, 10*time.Second, "the admit timer again", func() bool { return armed(g) != nil })
	tms := []clock.Timer{timer(l), timer(g), armed(g)}
	l.Close()
	g.Close()
	for i, tm := range tms {
		if tm == nil || tm.Stop() {
			t.Errorf("timer %d is still armed after Close", i)
		}
	}
}

// TestHalfOpenDefaultGrace: an rdma_cm-style listener with the default
// half-open bound (SetHalfOpen not called: the C library's) keeps a burst
// of accepted requests beyond the bound while their RTUs may still come
// (halfOpenGrace), with no UNREACHABLE on any of them; once they are that
// old, the next accept drops the oldest beyond the bound, as an explicit
// bound does at once. Stock cmtime's server crashed on the UNREACHABLE of
// a connection dropped from its own burst of 2,000 (its RTUs lagging).
func TestHalfOpenDefaultGrace(t *testing.T) {
	p, fc := fakeClockPair(t)
	sch := NewEventChannel()
	defer sch.Close()
	lid, _ := sch.CreateID(nil, mad.PortSpaceTCP)
	if err := lid.BindAddr(netip.AddrPortFrom(p.addrB(), 7340)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(1); err != nil { // default bound: DefaultHalfOpen
		t.Fatal(err)
	}
	defer lid.Destroy()
	accept := func(i int) *ID {
		t.Helper()
		peer := netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)})
		var req mad.REQ
		if err := req.Parse(spoofREQ(peer, p.addrB(), 7340, uint32(0x50000+i))); err != nil {
			t.Fatal(err)
		}
		req.LocalCMResponseTimeout = 25 // REP resends beyond the times advanced here
		m, _ := req.Append(nil)
		p.ab.input(peer, m)
		id := expect(t, sch, EventConnectRequest).ID
		t.Cleanup(func() { id.Destroy() })
		if err := id.Accept(&ConnParam{QPNum: uint32(0x400 + i)}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	const burst = DefaultHalfOpen + 10
	for i := range burst {
		accept(i)
	}
	st := p.ab.Stats()
	if got := st.HalfOpenEvicted.Load(); got != 0 {
		t.Fatalf("%d of a burst of %d half-open connections dropped within halfOpenGrace, want 0", got, burst)
	}
	if sch.Len() != 0 {
		ev, _ := sch.TryGet()
		t.Fatalf("event %v during the burst", ev.Type)
	}
	fc.Advance(halfOpenGrace)
	accept(burst)
	if got := st.HalfOpenEvicted.Load(); got != 11 {
		t.Errorf("HalfOpenEvicted %d after the grace, want 11 (down to the bound of %d)", got, DefaultHalfOpen)
	}
	for range 11 {
		if ev := expect(t, sch, EventUnreachable); ev.Status != -int(syscall.ETIMEDOUT) {
			t.Errorf("UNREACHABLE status %d", ev.Status)
		}
	}
}
