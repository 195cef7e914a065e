package perftest

import (
	"bufio"
	"math"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/verbs"
)

// capturedLines returns the lines of a testdata output of the real tool.
func capturedLines(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// linesBetween returns the lines from the first one with prefix from up to
// and including the next one equal to the result line after it.
func bannerLines(lines []string) []string {
	for i, l := range lines {
		if strings.HasPrefix(l, "                    ") {
			for j := i + 1; j < len(lines); j++ {
				if lines[j]+"\n" == resultLine {
					return lines[i-1 : j+1]
				}
			}
		}
	}
	return nil
}

func gid4(a string) [16]byte { return netip.MustParseAddr("::ffff:" + a).As16() }

// TestPerftestBannerMatchesCapture prints softroce's banner with the
// parameters of each captured perftest run and compares it, line by line,
// with what perftest 4.5 printed over kernel rxe.
func TestPerftestBannerMatchesCapture(t *testing.T) {
	for _, tc := range []struct {
		tool, side string
		iters      int
		size       int
		atomic     string
	}{
		{"write_bw", "client", 50, 4096, ""}, {"write_bw", "server", 50, 4096, ""},
		{"send_bw", "client", 50, 2048, ""}, {"send_bw", "server", 50, 2048, ""},
		{"read_bw", "client", 20, 4096, ""}, {"read_bw", "server", 20, 4096, ""},
		{"atomic_bw", "client", 50, 0, ""}, {"atomic_bw", "server", 50, 0, ""},
		{"write_lat", "client", 20, 64, ""}, {"write_lat", "server", 20, 64, ""},
		{"send_lat", "client", 20, 64, ""}, {"send_lat", "server", 20, 64, ""},
		{"read_lat", "client", 20, 64, ""}, {"read_lat", "server", 20, 64, ""},
		{"atomic_lat", "client", 20, 0, "CMP_AND_SWAP"}, {"atomic_lat", "server", 20, 0, "CMP_AND_SWAP"},
	} {
		t.Run(tc.tool+"/"+tc.side, func(t *testing.T) {
			tool := toolNamed(t, tc.tool)
			c := &config{tool: tool, ibPort: 1, numQP: 1, gidx: 1, conn: "RC", iters: tc.iters, itersSet: true,
				atomicType: "FETCH_AND_ADD", txDepth: -1, rxDepth: -1, cqMod: -1, outReads: -1, qpTimeout: 14}
			if tc.size != 0 {
				c.size, c.sizeSet = tc.size, true
			}
			if tc.atomic != "" {
				c.atomicType = tc.atomic
			}
			if tc.side == "client" {
				c.server = "10.77.0.11"
			}
			if msg := c.finish(); msg != "" {
				t.Fatal(msg)
			}
			var b strings.Builder
			c.printBanner(&b, "rxe0", verbs.MTU1024)
			got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			want := bannerLines(capturedLines(t, "perftest_"+tc.tool+"_"+tc.side+".txt"))
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("banner differs from perftest's (-perftest +softroce):\n%s", d)
			}
		})
	}
}

func TestPerftestAddressLinesMatchCapture(t *testing.T) {
	srv, cli := gid4("10.77.0.11"), gid4("10.77.0.12")
	for _, tc := range []struct {
		tool        string
		local, peer oob.PerftestDest
	}{
		{"write_bw", oob.PerftestDest{QPN: 0x19, PSN: 0x4a4880, RKey: 0x7f0, VAddr: 0x560cc82d4000, GID: cli},
			oob.PerftestDest{QPN: 0x19, PSN: 0xf725bc, RKey: 0x7b2, VAddr: 0x556b0c2a6000, GID: srv}},
		{"read_bw", oob.PerftestDest{QPN: 0x1c, PSN: 0x4d93e1, OutReads: 0x80, RKey: 0xa18, VAddr: 0x55f04212a000, GID: cli},
			oob.PerftestDest{QPN: 0x1c, PSN: 0x625713, OutReads: 0x80, RKey: 0xaff, VAddr: 0x558cf1998000, GID: srv}},
		{"send_lat", oob.PerftestDest{QPN: 0x1e, PSN: 0x2f3ea9, GID: cli}, oob.PerftestDest{QPN: 0x1e, PSN: 0x1644a8, GID: srv}},
		{"atomic_bw", oob.PerftestDest{QPN: 0x1f, PSN: 0x7d9e82, GID: cli}, oob.PerftestDest{QPN: 0x1f, PSN: 0x46a3ff, GID: srv}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			c := config{tool: toolNamed(t, tc.tool)}
			var b strings.Builder
			c.printDest(&b, "local", &tc.local)
			c.printDest(&b, "remote", &tc.peer)
			lines := capturedLines(t, "perftest_"+tc.tool+"_client.txt")
			var want []string
			for i, l := range lines {
				if strings.HasPrefix(l, " local address:") {
					want = lines[i : i+4]
				}
			}
			if d := cmp.Diff(want, strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")); d != "" {
				t.Errorf("(-perftest +softroce):\n%s", d)
			}
		})
	}
}

