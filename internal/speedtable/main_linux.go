package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const (
	serverAddr = "127.0.0.1"
	clientAddr = "127.0.0.2"
	mib        = 1 << 20
)

// kind is how a run's output is read.
type kind int

const (
	kindBW   kind = iota // perftest bandwidth table
	kindLat              // perftest latency table
	kindPing             // rc_pingpong's usec/iter
)

// spec is one two-process run, identified by key; a key run once per round
// serves every case that names it.
type spec struct {
	key  string
	kind kind
	argv []string // softroce command and its common options
	soft bool     // a softroce device (binds -d on both sides)
}

func (s spec) sides() (server, client []string) {
	if s.soft {
		return []string{"-d", serverAddr}, []string{"-d", clientAddr}
	}
	return nil, []string{"-d", clientAddr}
}

// harness holds a run's configuration and samples.
type harness struct {
	r       *runner
	root    string
	rounds  int
	dur     int
	iters   int
	qps     int
	qpDepth int
	only    map[string]bool
	log     io.Writer
	vals    map[string][]float64 // key.metric -> per-round values
	loads   map[string][]float64 // key -> 1-min load before each run
	failed  []string
	specs   map[string]spec
	rcvbufΔ uint64 // UDP RcvbufErrors during the many-QP runs
	// Retransmit timer expiries and retry sequences of the many-QP runs'
	// devices, both processes, from their $SOFTROCE_STATS lines.
	qpTimeouts, qpRetries uint64
}

func (h *harness) add(key, metric string, v float64) {
	h.vals[key+"."+metric] = append(h.vals[key+"."+metric], v)
}

func (h *harness) med(key, metric string) (float64, bool) {
	v := h.vals[key+"."+metric]
	return median(v), len(v) > 0
}

func (h *harness) fail(what string, err error) {
	line := fmt.Sprintf("FAILED %s: %v", what, err)
	h.failed = append(h.failed, line)
	fmt.Fprintln(h.log, line)
}

func loadavg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	l, err := parseLoadavg(string(b))
	if err != nil {
		return -1
	}
	return l
}

func udpRcvbufErrors() uint64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0
	}
	m, err := parseSnmp(string(b), "Udp")
	if err != nil {
		return 0
	}
	return m["RcvbufErrors"]
}

