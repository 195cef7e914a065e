package perftest

import (
	"os"
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
