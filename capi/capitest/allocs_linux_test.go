package capitest

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestHotPathAllocs pins the library's per-work-request and per-poll paths
// (ibv_post_send, ibv_post_recv, ibv_poll_cq empty and full, the link
// polling an empty poll does) at no Go allocation: testdata/allocs.c runs
// SEND round trips at two counts, and the Go runtime's allocation counts
// the library prints at close (SOFTROCE_DEBUG) may differ by less than one
// per 100 round trips (set-up and background work, not the loop).
func TestHotPathAllocs(t *testing.T) {
	needLib(t, "gcc")
	bin := filepath.Join(t.TempDir(), "allocs")
	if out, err := exec.Command("gcc", "-O1", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "allocs.c"),
		"-L"+libDir, "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	re := regexp.MustCompile(`go_mallocs=(\d+)`)
	mallocs := func(iters int) float64 {
		a, _ := addrPair()
		ctx, cancel := contextWithTimeout(t, 90*time.Second)
		defer cancel()
		p := start(t, ctx, env(a, "SOFTROCE_DEBUG=1"), bin, itoa(iters))
		if err := p.wait(); err != nil {
			t.Fatalf("%s", p)
		}
		m := re.FindStringSubmatch(p.stderr.String())
		if m == nil {
			t.Fatalf("no go_mallocs in the library's counters:\n%s", p)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	const small, large = 2000, 22000
	// The least of two runs at each count: a retransmission or a GC
	// cycle in one run is not the loop's.
	lo := min(mallocs(small), mallocs(small))
	hi := min(mallocs(large), mallocs(large))
	per := (hi - lo) / (large - small)
	t.Logf("Go allocations: %.0f at %d round trips, %.0f at %d: %.4f per round trip", lo, small, hi, large, per)
	if per >= 0.01 {
		t.Errorf("%.4f Go allocations per SEND round trip through the C library, want 0", per)
	}
}