// measure runs spec key once (traced: under perf stat or strace, counting
// system calls only) and records its metrics.
func (h *harness) measure(ctx context.Context, round, key string, traced bool) {
	sp := h.specs[key]
	timeout := time.Duration(h.dur)*time.Second + 90*time.Second
	if traced {
		timeout *= 3
	}
	sa, ca := sp.sides()
	load := loadavg()
	drops := udpRcvbufErrors()
	os.Remove(h.r.stats) // each pair's devices append their counters anew
	s, c, err := h.r.pair(ctx, timeout, traced, sp.argv, sa, ca)
	what := fmt.Sprintf("round %s %s", round, key)
	if err != nil {
		h.fail(what, err)
		return
	}
	cpu := float64((s.CPU + c.CPU).Microseconds())
	sw := float64(s.Switches + c.Switches)
	calls := float64(s.Syscalls + c.Syscalls)
	var unit float64 // MiB moved, or round trips
	var line string
	switch sp.kind {
	case kindBW:
		b, err := parseBW(c.Stdout)
		if err != nil {
			h.fail(what, fmt.Errorf("client output: %v\n%s", err, c.Stdout))
			return
		}
		unit = float64(b.Iters) * float64(b.Size) / mib // #iterations counts all QPs' messages
		if unit == 0 {
			h.fail(what, fmt.Errorf("no bytes moved\n%s", c.Stdout))
			return
		}
		if traced {
			h.add(key, "calls/MiB", calls/unit)
			line = fmt.Sprintf("%.1f syscalls/MiB (both processes, traced)", calls/unit)
			break
		}
		h.add(key, "MiB/s", b.BWAvg)
		h.add(key, "Mpps", b.MsgRate)
		h.add(key, "cpu/MiB", cpu/unit)
		h.add(key, "cs/MiB", sw/unit)
		line = fmt.Sprintf("%.1f MiB/s %.4f Mpps, cpu %.0f µs/MiB, %.1f switches/MiB",
			b.BWAvg, b.MsgRate, cpu/unit, sw/unit)
		st := h.r.devStats()
		line += fmt.Sprintf(", retransmit timeouts %d, retries %d", st["RetryTimeouts"], st["Retransmits"])
		if strings.Contains(key, "QP") {
			d := udpRcvbufErrors() - drops
			h.rcvbufΔ += d
			h.qpTimeouts += st["RetryTimeouts"]
			h.qpRetries += st["Retransmits"]
			line += fmt.Sprintf(", UDP RcvbufErrors +%d", d)
		}
	case kindLat, kindPing:
		var iters uint64
		if sp.kind == kindLat {
			l, err := parseLat(c.Stdout)
			if err != nil {
				h.fail(what, fmt.Errorf("client output: %v\n%s", err, c.Stdout))
				return
			}
			iters = l.Iters
			if !traced {
				h.add(key, "typical", l.Typical)
				h.add(key, "min", l.Min)
				h.add(key, "avg", l.Avg)
				line = fmt.Sprintf("typical %.2f µs min %.2f avg %.2f", l.Typical, l.Min, l.Avg)
			}
		} else {
			var usec float64
			if iters, usec, err = parsePingpong(c.Stdout); err != nil {
				h.fail(what, fmt.Errorf("client output: %v\n%s", err, c.Stdout))
				return
			}
			if !traced {
				h.add(key, "rtt", usec)
				line = fmt.Sprintf("%.2f µs/iter (round trip)", usec)
			}
		}
		unit = 2 * float64(iters) // per round trip, per side
		if unit == 0 {
			h.fail(what, fmt.Errorf("no iterations\n%s", c.Stdout))
			return
		}
		if traced {
			h.add(key, "calls/rt", calls/unit)
			line = fmt.Sprintf("%.2f syscalls per round trip per side (traced)", calls/unit)
			break
		}
		h.add(key, "cpu/rt", cpu/unit)
		h.add(key, "cs/rt", sw/unit)
		line += fmt.Sprintf(", per round trip per side: cpu %.1f µs, %.2f switches", cpu/unit, sw/unit)
	}
	lk := key
	if traced {
		lk += " strace"
	}
	h.loads[lk] = append(h.loads[lk], load)
	fmt.Fprintf(h.log, "round %s  %-14s %s  [load %.2f]\n", round, key, line, load)
}

// cases, in the order they run, with the specs they compare (softroce, baseline).
var cases = []struct{ name, soft, base string }{
	{"bw1m", "write_bw 1M", "tcp_bw 1M"},
	{"bw4k", "write_bw 4K", "tcp_bw 4K"},
	{"send_lat", "send_lat 64", "tcp_lat 64"},
	{"write_lat", "write_lat 64", "tcp_lat 64"},
	{"rc_pingpong", "rc_pingpong 64", "tcp_lat 64"},
	{"qp", "write_bw QP", "write_bw 1M"},
}

// allCases are the names -only accepts.
const allCases = "bw1m,bw4k,send_lat,write_lat,rc_pingpong,qp,demo,udp,strace"

func main() {
	os.Exit(mainErr())
}