func TestPerftestResultLinesMatchCapture(t *testing.T) {
	bw := []struct {
		file string
		rep  oob.BWReport
	}{
		{"perftest_write_bw_client.txt", oob.BWReport{Size: 4096, Iters: 50, BWPeak: 13.55, BWAvg: 12.92, MsgRateAvg: 0.003309}},
		{"perftest_send_bw_server.txt", oob.BWReport{Size: 2048, Iters: 50, BWPeak: 0, BWAvg: 11.66, MsgRateAvg: 0.005972}},
		{"perftest_atomic_bw_client.txt", oob.BWReport{Size: 8, Iters: 50, BWPeak: 0.08, BWAvg: 0.07, MsgRateAvg: 0.009263}},
	}
	for _, tc := range bw {
		lines := capturedLines(t, tc.file)
		want := lines[len(lines)-2] + "\n"
		if got := bwLine(tc.rep); got != want {
			t.Errorf("%s:\n got %q\nwant %q", tc.file, got, want)
		}
		if h := lines[len(lines)-3] + "\n"; h != " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" {
			t.Errorf("%s: header %q", tc.file, h)
		}
	}
	lat := []struct {
		file string
		size int
		v    [7]float64
	}{
		{"perftest_write_lat_server.txt", 64, [7]float64{235.28, 1731.17, 316.15, 382.27, 158.83, 1731.17, 1731.17}},
		{"perftest_send_lat_client.txt", 64, [7]float64{255.16, 1063.88, 362.81, 472.99, 219.44, 1063.88, 1063.88}},
		{"perftest_send_lat_server.txt", 64, [7]float64{271.54, 964.53, 377.61, 462.62, 201.08, 964.53, 964.53}},
	}
	for _, tc := range lat {
		lines := capturedLines(t, tc.file)
		if got, want := latLine(tc.size, 20, tc.v), lines[len(lines)-2]+"\n"; got != want {
			t.Errorf("%s:\n got %q\nwant %q", tc.file, got, want)
		}
		var b strings.Builder
		c := config{tool: toolSpec{lat: true}}
		c.printResultHeader(&b)
		if got, want := b.String(), lines[len(lines)-3]+"\n"; got != want {
			t.Errorf("%s header:\n got %q\nwant %q", tc.file, got, want)
		}
	}
}

func TestCHexAlt(t *testing.T) {
	for _, tc := range []struct {
		v     uint64
		width int
		want  string
	}{
		{0, 4, "0000"}, {0x19, 6, "0x0019"}, {0xf725bc, 6, "0xf725bc"}, {0x80, 4, "0x80"},
		{0x7b2, 8, "0x0007b2"}, {0x556b0c2a6000, 16, "0x00556b0c2a6000"}, {0x1234567, 4, "0x1234567"},
	} {
		if got := cHexAlt(tc.v, tc.width); got != tc.want {
			t.Errorf("cHexAlt(%#x, %d) = %q, want %q", tc.v, tc.width, got, tc.want)
		}
	}
}

func TestPerftestLatencyStatistics(t *testing.T) {
	// 19 deltas (20 iterations) of 2, 4, ..., 38 µs round trips: SEND
	// latency halves them (1..19 µs). As perftest's print_report_lat, the
	// statistics leave the 2 largest out (m = 17 samples, 1..17): median
	// and average 9, stdev sqrt(408/17) from whole-µs distances; t_max and
	// both percentiles index the sorted samples at 17 (18 µs), as perftest's
	// output for 20 iterations repeats its t_max.
	var r sizeResult
	r.size = 64
	for i := 1; i <= 19; i++ {
		r.lat = append(r.lat, micros(2*i))
	}
	c := &config{tool: toolSpec{lat: true, verb: verbSend}, iters: 20}
	var b strings.Builder
	c.printResult(&b, r)
	want := latLine(64, 20, [7]float64{1, 18, 9, 9, 4.898979485566356, 18, 18})
	if b.String() != want {
		t.Errorf("got  %q\nwant %q", b.String(), want)
	}
}

