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

// TestListenerTimersOnAgentClock: the listener's half-open timers (drop a
// connection whose RTU is late; admit a waiting request once the oldest
// half-open one may be dropped) run on the agent's clock, so a fake clock
// drives them, and Close stops them. The spoofed REQs ask for REP resends
// every ~137 s (response timeout 25), beyond the times advanced here.
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
	armed := func() clock.Timer { l.mu.Lock(); defer l.mu.Unlock(); return l.admitTimer }

	// Expire: the RTU is late by the fake clock's minute.
	spoof(1)
	waitFor(t, 10*time.Second, "the first half-open connection", func() bool { return halfOpen() == 1 })
	fc.Advance(time.Minute + time.Second)
	waitFor(t, 10*time.Second, "the late connection to be dropped", func() bool {
		return l.HalfOpenDrops.Load() == 1 && halfOpen() == 0
	})

	// Admit: a second request waits behind a half-open connection younger
	// than the agent's Timeout; the fake clock's 30 s make room for it.
	spoof(2)
	waitFor(t, 10*time.Second, "the second half-open connection", func() bool { return halfOpen() == 1 })
	spoof(3)
	waitFor(t, 10*time.Second, "the admit timer", func() bool { return armed() != nil })
	fc.Advance(31 * time.Second)
	waitFor(t, 10*time.Second, "the oldest connection to make room", func() bool {
		return l.HalfOpenDrops.Load() == 2 && halfOpen() == 1
	})

	// Close stops an armed admit timer.
	spoof(4)
	waitFor(t, 10*time.Second, "the admit timer again", func() bool { return armed() != nil })
	tm := armed()
	l.Close()
	if tm.Stop() {
		t.Error("the admit timer is still armed after Close")
	}
}
