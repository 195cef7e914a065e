package perftest

import (
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/tooltest"
)

// TestMeasureAgainstTCP runs write_bw and send_lat with perftest's default
// sizes next to the TCP baselines (tcp_bw, tcp_lat) in the same run and
// logs the result tables. It is a measurement, not a check: it runs only
// with SOFTROCE_MEASURE=1 (go test -run MeasureAgainstTCP -v).
func TestMeasureAgainstTCP(t *testing.T) {
	if os.Getenv("SOFTROCE_MEASURE") != "1" {
		t.Skip("measurement: set SOFTROCE_MEASURE=1 to run")
	}
	bin := tooltest.Binary(t)
	tail := func(s string) string {
		lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
		return strings.Join(lines[max(len(lines)-3, 0):], "\n")
	}
	for _, run := range []struct {
		tool string
		args []string
	}{
		{"write_bw", []string{"-s", "65536", "-n", "5000"}},
		{"tcp_bw", []string{"-s", "65536", "-n", "5000"}},
		{"send_lat", []string{"-s", "2", "-n", "1000"}},
		{"tcp_lat", []string{"-s", "2", "-n", "1000"}},
	} {
		sa, ca := tooltest.LoopPair()
		port := strconv.Itoa(tooltest.FreeTCPPort(t))
		srv := append([]string{bin, run.tool, "-p", port}, run.args...)
		cli := append([]string{bin, run.tool, "-p", port}, run.args...)
		if strings.HasPrefix(run.tool, "tcp") {
			srv = append(srv, "-d", sa)
			cli = append(cli, "-d", ca, sa)
		} else {
			srv = append(srv, "-d", sa)
			cli = append(cli, "-d", ca, "127.0.0.1")
		}
		s, c := tooltest.RunPair(t, 120*time.Second, srv, cli)
		if s.Code != 0 || c.Code != 0 {
			t.Fatalf("%s: server %v\nclient %v", run.tool, s, c)
		}
		t.Logf("%s %s (client):\n%s", run.tool, strings.Join(run.args, " "), tail(c.Stdout))
	}
}

// TestLatClockNotScanned: a latency run's post times (-n: one per
// iteration, allocated up front) hold no pointers, so the collector does
// not scan them. As []time.Time, send_lat -n 100000000's 2.4 GB took 16 s
// of one processor's time to mark, and the exit waited for it (TestKill9).
func TestLatClockNotScanned(t *testing.T) {
	const iters = 1 << 23
	r := &resources{c: &config{tool: toolSpec{lat: true, verb: verbSend}, iters: iters}}
	lc, stop := r.startLat(newProgress(r.c, io.Discard))
	defer stop()
	lc.posted()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Skip("no /gc/scan/heap:bytes metric")
	}
	// The buffer itself is 8 bytes an iteration: what the collector scans
	// must be less than that (the test binary's own heap is a few MB).
	if scan := s[0].Value.Uint64(); scan >= 8*iters {
		t.Errorf("the collector scans %d MB of heap with a %d-iteration latency run's clock: its post times hold pointers", scan>>20, iters)
	}
	runtime.KeepAlive(lc)
}