func TestPerftestFinishRefusals(t *testing.T) {
	for _, tc := range []struct {
		tool string
		mod  func(c *config)
		want string
	}{
		{"read_bw", func(c *config) { c.conn = "UC" }, "UC connection is supported only"},
		{"write_bw", func(c *config) { c.conn = "UD" }, "UD connection is supported only by the send tests"},
		{"atomic_bw", func(c *config) { c.size, c.sizeSet = 64, true }, "8-byte"},
		{"write_bw", func(c *config) { c.iters, c.itersSet = 3, true }, "between 5 and"},
		{"send_lat", func(c *config) { c.numQP = 2 }, "one QP"},
		{"write_lat", func(c *config) { c.duration, c.all = 2, true }, "-D and -a cannot be combined"},
		{"write_bw", func(c *config) { c.gidx = -1 }, "GID index is required"},
		{"write_bw", func(c *config) { c.mtu = 1500 }, "MTU must be"},
		{"write_bw", func(c *config) { c.output = "latency" }, "Output verbosity level for BW can be: bandwidth, message_rate"},
		{"send_lat", func(c *config) { c.output = "bandwidth" }, "Output verbosity level for LAT can be: latency"},
		{"read_bw", func(c *config) { c.output = "bw" }, "Invalid verbosity level output flag. Please use bandwidth, latency, message_rate"},
	} {
		c := config{tool: toolNamed(t, tc.tool)}
		c.ibPort, c.numQP, c.gidx, c.conn, c.atomicType = 1, 1, 1, "RC", "FETCH_AND_ADD"
		c.txDepth, c.rxDepth, c.cqMod, c.outReads = -1, -1, -1, -1
		tc.mod(&c)
		if got := c.finish(); !strings.Contains(got, tc.want) {
			t.Errorf("%s: finish() = %q, want it to contain %q", tc.tool, got, tc.want)
		}
	}
}

func micros(n int) time.Duration { return time.Duration(n) * time.Microsecond }

// TestPerftestMarginDefault: -f defaults to a quarter of -D, rounded down
// (perftest's DEF_INIT_MARGIN rule); a given -f is kept; without -D it is
// unused, but perftest still refuses one of half its default -D or more.
func TestPerftestMarginDefault(t *testing.T) {
	wb := toolNamed(t, "write_bw")
	for _, tc := range []struct {
		args   []string
		margin int
		refuse bool
	}{
		{[]string{"-D", "3"}, 0, false},
		{[]string{"-D", "4"}, 1, false},
		{[]string{"-D", "9"}, 2, false},
		{[]string{"-D", "9", "-f", "4"}, 4, false},
		{[]string{"-D", "9", "-f", "0"}, 0, false},
		{[]string{"-D", "8", "-f", "4"}, 0, true},
		{[]string{"-n", "100"}, -1, false},
		{[]string{"-n", "100", "-f", "2"}, 2, false},
		{[]string{"-n", "100", "-f", "3"}, 0, true},
	} {
		var out, errb strings.Builder
		c, code, ok := parseArgs(wb, tc.args, &out, &errb)
		switch {
		case tc.refuse:
			if ok || code != cli.ExitUsage || !strings.Contains(errb.String(), "DURATION > 2*MARGIN") {
				t.Errorf("%q: ok %v code %d stderr %q, want the margin refused", tc.args, ok, code, errb.String())
			}
		case !ok:
			t.Errorf("%q: refused: %s", tc.args, errb.String())
		case c.margin != tc.margin:
			t.Errorf("%q: margin %d, want %d", tc.args, c.margin, tc.margin)
		}
	}
}

// TestSampler: a -D run's measured period is [start+margin,
// start+duration-margin); what completes outside it is not counted, and
// the period's length is the time measured.
func TestSampler(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	c := &config{duration: 4, margin: 1}
	s := c.sampler(start)
	for _, e := range []struct {
		ms int
		n  uint64
	}{{0, 100}, {999, 7}, {1000, 1}, {2000, 2}, {2999, 4}, {3000, 50}, {4500, 9}} {
		s.add(at(e.ms), e.n)
	}
	n, secs := s.result()
	if n != 7 || secs != 2 {
		t.Errorf("counted %d in %v s, want 7 in 2 s", n, secs)
	}
	for _, c := range []*config{{duration: 3, margin: 0}, {duration: 0, margin: -1}, {duration: 0, margin: 2}} {
		if c.sampler(start) != nil {
			t.Errorf("-D %d -f %d: a sampler, want none (the whole run is measured)", c.duration, c.margin)
		}
	}
}

