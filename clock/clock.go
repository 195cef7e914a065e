// Package clock is the time source of softroce's timers: the Clock
// interface that verbs.Config.Clock takes (the retransmit and RNR timers;
// package cm times its MAD retransmissions on the device's clock), the
// Timer it starts, and Real, the wall clock. Tests drive time by hand with
// clocktest.Fake.
//
// It uses the standard library only and sits below every other package in
// the import order (wire → link → verbs → cm), so that a device's users and
// the packages above verbs share one Clock type.
package clock

import "time"

// Clock is a source of time and timers. Implementations must be safe for
// concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f once, after d, in a goroutine other than the
	// caller's (Real: a new one per call).
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

// Real is the wall clock, on the runtime's timers. Its zero value is ready
// to use.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
