package clocktest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/clock/clocktest"
)

// TestFake: timers fire in deadline order when Advance passes their
// deadline, with Now reading each deadline in its callback; Stop and Reset
// report whether the timer was armed; Until tells the time left.
func TestFake(t *testing.T) {
	start := time.Unix(1e9, 0)
	c := clocktest.NewFake(start)
	var fired []string
	at := func(name string) func() {
		return func() { fired = append(fired, name+"@"+c.Now().Sub(start).String()) }
	}
	c.AfterFunc(30*time.Millisecond, at("c"))
	a := c.AfterFunc(10*time.Millisecond, at("a"))
	b := c.AfterFunc(20*time.Millisecond, at("b"))
	stopped := c.AfterFunc(15*time.Millisecond, at("stopped"))
	if !stopped.Stop() || stopped.Stop() {
		t.Error("Stop: want true for an armed timer, then false")
	}
	if d, ok := c.Until(b); d != 20*time.Millisecond || !ok {
		t.Errorf("Until(b) = %v, %v; want 20ms, true", d, ok)
	}
	c.Advance(25 * time.Millisecond)
	if want := []string{"a@10ms", "b@20ms"}; !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	if got := c.Now().Sub(start); got != 25*time.Millisecond {
		t.Errorf("Now = start+%v, want start+25ms", got)
	}
	if _, ok := c.Until(a); ok {
		t.Error("Until: a fired timer reads armed")
	}
	if a.Reset(time.Millisecond) {
		t.Error("Reset of a fired timer reported it armed")
	}
	c.Advance(5 * time.Millisecond)
	if want := []string{"a@10ms", "b@20ms", "a@26ms", "c@30ms"}; !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	// A stall moves the clock and fires nothing; the next Advance fires
	// what came due, late.
	c.AfterFunc(5*time.Millisecond, at("d"))
	c.Stall(20 * time.Millisecond)
	if len(fired) != 4 {
		t.Fatalf("Stall fired %v", fired[4:])
	}
	c.Advance(0)
	if want := []string{"a@10ms", "b@20ms", "a@26ms", "c@30ms", "d@50ms"}; !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	if _, ok := c.Until(clocktest.NewFake(start).AfterFunc(time.Second, func() {})); ok {
		t.Error("Until reads another clock's timer")
	}
	var _ clock.Clock = c
}
