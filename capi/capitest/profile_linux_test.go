package capitest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCPUProfileEnv: SOFTROCE_CPUPROFILE makes the library write a Go CPU
// profile of a stock program's run ("%p" becoming its process ID), and a
// file it cannot create is one line on stderr, the program running on.
func TestCPUProfileEnv(t *testing.T) {
	needLib(t, "ibv_devinfo")
	dir := t.TempDir()
	a, _ := addrPair()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p := start(t, ctx, env(a, "SOFTROCE_CPUPROFILE="+filepath.Join(dir, "prof.%p")), "ibv_devinfo")
	if err := p.wait(); err != nil {
		t.Fatalf("%s", p)
	}
	b, err := os.ReadFile(filepath.Join(dir, "prof."+strconv.Itoa(p.cmd.Process.Pid)))
	if err != nil || len(b) == 0 {
		t.Fatalf("no profile (%v, %d bytes); files: %v", err, len(b), ls(dir))
	}
	p = start(t, ctx, env(a, "SOFTROCE_CPUPROFILE="+filepath.Join(dir, "no", "such", "dir")), "ibv_devinfo")
	if err := p.wait(); err != nil || !strings.Contains(p.stderr.String(), "SOFTROCE_CPUPROFILE") ||
		strings.Count(p.stderr.String(), "\n") != 1 {
		t.Fatalf("an unwritable profile file: want one line on stderr and exit 0:\n%s", p)
	}
}

func ls(dir string) []string {
	es, _ := os.ReadDir(dir)
	var n []string
	for _, e := range es {
		n = append(n, e.Name())
	}
	return n
}
