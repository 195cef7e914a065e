package capitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// measureRounds is SOFTROCE_MEASURE_ROUNDS, or def when it is unset.
func measureRounds(def int) int {
	if n, _ := strconv.Atoi(os.Getenv("SOFTROCE_MEASURE_ROUNDS")); n > 0 {
		return n
	}
	return def
}

// median returns the median of v (the upper one of an even count), 0 for
// none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// buildTestdata compiles testdata/src against the library (gcc with opt,
// the libraries of libs) into the test's temporary directory.
func buildTestdata(t *testing.T, src, opt string, libs ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(src, ".c"))
	args := append([]string{opt, "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", src), "-L" + libDir}, libs...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// TestSpeed measures the C library against softroce's Go tools in one run
// (SOFTROCE_MEASURE=1; CI does not run it): stock ib_write_bw -s 1 MiB
// against Go write_bw (goal ≥ 0.9×), stock ib_send_lat -s 64 typical
// against Go send_lat (goal ≤ 1.2×), an empty ibv_poll_cq (goal ≤ 100
// ns), and stock cmtime -c 100's connection set-up rate against the Go
// cmtime's (goal ≥ 0.9×), medians of SOFTROCE_MEASURE_ROUNDS rounds
// (default 3), alternating.
func TestSpeed(t *testing.T) {
	if os.Getenv("SOFTROCE_MEASURE") != "1" {
		t.Skip("a measurement: SOFTROCE_MEASURE=1 runs it")
	}
	needLib(t, "ib_write_bw", "ib_send_lat", "gcc", "cmtime")
	// SOFTROCE_MEASURE_RT=1 runs the measured programs (only them: never
	// the go command, which livelocks at real-time priority) under chrt -f
	// 10, which shields both sides alike from other jobs on a shared host.
	rounds := measureRounds(3)
	bwRE := regexp.MustCompile(`(?m)^ 1048576\s+\d+\s+[0-9.]+\s+([0-9.]+)`)
	latRE := regexp.MustCompile(`(?m)^ 64\s+\d+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)`)
	measure := func(stock bool, tool string, args []string, re *regexp.Regexp) float64 {
		sa, ca := addrPair()
		port := freePort(t)
		a := append(append([]string(nil), args...), "-p", itoa(port))
		var s, c side
		if stock {
			s, c = side{measureRT(append([]string{"ib_" + tool}, a...)), env(sa)}, side{measureRT(append(append([]string{"ib_" + tool}, a...), sa)), env(ca)}
		} else {
			s = side{measureRT(append(append([]string{goTool, tool}, a...), "-d", sa)), env("")}
			c = side{measureRT(append(append([]string{goTool, tool}, a...), "-d", ca, sa)), env("")}
		}
		_, cl := runPair(t, port, s, c, 120*time.Second)
		m := re.FindStringSubmatch(cl.stdout.String())
		if m == nil {
			t.Fatalf("no result:\n%s", cl)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	bin := filepath.Join(t.TempDir(), "pollbench")
	if out, err := exec.Command("gcc", "-O2", "-o", bin, filepath.Join("testdata", "pollbench.c"), "-L"+libDir, "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	pollRE := regexp.MustCompile(`empty_poll_ns ([0-9.]+)`)
	cmtimeRE := regexp.MustCompile(`(?m)^connect +: +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9.]+)$`)
	cmtime := func(stock bool) float64 {
		cp, err := cmtimePair(t, stock, 120*time.Second)
		m := cmtimeRE.FindStringSubmatch(cp.stdout.String())
		if err != nil || m == nil {
			t.Fatalf("cmtime: %s", cp)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	var bwS, bwG, latS, latG, poll, cmS, cmG []float64
	for r := 0; r < rounds; r++ {
		bwS = append(bwS, measure(true, "write_bw", []string{"-s", "1048576", "-D", "3"}, bwRE))
		bwG = append(bwG, measure(false, "write_bw", []string{"-s", "1048576", "-D", "3"}, bwRE))
		latS = append(latS, measure(true, "send_lat", []string{"-s", "64", "-n", "5000"}, latRE))
		latG = append(latG, measure(false, "send_lat", []string{"-s", "64", "-n", "5000"}, latRE))
		a, _ := addrPair()
		p := start(t, t.Context(), env(a), measureRT([]string{bin})...)
		if err := p.wait(); err != nil {
			t.Fatalf("%s", p)
		}
		m := pollRE.FindStringSubmatch(p.stdout.String())
		v, _ := strconv.ParseFloat(m[1], 64)
		poll = append(poll, v)
		cmS = append(cmS, cmtime(true))
		cmG = append(cmG, cmtime(false))
		load, _ := os.ReadFile("/proc/loadavg")
		t.Logf("round %d (load %.4s): write_bw stock %.0f Go %.0f MB/s; send_lat typical stock %.2f Go %.2f us; empty poll %.1f ns; cmtime connect stock %.1f Go %.1f us/conn",
			r+1, load, bwS[r], bwG[r], latS[r], latG[r], poll[r], cmS[r], cmG[r])
	}
	t.Logf("medians: write_bw 1 MiB stock/Go %.0f/%.0f = %.2fx (goal >= 0.9); send_lat 64 B typical stock/Go %.2f/%.2f = %.2fx (goal <= 1.2); empty ibv_poll_cq %.1f ns (goal <= 100); cmtime -c 100 connect rate stock/Go %.2fx (%.1f/%.1f us per connection; goal >= 0.9)",
		median(bwS), median(bwG), median(bwS)/median(bwG), median(latS), median(latG), median(latS)/median(latG), median(poll), median(cmG)/median(cmS), median(cmS), median(cmG))
}

// TestSpeedRstream measures stock rstream over the library's rsockets
// against the same rstream binary on kernel TCP (-T s) in one run
// (SOFTROCE_MEASURE=1): bandwidth with 1 MiB transfers (goal ≥ 0.7×) and
// 64-byte latency (goal ≤ 1.5×), in rstream's default non-blocking mode
// and blocking (-T b), medians of SOFTROCE_MEASURE_ROUNDS rounds
// (default 3), alternating.
func TestSpeedRstream(t *testing.T) {
	if os.Getenv("SOFTROCE_MEASURE") != "1" {
		t.Skip("a measurement: SOFTROCE_MEASURE=1 runs it")
	}
	needLib(t, "rstream")
	rounds := measureRounds(3)
	// name bytes xfers iters total time Gb/sec usec/xfer
	measure := func(tcp bool, args string) (gbps, usec float64) {
		sa, ca := addrPair()
		port := freePort(t)
		a := append(strings.Fields(args), "-p", itoa(port))
		if tcp {
			a = append(a, "-T", "s")
		}
		s := side{append([]string{"rstream", "-b", sa}, a...), env(sa)}
		c := side{append([]string{"rstream", "-s", sa}, a...), env(ca)}
		var cl *proc
		if tcp {
			_, cl = runPair(t, port, s, c, 180*time.Second)
		} else {
			_, cl = runCMPair(t, sa, s, c, 180*time.Second)
		}
		m := resultLine.FindString(cl.stdout.String())
		f := strings.Fields(m)
		if len(f) != 8 {
			t.Fatalf("no result:\n%s", cl)
		}
		gbps, _ = strconv.ParseFloat(f[6], 64)
		usec, _ = strconv.ParseFloat(f[7], 64)
		return gbps, usec
	}
	for _, mode := range []string{"", "-T b"} {
		var bwR, bwT, latR, latT []float64
		for r := 0; r < rounds; r++ {
			first := r%2 == 0 // alternate which goes first
			for _, tcp := range []bool{!first, first} {
				g, _ := measure(tcp, mode+" -S 1048576 -C 1000")
				_, u := measure(tcp, mode+" -S 64 -I 10000 -C 1")
				if tcp {
					bwT, latT = append(bwT, g), append(latT, u)
				} else {
					bwR, latR = append(bwR, g), append(latR, u)
				}
			}
			load, _ := os.ReadFile("/proc/loadavg")
			t.Logf("mode %q round %d (load %.4s): 1 MiB bandwidth rsocket %.2f TCP %.2f Gb/s; 64 B latency rsocket %.2f TCP %.2f us/xfer",
				mode, r+1, load, bwR[r], bwT[r], latR[r], latT[r])
		}
		t.Logf("mode %q medians: bandwidth rsocket/TCP %.2f/%.2f Gb/s = %.2fx (goal >= 0.7); latency %.2f/%.2f us = %.2fx (goal <= 1.5)",
			mode, median(bwR), median(bwT), median(bwR)/median(bwT), median(latR), median(latT), median(latR)/median(latT))
	}
}

// TestSpeedFirstCall measures a new thread's first call into the library
// (SOFTROCE_MEASURE=1; CI does not run it): testdata/firstcall.c opens the
// device, then starts three threads one after another, each timing its
// first call into Go and a second one. It reports the medians, over
// SOFTROCE_MEASURE_ROUNDS runs (default 5), of the first thread's first
// call and of the later threads' first calls, its baseline in the same
// run: the Go runtime makes a thread record (an M) for a C thread inside
// the call that takes its list's last one, which the library's device
// open does ahead (misc.c, sr_spare_ms).
func TestSpeedFirstCall(t *testing.T) {
	if os.Getenv("SOFTROCE_MEASURE") != "1" {
		t.Skip("a measurement: SOFTROCE_MEASURE=1 runs it")
	}
	needLib(t, "gcc")
	bin := buildTestdata(t, "firstcall.c", "-O1", "-libverbs", "-lpthread")
	rounds := measureRounds(5)
	line := regexp.MustCompile(`(?m)^thread (\d+): first_us ([0-9.]+) second_us ([0-9.]+)$`)
	var first, later, second []float64
	for r := 0; r < rounds; r++ {
		a, _ := addrPair()
		ctx, cancel := contextWithTimeout(t, 30*time.Second)
		p := start(t, ctx, env(a), measurePin([]string{bin, "3"}, 1)...)
		err := p.wait()
		cancel()
		if err != nil {
			t.Fatalf("%s", p)
		}
		for _, m := range line.FindAllStringSubmatch(p.stdout.String(), -1) {
			f, _ := strconv.ParseFloat(m[2], 64)
			s, _ := strconv.ParseFloat(m[3], 64)
			second = append(second, s)
			if m[1] == "0" {
				first = append(first, f)
			} else {
				later = append(later, f)
			}
		}
	}
	t.Logf("medians of %d runs: the first new thread's first call %.1f µs, later threads' first calls %.1f µs (%.1f×), a second call %.2f µs",
		rounds, median(first), median(later), median(first)/median(later), median(second))
}
