package ucxtest

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"
)

// TestSpeed measures UCX and Open MPI over softroce against their own TCP
// transports on loopback, in one run (SOFTROCE_MEASURE=1; CI does not run
// it): ucx_perftest tag_bw 1 MiB over rc_verbs against UCX's tcp (goal ≥
// 0.8×), tag_lat 8 B (goal ≤ 1.5×), and the MPI ping-pong's 1 MiB bandwidth
// with pml ucx over rc_verbs against pml ob1 with the tcp BTL (goal ≥
// 0.8×); medians of SOFTROCE_MEASURE_ROUNDS rounds (default 3),
// alternating.
func TestSpeed(t *testing.T) {
	if os.Getenv("SOFTROCE_MEASURE") != "1" {
		t.Skip("a measurement: SOFTROCE_MEASURE=1 runs it")
	}
	needLib(t, "ucx_perftest")
	bin := mpicheck(t)
	rounds, _ := strconv.Atoi(os.Getenv("SOFTROCE_MEASURE_ROUNDS"))
	if rounds <= 0 {
		rounds = 3
	}
	const rc = "rc_verbs,ud_verbs:aux"
	// Final: iterations, then latency 50%, average, overall (µs), then
	// bandwidth average, overall (MB/s).
	finalRE := regexp.MustCompile(`(?m)^Final:\s+\d+\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)`)
	perf := func(tls, dev string, col int, args ...string) float64 {
		c := perfCase{tls: tls, args: args}
		out := perftestPairDev(t, c, dev, 120*time.Second)
		m := finalRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no Final line:\n%s", tail(out))
		}
		v, _ := strconv.ParseFloat(m[col], 64)
		return v
	}
	mpiRE := regexp.MustCompile(`mpicheck: bw \d+ ([0-9.]+) MB/s`)
	mpi := func(args ...string) float64 {
		argv := append([]string{"mpirun", "-np", "2", "--oversubscribe"}, args...)
		argv = append(argv, bin, "bw", "1048576", "300")
		out := run(t, env(autoNet()), 120*time.Second, onLib(argv...)...)
		m := mpiRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no bandwidth:\n%s", tail(out))
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	bw := []string{"-t", "tag_bw", "-s", "1048576", "-n", "500", "-w", "20"}
	lat := []string{"-t", "tag_lat", "-s", "8", "-n", "20000", "-w", "1000"}
	var bwS, bwT, latS, latT, mpiS, mpiT []float64
	for r := 0; r < rounds; r++ {
		bwS = append(bwS, perf(rc, "lo:1", 5, bw...))
		bwT = append(bwT, perf("tcp", "lo", 5, bw...))
		latS = append(latS, perf(rc, "lo:1", 1, lat...))
		latT = append(latT, perf("tcp", "lo", 1, lat...))
		mpiS = append(mpiS, mpi("--mca", "pml", "ucx", "--mca", "btl", "self", "--mca", "osc", "^ucx", "-x", "UCX_TLS="+rc, "-x", "UCX_NET_DEVICES=lo:1"))
		mpiT = append(mpiT, mpi("--mca", "pml", "ob1", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"))
	}
	// The ratio is the median of the rounds' ratios: each round's pair ran
	// back to back, under about the same load.
	row := func(what, unit string, s, b []float64, goal string) {
		r := make([]float64, len(s))
		for i := range s {
			r[i] = s[i] / b[i]
		}
		t.Logf("%-46s softroce %8.1f  tcp %8.1f %-4s ratio %.2f× (goal %s)  rounds %v / %v", what, median(s), median(b), unit, median(r), goal, s, b)
	}
	row("ucx_perftest tag_bw 1 MiB (rc_verbs | tcp)", "MB/s", bwS, bwT, "≥0.8×")
	row("ucx_perftest tag_lat 8 B p50 (rc_verbs | tcp)", "µs", latS, latT, "≤1.5×")
	row("MPI ping-pong 1 MiB (pml ucx rc | ob1 tcp)", "MB/s", mpiS, mpiT, "≥0.8×")
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average at the end: %s", b)
	}
	fmt.Fprintln(os.Stderr)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