func mainErr() int {
	rounds := flag.Int("rounds", 3, "rounds; each runs every case, softroce and baseline alternating")
	dur := flag.Int("dur", 3, "seconds of each bandwidth run (-D)")
	iters := flag.Int("iters", 20000, "exchanges of each latency run (-n)")
	qps := flag.Int("qps", 256, "QPs of the many-QP case (perftest's -q)")
	qpDepth := flag.Int("qp-depth", 8, "send queue depth per QP of the many-QP case (-t; 256 × the default 128 × 1 MiB do not drain within the tool's grace after -D)")
	only := flag.String("only", allCases, "cases to run, comma separated: "+allCases)
	bin := flag.String("bin", "", "softroce binary to measure (default: build ./cmd/softroce)")
	out := flag.String("o", "", "also write the markdown table to this file")
	env := flag.String("env", "", "extra environment of the measured processes, comma separated (e.g. GOMAXPROCS=1)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	h := &harness{rounds: *rounds, dur: *dur, iters: *iters, qps: *qps, qpDepth: *qpDepth, only: map[string]bool{}, log: os.Stdout,
		vals: map[string][]float64{}, loads: map[string][]float64{}}
	for _, n := range strings.Split(*only, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !strings.Contains(","+allCases+",", ","+n+",") {
			fmt.Fprintf(os.Stderr, "speedtable: unknown case %q (cases: %s)\n", n, allCases)
			return 2
		}
		h.only[n] = true
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		fmt.Fprintln(os.Stderr, "speedtable: run it inside the softroce module (go env GOMOD is empty)")
		return 1
	}
	h.root = filepath.Dir(strings.TrimSpace(string(gomod)))
	tmp, err := os.MkdirTemp("", "speedtable-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "speedtable:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	h.r = &runner{bin: *bin, tmp: tmp, stats: filepath.Join(tmp, "stats.txt")}
	h.r.env = append(os.Environ(), "SOFTROCE_STATE="+filepath.Join(tmp, "links.json"),
		"SOFTROCE_STATS="+h.r.stats)
	if *env != "" {
		h.r.env = append(h.r.env, strings.Split(*env, ",")...)
	}
	if h.r.bin == "" {
		fmt.Fprintln(h.log, "building ./cmd/softroce ...")
		if h.r.bin, err = build(ctx, h.root, tmp); err != nil {
			fmt.Fprintln(os.Stderr, "speedtable:", err)
			return 1
		}
	}
	if h.only["strace"] {
		if h.r.perf = probePerf(ctx); h.r.perf != "" {
			fmt.Fprintln(h.log, "counting system calls with perf stat (raw_syscalls:sys_enter)")
		} else if h.r.strace, err = exec.LookPath("strace"); err != nil {
			fmt.Fprintln(h.log, "neither perf stat nor strace works here: the syscall columns are skipped")
			delete(h.only, "strace")
		} else {
			fmt.Fprintln(h.log, "counting system calls with strace -f -c (perf stat cannot count syscalls here)")
		}
	}
	n := fmt.Sprint(*iters)
	durArgs := []string{"-D", fmt.Sprint(*dur)}
	if *dur >= 4 {
		// -f 0: the whole run is measured (from -D 4 on, write_bw and
		// tcp_bw leave a quarter of it at each end out by default, as
		// perftest): CPU time and system calls are counted over the whole
		// processes, so the bytes they are divided by must be too. (Below
		// -D 4 the default margin is 0, and a -bin built before -f works.)
		durArgs = append(durArgs, "-f", "0")
	}
	h.specs = map[string]spec{
		"write_bw 1M":    {"write_bw 1M", kindBW, append([]string{"write_bw", "-s", "1048576"}, durArgs...), true},
		"tcp_bw 1M":      {"tcp_bw 1M", kindBW, append([]string{"tcp_bw", "-s", "1048576"}, durArgs...), false},
		"write_bw 4K":    {"write_bw 4K", kindBW, append([]string{"write_bw", "-s", "4096"}, durArgs...), true},
		"tcp_bw 4K":      {"tcp_bw 4K", kindBW, append([]string{"tcp_bw", "-s", "4096"}, durArgs...), false},
		"send_lat 64":    {"send_lat 64", kindLat, []string{"send_lat", "-s", "64", "-n", n}, true},
		"write_lat 64":   {"write_lat 64", kindLat, []string{"write_lat", "-s", "64", "-n", n}, true},
		"tcp_lat 64":     {"tcp_lat 64", kindLat, []string{"tcp_lat", "-s", "64", "-n", n}, false},
		"rc_pingpong 64": {"rc_pingpong 64", kindPing, []string{"rc_pingpong", "-g", "1", "-s", "64", "-n", n}, true},
		"write_bw QP": {"write_bw QP", kindBW, append([]string{"write_bw", "-q", fmt.Sprint(*qps), "-t", fmt.Sprint(*qpDepth),
			"-s", "1048576"}, durArgs...), true},
	}
	fmt.Fprintf(h.log, "%d rounds on %s; load %.2f\n", *rounds, h.r.bin, loadavg())
	for i := 0; i < *rounds && ctx.Err() == nil; i++ {
		round := fmt.Sprintf("%d/%d", i+1, *rounds)
		done := map[string]bool{}
		for _, c := range cases {
			if !h.only[c.name] {
				continue
			}
			order := []string{c.soft, c.base}
			if i%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, k := range order {
				if !done[k] && ctx.Err() == nil {
					done[k] = true
					h.measure(ctx, round, k, false)
				}
			}
		}
		if h.only["demo"] && ctx.Err() == nil {
			h.demo(ctx, round)
		}
		if h.only["udp"] && ctx.Err() == nil {
			// Every round, so that the CPU per MiB of the 1 MiB stream
			// is read against the floor of the same minutes.
			h.udp(ctx)
		}
	}
	if h.only["strace"] && ctx.Err() == nil {
		for _, k := range []string{"write_bw 1M", "tcp_bw 1M", "send_lat 64", "tcp_lat 64"} {
			h.measure(ctx, "strace", k, true)
		}
	}
	if ctx.Err() != nil {
		h.fail("run", fmt.Errorf("interrupted"))
	}
	table := h.table()
	fmt.Fprint(h.log, "\n"+table)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
			h.fail("writing "+*out, err)
		}
	}
	if len(h.failed) > 0 {
		fmt.Fprintf(os.Stderr, "\n%d measurement(s) failed:\n%s\n", len(h.failed), strings.Join(h.failed, "\n"))
		return 1
	}
	return 0
}

