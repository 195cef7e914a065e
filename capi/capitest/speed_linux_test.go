package capitest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"
)

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
	rt := func(argv []string) []string {
		if os.Getenv("SOFTROCE_MEASURE_RT") != "1" {
			return argv
		}
		return append([]string{"chrt", "-f", "10"}, argv...)
	}
	rounds, _ := strconv.Atoi(os.Getenv("SOFTROCE_MEASURE_ROUNDS"))
	if rounds <= 0 {
		rounds = 3
	}
	bwRE := regexp.MustCompile(`(?m)^ 1048576\s+\d+\s+[0-9.]+\s+([0-9.]+)`)
	latRE := regexp.MustCompile(`(?m)^ 64\s+\d+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)`)
	measure := func(stock bool, tool string, args []string, re *regexp.Regexp) float64 {
		sa, ca := addrPair()
		port := freePort(t)
		a := append(append([]string(nil), args...), "-p", itoa(port))
		var s, c side
		if stock {
			s, c = side{rt(append([]string{"ib_" + tool}, a...)), env(sa)}, side{rt(append(append([]string{"ib_" + tool}, a...), sa)), env(ca)}
		} else {
			s = side{rt(append(append([]string{goTool, tool}, a...), "-d", sa)), env("")}
			c = side{rt(append(append([]string{goTool, tool}, a...), "-d", ca, sa)), env("")}
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
		sa, ca := addrPair()
		port := itoa(freePort(t))
		ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
		defer cancel()
		server, client := []string{goTool, "cmtime", "-b", sa, "-p", port}, []string{goTool, "cmtime", "-s", sa, "-b", ca, "-c", "100", "-p", port}
		senv, cenv := env(""), env("")
		if stock {
			server, client = []string{"cmtime", "-b", sa, "-p", port}, []string{"cmtime", "-s", sa, "-c", "100", "-p", port}
			senv, cenv = env(sa), env(ca)
		}
		sp := start(t, ctx, senv, rt(server)...)
		waitUDP(t, sa, sp)
		cp := start(t, ctx, cenv, rt(client)...)
		err := cp.wait()
		sp.cmd.Process.Kill()
		sp.wait()
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
		p := start(t, t.Context(), env(a), rt([]string{bin})...)
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
	med := func(v []float64) float64 { s := append([]float64(nil), v...); sort.Float64s(s); return s[len(s)/2] }
	t.Logf("medians: write_bw 1 MiB stock/Go %.0f/%.0f = %.2fx (goal >= 0.9); send_lat 64 B typical stock/Go %.2f/%.2f = %.2fx (goal <= 1.2); empty ibv_poll_cq %.1f ns (goal <= 100); cmtime -c 100 connect rate stock/Go %.2fx (%.1f/%.1f us per connection; goal >= 0.9)",
		med(bwS), med(bwG), med(bwS)/med(bwG), med(latS), med(latG), med(latS)/med(latG), med(poll), med(cmG)/med(cmS), med(cmS), med(cmG))
}
