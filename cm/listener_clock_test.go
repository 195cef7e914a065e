package cm

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/clock/clocktest"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

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
	fc := clocktest.NewFake(time.Unix(1e9, 0))
	n := netSeq.Add(1)
	ca := pipe.Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.1:4791", 100+n/250, n%250)), Seed: uint64(n)}
	cb := pipe.Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.2:4791", 100+n/250, n%250)), Seed: uint64(n) + 7}
	cfg := &Config{Timeout: 30 * time.Second, MaxRetries: 15, TimeWait: 50 * time.Millisecond}
	p := newPairWith(t, ca, cb, verbs.Config{Name: "pa"}, verbs.Config{Name: "pb", Clock: fc}, cfg)
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