// demo runs softroce demo (both devices in one process) and records its table.
func (h *harness) demo(ctx context.Context, round string) {
	port, err := freeUDPPort()
	if err != nil {
		h.fail("round "+round+" demo", err)
		return
	}
	load := loadavg()
	p, err := h.r.run(ctx, 2*time.Minute, "demo", "-a", fmt.Sprintf("%s:%d", serverAddr, port), "-b", fmt.Sprintf("%s:%d", clientAddr, port))
	if err != nil {
		h.fail("round "+round+" demo", err)
		return
	}
	d, err := parseDemo(p.Stdout)
	if err != nil {
		h.fail("round "+round+" demo", fmt.Errorf("%v\n%s", err, p.Stdout))
		return
	}
	h.add("demo", "bw", d.BW)
	h.add("demo", "tcpbw", d.TCPBW)
	h.add("demo", "lat", d.Lat)
	h.add("demo", "tcplat", d.TCPLat)
	h.loads["demo"] = append(h.loads["demo"], load)
	fmt.Fprintf(h.log, "round %s  %-14s bandwidth %.2f vs %.2f GB/s, half-RTT %.2f vs %.2f µs  [load %.2f]\n",
		round, "demo", d.BW, d.TCPBW, d.Lat, d.TCPLat, load)
}

// The link/udp benchmarks taken as the raw UDP ceiling and as its TCP
// baseline in the same process.
const (
	udpBench    = "BenchmarkLoopback/batched-64-gso-gro"
	udpTCPBench = "BenchmarkLoopback/tcp-1MiB"
)

