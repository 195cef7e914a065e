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

// TestListenerTimersOnAgentClock: the listener's half-open timer (drop a
// connection whose RTU is late) runs on the agent's clock, so a fake clock
// drives it; a request beyond Options.HalfOpen drops the oldest half-open
// connection at once, however young, with no timer; Close stops the
// timers. The spoofed REQs ask for REP resends every ~137 s (response
// timeout 25), beyond the times advanced here.
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
	l, err := Listen(p.addrB().String()+":7310", &Options{PD: pd, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4},
		HalfOpen: 1, Backlog: 4, HalfOpenTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	spoof := func(i int) {
		peer := netip.AddrFrom4([4]byte{10, 96, 0, byte(i)})
		var req mad.REQ
		if err := req.Parse(spoofREQ(peer, p.addrB(), 7310, uint32(0x20000+i))); err != nil {
			t.Fatal(err)
		}
		req.LocalCMResponseTimeout = 25
		m, _ := req.Append(nil)
		p.ab.input(peer, m)
	}
	halfOpen := func() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.pending) }
	timer := func() clock.Timer {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, c := range l.pending {
			return c.halfOpen
		}
		return nil
	}

	// Expire: the RTU is late by the fake clock's minute.
	spoof(1)
	waitFor(t, 10*time.Second, "the first half-open connection", func() bool { return halfOpen() == 1 && timer() != nil })
	fc.Advance(time.Minute + time.Second)
	waitFor(t, 10*time.Second, "the late connection to be dropped", func() bool {
		return l.HalfOpenDrops.Load() == 1 && halfOpen() == 0
	})

	// Evict: a second request drops the half-open connection in its way
	// at once, though the fake clock stands still.
	spoof(2)
	waitFor(t, 10*time.Second, "the second half-open connection", func() bool { return halfOpen() == 1 })
	spoof(3)
	waitFor(t, 10*time.Second, "the oldest connection to make room", func() bool {
		return l.HalfOpenDrops.Load() == 2 && p.ab.Stats().HalfOpenEvicted.Load() == 1 && halfOpen() == 1
	})

	// Close stops the half-open timer.
	tm := timer()
	l.Close()
	if tm == nil || tm.Stop() {
		t.Error("the half-open timer is still armed after Close")
	}
}
