package verbs

import (
	"sync"
	"time"
)

// Clock is the time source of the device's timers (retransmit, RNR). Tests
// may inject a fake one; the default is the real clock.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once, after d, in a goroutine other than the
	// caller's (RealClock: a new one per call).
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer started by a Clock.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset changes the timer to fire after d (from now); it reports
	// whether the timer had been active.
	Reset(d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(d, f)
}

// RealClock is the wall clock.
var RealClock Clock = realClock{}

// FakeClock is a manual Clock for deterministic tests: time stands still
// until Advance moves it, and timers fire (synchronously, in deadline
// order, in Advance's goroutine) when it passes their deadline.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFakeClock returns a manual clock reading start, for deterministic timer
// tests; pass it in Config.Clock and move time with Advance.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now returns the fake time.
func (c *FakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// AfterFunc starts a timer that calls f once the clock passes now+d.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, f: f, when: c.now.Add(d), active: true}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d, firing due timers.
func (c *FakeClock) Advance(d time.Duration) {
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

type fakeTimer struct {
	c      *FakeClock
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
