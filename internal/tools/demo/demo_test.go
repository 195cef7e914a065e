package demo

import (
	"bytes"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/cli"
)

func TestDemo(t *testing.T) {
	for _, args := range [][]string{{"demo", "-pipe", "-time", "50ms"}, {"demo", "-a", "127.0.0.1:0", "-b", "127.0.0.2:0", "-time", "50ms"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out.String(), errb.String())
		}
		s := out.String()
		for _, want := range []string{"SEND", "RDMA WRITE 1 MiB             ok", "RDMA READ 1 MiB              ok",
			"ATOMIC CMP_AND_SWP           ok", "ATOMIC FETCH_AND_ADD         ok", "bandwidth (1 MiB RDMA WRITE)", "latency (64 B SEND half-RTT)"} {
			if !strings.Contains(s, want) {
				t.Fatalf("%v: output lacks %q:\n%s", args, want, s)
			}
		}
	}
}

// TestDemoExplicitAddressNoFallback: an address given with -a that cannot
// be opened fails the demo (it used to fall back to the in-memory link and
// exit 0).
func TestDemoExplicitAddressNoFallback(t *testing.T) {
	var o, e strings.Builder
	code := run([]string{"demo", "-a", "192.0.2.1:4791", "-time", "10ms"}, &o, &e)
	if code != cli.ExitFailure || !strings.Contains(e.String(), "demo: -a 192.0.2.1:4791") || strings.Contains(o.String(), "link/pipe") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and the -a error", code, o.String(), e.String())
	}
}