// udp runs link/udp's loopback benchmarks once (once per round): the raw UDP
// path's rate, and its CPU per MiB against a TCP stream in the same process.
// That CPU per MiB is the floor under the 1 MiB WRITE stream's: both ends'
// CPU (getrusage of the one process there, wait4 of the two here), the
// kernel's UDP path with GSO and GRO, the ICRC computed for every packet
// sent and every received payload copied once; not the ICRC check, the
// ACKs and the engine. Its MiB count whole RoCE datagrams (4,116 bytes per
// 4 KiB payload), the stream's payload only: the floor reads 0.5 % low.
func (h *harness) udp(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	load := loadavg()
	cmd := exec.CommandContext(ctx, "go", "test", "-run=^$", "-bench=Loopback/(batched-64-gso-gro|tcp-1MiB)$", "-benchtime=2s", "./link/udp")
	cmd.Dir = h.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		h.fail("link/udp benchmark", fmt.Errorf("%v\n%s", err, out))
		return
	}
	res := parseBench(string(out))
	u, t := res[udpBench], res[udpTCPBench]
	if u["MB/s"] == 0 || u["cpu-us/MiB"] == 0 || t["cpu-us/MiB"] == 0 {
		h.fail("link/udp benchmark", fmt.Errorf("no MB/s and cpu-us/MiB for %s and %s in output\n%s", udpBench, udpTCPBench, out))
		return
	}
	for _, name := range []string{udpBench, udpTCPBench} {
		fmt.Fprintf(h.log, "udp    %-40s %8.1f MiB/s %6.1f µs CPU/MiB  [load %.2f]\n",
			name, res[name]["MB/s"]*1e6/mib, res[name]["cpu-us/MiB"], load)
	}
	h.add("udp", "MiB/s", u["MB/s"]*1e6/mib)
	h.add("udp", "cpu/MiB", u["cpu-us/MiB"])
	h.add("udp tcp", "cpu/MiB", t["cpu-us/MiB"])
	h.loads["udp"] = append(h.loads["udp"], load)
}

