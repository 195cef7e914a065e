package tooltest

import "testing"

// TestLoopPairUnique: LoopPair never hands out a pair twice in a process
// (500 random draws from 37,500 pairs collide with probability 0.96).
func TestLoopPairUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 500 {
		a, b := LoopPair()
		if seen[a] || seen[b] {
			t.Fatalf("LoopPair gave %s, %s again", a, b)
		}
		seen[a], seen[b] = true, true
	}
}
