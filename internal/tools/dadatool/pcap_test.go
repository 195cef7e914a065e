package dadatool

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/tooltest"
)

// TestPcapOnDadaSend: "dada send" takes --pcap and opens the capture with
// its device (a path that cannot be created fails the run, naming --pcap).
func TestPcapOnDadaSend(t *testing.T) {
	a, _ := tooltest.LoopPair()
	var o, e strings.Builder
	code := run([]string{"dada", "send", "-c", "127.0.0.1", "-d", a, "-b", "4096", "--pcap", filepath.Join(t.TempDir(), "no", "x.pcap")}, &o, &e)
	if code != cli.ExitFailure || !strings.Contains(e.String(), "--pcap: ") {
		t.Errorf("exit %d, stderr %q; want 1 and the --pcap error", code, e.String())
	}
}