// table formats the medians as the README's markdown table.
func (h *harness) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rounds, medians; ratio: median of the rounds' ratios (the pair ran back to back); "+
		"load: 1-minute load average before each run (median; softroce / baseline)\n\n", h.rounds)
	b.WriteString("| measurement | softroce | baseline | ratio | load |\n|---|---|---|---|---|\n")
	ld := func(keys ...string) string {
		var s []string
		for _, k := range keys {
			if v := h.loads[k]; len(v) > 0 {
				s = append(s, fmt.Sprintf("%.2f", median(v)))
			}
		}
		return strings.Join(s, " / ")
	}
	// row prints one measurement: soft and base name the loads shown.
	row := func(name, soft, base, unit, format string, sk, sm, bk, bm string, bscale float64) {
		sv, ok1 := h.med(sk, sm)
		bv, ok2 := h.med(bk, bm)
		if !ok1 && !ok2 {
			return
		}
		f := func(v float64, ok bool) string {
			if !ok {
				return "—"
			}
			return fmt.Sprintf(format, v) + unit
		}
		ratio := "—"
		if r, ok := pairedRatio(h.vals[sk+"."+sm], h.vals[bk+"."+bm]); ok {
			ratio = fmt.Sprintf("%.2f×", r/bscale)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", name, f(sv, ok1), f(bv*bscale, ok2), ratio, ld(soft, base))
	}
	row("`write_bw -s 1048576` vs `tcp_bw`, two processes", "write_bw 1M", "tcp_bw 1M", " MiB/s", "%.0f", "write_bw 1M", "MiB/s", "tcp_bw 1M", "MiB/s", 1)
	row("4 KiB messages: `write_bw -s 4096` vs `tcp_bw -s 4096` (goal ≥ 0.5×)", "write_bw 4K", "tcp_bw 4K", " Mpps", "%.3f", "write_bw 4K", "Mpps", "tcp_bw 4K", "Mpps", 1)
	if v, ok := h.med("udp", "MiB/s"); ok {
		t, ok2 := h.med("tcp_bw 1M", "MiB/s")
		r := "—"
		if ok2 && t != 0 {
			r = fmt.Sprintf("%.2f×", v/t)
		}
		fmt.Fprintf(&b, "| raw UDP batched + GSO + GRO (link/udp %s) vs `tcp_bw` | %.0f MiB/s | %s | %s | %s |\n",
			strings.TrimPrefix(udpBench, "Benchmark"), v, fmtOpt(t, ok2, "%.0f MiB/s"), r, ld("udp", "tcp_bw 1M"))
	}
	row("raw UDP path's CPU per MiB vs a TCP stream, one process (link/udp Loopback: the floor under softroce's)", "udp", "udp", " µs", "%.0f", "udp", "cpu/MiB", "udp tcp", "cpu/MiB", 1)
	row("CPU per MiB, both processes, 1 MiB WRITE stream vs TCP stream", "write_bw 1M", "tcp_bw 1M", " µs", "%.0f", "write_bw 1M", "cpu/MiB", "tcp_bw 1M", "cpu/MiB", 1)
	row("CPU per MiB, both processes, 1 MiB WRITE stream vs the raw UDP floor above (goal ≤ 1.2×)", "write_bw 1M", "udp", " µs", "%.0f", "write_bw 1M", "cpu/MiB", "udp", "cpu/MiB", 1)
	row("context switches per MiB, both processes", "write_bw 1M", "tcp_bw 1M", "", "%.1f", "write_bw 1M", "cs/MiB", "tcp_bw 1M", "cs/MiB", 1)
	row("syscalls per MiB, both processes (traced round: perf stat, else strace)", "write_bw 1M strace", "tcp_bw 1M strace", "", "%.1f", "write_bw 1M", "calls/MiB", "tcp_bw 1M", "calls/MiB", 1)
	row("`send_lat -s 64` vs `tcp_lat`, typical", "send_lat 64", "tcp_lat 64", " µs", "%.2f", "send_lat 64", "typical", "tcp_lat 64", "typical", 1)
	row("`send_lat -s 64` vs `tcp_lat`, minimum", "send_lat 64", "tcp_lat 64", " µs", "%.2f", "send_lat 64", "min", "tcp_lat 64", "min", 1)
	row("`write_lat -s 64` vs `tcp_lat`, typical", "write_lat 64", "tcp_lat 64", " µs", "%.2f", "write_lat 64", "typical", "tcp_lat 64", "typical", 1)
	row("`rc_pingpong -s 64` round trip vs 2 × `tcp_lat` average", "rc_pingpong 64", "tcp_lat 64", " µs", "%.2f", "rc_pingpong 64", "rtt", "tcp_lat 64", "avg", 2)
	row("per ping-pong round trip, per side (`send_lat` vs `tcp_lat`): CPU", "send_lat 64", "tcp_lat 64", " µs", "%.1f", "send_lat 64", "cpu/rt", "tcp_lat 64", "cpu/rt", 1)
	row("per ping-pong round trip, per side: context switches", "send_lat 64", "tcp_lat 64", "", "%.2f", "send_lat 64", "cs/rt", "tcp_lat 64", "cs/rt", 1)
	row("per ping-pong round trip, per side: syscalls (traced round)", "send_lat 64 strace", "tcp_lat 64 strace", "", "%.2f", "send_lat 64", "calls/rt", "tcp_lat 64", "calls/rt", 1)
	row("per round trip, per side (`write_lat` vs `tcp_lat`): CPU", "write_lat 64", "tcp_lat 64", " µs", "%.1f", "write_lat 64", "cpu/rt", "tcp_lat 64", "cpu/rt", 1)
	row("demo 64 B half-RTT vs TCP (one process)", "demo", "demo", " µs", "%.2f", "demo", "lat", "demo", "tcplat", 1)
	row("demo 1 MiB WRITE bandwidth vs TCP (one process)", "demo", "demo", " GB/s", "%.2f", "demo", "bw", "demo", "tcpbw", 1)
	if _, ok := h.med("write_bw QP", "MiB/s"); ok {
		row(fmt.Sprintf("%d QPs × 1 MiB vs 1 QP (`write_bw -q %d -t %d`; goal within 20 %%)", h.qps, h.qps, h.qpDepth), "write_bw QP", "write_bw 1M", " MiB/s", "%.0f", "write_bw QP", "MiB/s", "write_bw 1M", "MiB/s", 1)
		fmt.Fprintf(&b, "\nDuring the %d-QP runs: UDP RcvbufErrors (system-wide /proc/net/snmp) %d; "+
			"retransmit timeouts %d and retry sequences %d (both processes' devices, from $SOFTROCE_STATS).\n",
			h.qps, h.rcvbufΔ, h.qpTimeouts, h.qpRetries)
	}
	return b.String()
}

func fmtOpt(v float64, ok bool, format string) string {
	if !ok {
		return "—"
	}
	return fmt.Sprintf(format, v)
}