// TestDurationLatEmpty: a -D latency run with nothing completed in its
// measured period is an error that says what to change, not an average of
// zero iterations.
func TestDurationLatEmpty(t *testing.T) {
	start := time.Now().Add(-3 * time.Second)
	smp := (&config{duration: 3, margin: 1}).sampler(start)
	smp.add(start.Add(100*time.Millisecond), 5) // in the first margin only
	if _, err := durationLat(smp, start, 5); err == nil || !strings.Contains(err.Error(), "longer -D or a shorter -f") {
		t.Errorf("err %v, want the empty period refused with what to change", err)
	}
	smp.add(start.Add(1500*time.Millisecond), 4)
	if lr, err := durationLat(smp, start, 9); err != nil || lr.iters != 4 || lr.avg != 250*time.Millisecond {
		t.Errorf("got %+v, %v; want 4 iterations at 250 ms each (the 1 s period)", lr, err)
	}
}

// TestNoResult: a bandwidth run with no iteration in its -D period says
// how much must be sent before any QP's first completion, and what to
// change; other empty runs keep the plain message.
func TestNoResult(t *testing.T) {
	bw, lat := toolSpec{name: "write_bw"}, toolSpec{name: "write_lat", lat: true}
	for _, tc := range []struct {
		c    config
		want string // "" : no hint
	}{
		{config{tool: bw, duration: 3, cqMod: 100, numQP: 256}, "-Q 100 messages: its first needs 25600 MiB sent over the 256 QPs"},
		{config{tool: bw, duration: 3, cqMod: 1, numQP: 256}, ""},
		{config{tool: bw, cqMod: 100, numQP: 256}, ""},
		{config{tool: lat, duration: 3, cqMod: 100, numQP: 1}, ""},
	} {
		msg := tc.c.noResult(1 << 20).Error()
		if !strings.HasPrefix(msg, "no iteration of 1048576 bytes completed: no result to report") ||
			tc.want == "" && strings.Contains(msg, "(") || tc.want != "" && !strings.Contains(msg, tc.want) {
			t.Errorf("%+v: %q, want the hint %q", tc.c, msg, tc.want)
		}
	}
}

// TestRateOptions: the rate limiter's options as perftest checks them,
// with its messages and defaults, and the rate each unit gives.
func TestRateOptions(t *testing.T) {
	for _, tc := range []struct {
		tool   string
		args   []string
		refuse string  // part of the message; "" : accepted
		pps    float64 // messages/s for 65536-byte messages
		burst  int
	}{
		{"write_bw", nil, "", 0, 0},
		{"write_bw", []string{"--rate_limit=8", "--rate_limit_type=SW"}, "", 8e9 / (65536 * 8), 128},
		{"write_bw", []string{"--rate_limit=64", "--rate_units=M", "--rate_limit_type=SW", "--burst_size=4"}, "", 1024, 4},
		{"send_bw", []string{"--rate_limit=300", "--rate_units=p", "--rate_limit_type=SW", "-t", "16"}, "", 300, 16},
		{"write_bw", []string{"--rate_limit=8"}, "use --rate_limit_type=SW", 0, 0},
		{"write_bw", []string{"--rate_limit=8", "--rate_limit_type=PP"}, "Packet Pacing is only supported for Raw Ethernet.", 0, 0},
		{"write_bw", []string{"--rate_limit=8", "--rate_limit_type=sw"}, "Please use HW, SW or PP.", 0, 0},
		{"write_bw", []string{"--rate_limit=0", "--rate_limit_type=SW"}, "Rate limit must be", 0, 0},
		{"write_bw", []string{"--rate_limit=x", "--rate_limit_type=SW"}, "Rate limit must be", 0, 0},
		{"write_bw", []string{"--rate_limit=8", "--rate_units=K", "--rate_limit_type=SW"}, "Please use M,g or p", 0, 0},
		{"write_bw", []string{"--burst_size=4"}, "Can't enable burst mode when rate limiter is off", 0, 0},
		{"write_bw", []string{"--rate_limit_type=SW"}, "needs a rate", 0, 0},
		{"atomic_bw", []string{"--rate_limit=1", "--rate_limit_type=SW"}, "SW Rate limiter cann't be executed", 0, 0},
		{"write_lat", []string{"--rate_limit=1", "--rate_limit_type=SW"}, "SW Rate limiter cann't be executed", 0, 0},
	} {
		c := parseWant(t, tc.tool, tc.args, tc.refuse)
		if c == nil {
			continue
		}
		if pps := c.ratePPS(65536); math.Abs(pps-tc.pps) > 1e-9 || c.burstSize != tc.burst {
			t.Errorf("%s %q: %v messages/s in bursts of %d, want %v and %d", tc.tool, tc.args, pps, c.burstSize, tc.pps, tc.burst)
		}
	}
}

