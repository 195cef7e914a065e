//go:build linux && cgo && softroce_capi

package main

import (
	"testing"
	"time"
)

// TestIdleWaitBounds: a blocking wait's bound starts at rsBlockWait,
// doubles with each wait that ends with nothing, stops at maxIdleWait, and
// starts again from rsBlockWait after a wait that ended with something.
func TestIdleWaitBounds(t *testing.T) {
	var w idleWait
	want := []time.Duration{100, 200, 400, 800, 1600, 1600}
	for i, ms := range want {
		if got := w.bound(); got != ms*time.Millisecond {
			t.Fatalf("wait %d: bound %v, want %v", i, got, ms*time.Millisecond)
		}
		w.ended(true)
	}
	w.ended(false)
	if got := w.bound(); got != rsBlockWait {
		t.Fatalf("after an event: bound %v, want %v", got, rsBlockWait)
	}
}
