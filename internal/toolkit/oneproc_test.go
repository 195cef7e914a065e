package toolkit

import (
	"runtime"
	"testing"
)

// TestOneProc: the latency tools' OneProc and the bandwidth tools'
// OneProcBulk both run the process on one processor and restore it; only
// OneProc's devices busy-poll their socket. GOMAXPROCS in the environment
// turns both off.
func TestOneProc(t *testing.T) {
	prev := runtime.GOMAXPROCS(4)
	defer runtime.GOMAXPROCS(prev)
	for _, tc := range []struct {
		name string
		f    func() func()
		busy bool
	}{{"OneProc", OneProc, true}, {"OneProcBulk", OneProcBulk, false}} {
		t.Setenv("GOMAXPROCS", "")
		restore := tc.f()
		if n := runtime.GOMAXPROCS(0); n != 1 {
			t.Errorf("%s: GOMAXPROCS %d, want 1", tc.name, n)
		}
		if got := latencyBusyPoll() > 0; got != tc.busy {
			t.Errorf("%s: devices busy-poll: %v, want %v", tc.name, got, tc.busy)
		}
		restore()
		if n := runtime.GOMAXPROCS(0); n != 4 || latencyBusyPoll() != 0 {
			t.Errorf("%s: after restore GOMAXPROCS %d busy poll %v, want 4 and 0", tc.name, n, latencyBusyPoll())
		}
		t.Setenv("GOMAXPROCS", "3")
		tc.f()()
		if n := runtime.GOMAXPROCS(0); n != 4 {
			t.Errorf("%s with GOMAXPROCS set: %d processors, want the 4 left alone", tc.name, n)
		}
	}
}