// TestPacer: bursts of burst messages every burst/pps seconds, deadlines
// adding up so that a late client catches up; nil lets everything through.
func TestPacer(t *testing.T) {
	start := time.Now()
	p := newPacer(1000, 10, start) // a burst every 10 ms
	for i := range 10 {
		if !p.open(start) || !p.sending() {
			t.Fatalf("message %d of the first burst held back", i)
		}
		p.sent()
	}
	if p.sending() || p.open(start.Add(9*time.Millisecond)) || p.wait(start.Add(4*time.Millisecond)) != 6*time.Millisecond {
		t.Fatalf("the second burst may start before 10 ms (wait %v)", p.wait(start.Add(4*time.Millisecond)))
	}
	// 35 ms late: the bursts due at 10, 20 and 30 ms go at once, then 40.
	late := start.Add(45 * time.Millisecond)
	for b := range 4 {
		if !p.open(late) {
			t.Fatalf("catch-up burst %d held back", b)
		}
		for range 10 {
			p.sent()
		}
	}
	if p.open(late) || p.wait(late) != 5*time.Millisecond {
		t.Fatalf("after catching up: wait %v, want 5ms (the burst due at 50 ms)", p.wait(late))
	}
	var none *pacer
	if !none.open(start) || !none.sending() || none.wait(start) != 0 || newPacer(0, 10, start) != nil {
		t.Fatal("no limit must let everything through")
	}
	none.sent()
}

// TestLimitOptions: -w and -y parse as perftest's (a negative value is
// its "Invalid Minimum ... Limit") and apply to bandwidth tests only.
func TestLimitOptions(t *testing.T) {
	for _, tc := range []struct {
		tool     string
		args     []string
		refuse   string
		bw, rate float64
	}{
		{"write_bw", nil, "", -1, -1},
		{"write_bw", []string{"-w", "2500.5", "-y", "0.3"}, "", 2500.5, 0.3},
		{"send_bw", []string{"--limit_bw=0"}, "", 0, -1},
		{"write_bw", []string{"-w", "-1"}, "Invalid Minimum BW Limit", 0, 0},
		{"write_bw", []string{"-y", "x"}, "Invalid Minimum msgRate Limit", 0, 0},
		{"send_lat", []string{"-w", "1"}, "check the result of a bandwidth test", 0, 0},
	} {
		c := parseWant(t, tc.tool, tc.args, tc.refuse)
		switch {
		case c == nil:
		case c.limitBW != tc.bw || c.limitRate != tc.rate:
			t.Errorf("%s %q: limits %v and %v, want %v and %v", tc.tool, tc.args, c.limitBW, c.limitRate, tc.bw, tc.rate)
		}
	}
}

// TestSRQOptions: --use-srq belongs to the send tests (perftest's
// message otherwise) and needs an SRQ entry for each QP's buffer.
func TestSRQOptions(t *testing.T) {
	for _, tc := range []struct {
		tool   string
		args   []string
		refuse string
	}{
		{"send_bw", []string{"--use-srq", "-q", "8"}, ""},
		{"send_lat", []string{"--use-srq"}, ""},
		{"write_bw", []string{"--use-srq"}, "Using SRQ only avavilible in SEND / SEND_IMM tests."},
		{"send_bw", []string{"--use-srq", "-q", "8", "-r", "4"}, "give -r at least -q"},
	} {
		if c := parseWant(t, tc.tool, tc.args, tc.refuse); c != nil && !c.useSRQ {
			t.Errorf("%s %q: SRQ off", tc.tool, tc.args)
		}
	}
}

