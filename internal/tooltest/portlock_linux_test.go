package tooltest

import "testing"

// TestLockPort: a port one test holds is refused to another (as it would
// be to another process) until the holder ends.
func TestLockPort(t *testing.T) {
	p := 29999
	t.Run("holder", func(t *testing.T) {
		for ; !lockPort(t, p); p-- { // another test process may hold one
		}
		if lockPort(t, p) {
			t.Fatal("a held port was given again")
		}
	})
	if !lockPort(t, p) {
		t.Fatal("the port was not given back when its holder ended")
	}
}
