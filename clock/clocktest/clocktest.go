// Package clocktest provides Fake, a clock.Clock moved by hand, for
// deterministic tests of timer-driven code: pass it as verbs.Config.Clock
// and a device's retransmit and RNR timers (and its CM agent's MAD
// retransmissions) fire only when the test calls Advance. It is meant for
// tests only.
package clocktest

import (
	"sync"
	"time"

	"github.com/softroce/softroce/clock"
)

// Fake is a manual clock.Clock: time stands still until Advance moves it,
// and timers fire (synchronously, in deadline order, in Advance's
// goroutine) when it passes their deadline.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a manual clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (c *Fake) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// AfterFunc starts a timer that calls f once the clock passes now+d.
func (c *Fake) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, f: f, when: c.now.Add(d), active: true}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d, firing due timers.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if t.active && !t.when.After(end) && (next == nil || t.when.Before(next.when)) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		if next.when.After(c.now) {
			c.now = next.when
		}
		next.active = false
		c.mu.Unlock()
		next.f()
	}
}

// Stall moves the clock forward by d without firing the timers that come
// due: the process did not run for d (a loaded host, a descheduled VM).
// The next Advance fires them, late, with the clock past their deadline.
func (c *Fake) Stall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Until reports how long from now timer t, which c started, fires, and
// whether it is armed: false once it was stopped or has fired (Advance
// disarms a timer before it calls its function), or if c did not start it.
func (c *Fake) Until(t clock.Timer) (time.Duration, bool) {
	ft, ok := t.(*fakeTimer)
	if !ok || ft.c != c {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return ft.when.Sub(c.now), ft.active
}

type fakeTimer struct {
	c      *Fake
	f      func()
	when   time.Time
	active bool
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active, t.when = true, t.c.now.Add(d)
	return was
}