// TestCPU: /proc/stat's first line gives user and idle time; the
// utilisation is user over user plus idle between the period's two
// samples, 0 when one is missing, and a nil sampler reports 0.
func TestCPU(t *testing.T) {
	for _, tc := range []struct {
		in         string
		user, idle uint64
		ok         bool
	}{
		{"cpu  4705 356 584 3699 23 23 0 0 0 0\ncpu0 1 2 3 4 5\n", 4705, 3699, true},
		{"cpu 1 2 3 4\n", 1, 4, true},
		{"cpu0 1 2 3 4 5\n", 0, 0, false},
		{"cpu 1 2 3\n", 0, 0, false},
		{"", 0, 0, false},
	} {
		u, i, ok := parseProcStat(bufio.NewReader(strings.NewReader(tc.in)))
		if u != tc.user || i != tc.idle || ok != tc.ok {
			t.Errorf("%q: %d %d %v, want %d %d %v", tc.in, u, i, ok, tc.user, tc.idle, tc.ok)
		}
	}
	p := &cpuUsage{user: [2]uint64{100, 175}, idle: [2]uint64{50, 75}, have: [2]bool{true, true}}
	if got := p.util(); got != 75 {
		t.Errorf("util %v, want 75 (75 user against 25 idle)", got)
	}
	if got := (&cpuUsage{user: [2]uint64{100, 175}, have: [2]bool{false, true}}).util(); got != 0 {
		t.Errorf("util without the first sample %v, want 0", got)
	}
	var none *cpuUsage
	if none.util() != 0 || (&config{duration: 3}).cpuSampler(time.Now()) != nil || (&config{cpuUtil: true}).cpuSampler(time.Now()) != nil {
		t.Error("no sampler without --cpu_util and -D")
	}
}

// TestRetryCount: --retry_count sets the rdma_cm connections' retry
// count (the test QPs' RNR retry too, the side channel's RNR retry stays
// 7), as perftest's; the CM carries 3 bits of it.
func TestRetryCount(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		want   uint8
		refuse bool
	}{
		{nil, 7, false},
		{[]string{"--retry_count=3"}, 3, false},
		{[]string{"--retry_count", "0"}, 0, false},
		{[]string{"--retry_count=8"}, 0, true},
		{[]string{"--report-both"}, 7, false}, // accepted: only bidirectional runs report both ways
	} {
		refuse := ""
		if tc.refuse {
			refuse = "0..7"
		}
		c := parseWant(t, "write_bw", append([]string{"-R"}, tc.args...), refuse)
		if c == nil {
			continue
		}
		p, comm := c.cmParam(), cmCommParam(c.cmRetry())
		if p.RetryCount != tc.want || p.RNRRetryCount != tc.want || comm.RetryCount != tc.want || comm.RNRRetryCount != 7 {
			t.Errorf("%q: test QPs %d/%d, side channel %d/%d; want %d/%d and %d/7", tc.args,
				p.RetryCount, p.RNRRetryCount, comm.RetryCount, comm.RNRRetryCount, tc.want, tc.want, tc.want)
		}
	}
}

// TestVersion: -V prints perftest's version line, the release whose
// side channel softroce speaks, and nothing runs.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"-V"}, {"--version", "-s", "8"}} {
		var out, errb strings.Builder
		_, code, ok := parseArgs(tools[0], args, &out, &errb)
		if ok || code != cli.ExitOK || out.String() != "Version: 6.06\n" || errb.Len() != 0 {
			t.Errorf("%q: ok %v code %d stdout %q stderr %q, want \"Version: 6.06\" and exit 0", args, ok, code, out.String(), errb.String())
		}
	}
}

// parseWant parses args of the named tool. With refuse set, the command
// must be refused with a message holding it (nil is returned); without,
// it must be accepted.
func parseWant(t *testing.T, tool string, args []string, refuse string) *config {
	t.Helper()
	var out, errb strings.Builder
	c, code, ok := parseArgs(toolNamed(t, tool), args, &out, &errb)
	switch {
	case refuse != "":
		if ok || code != cli.ExitUsage || !strings.Contains(errb.String(), refuse) {
			t.Errorf("%s %q: ok %v code %d stderr %q, want refused with %q", tool, args, ok, code, errb.String(), refuse)
		}
		return nil
	case !ok:
		t.Errorf("%s %q: refused: %s", tool, args, errb.String())
		return nil
	}
	return c
}
