package capitest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCPUProfileEnv: SOFTROCE_CPUPROFILE and SOFTROCE_TRACE make the
// library write a Go CPU profile and an execution trace of a stock
// program's run ("%p" becoming its process ID), and a file it cannot
// create is one line on stderr, the program running on.
func TestCPUProfileEnv(t *testing.T) {
	needLib(t, "ibv_devinfo")
	for _, v := range []string{"SOFTROCE_CPUPROFILE", "SOFTROCE_TRACE"} {
		dir := t.TempDir()
		a, _ := addrPair()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		p := start(t, ctx, env(a, v+"="+filepath.Join(dir, "prof.%p")), "ibv_devinfo")
		if err := p.wait(); err != nil {
			t.Fatalf("%s: %s", v, p)
		}
		b, err := os.ReadFile(filepath.Join(dir, "prof."+strconv.Itoa(p.cmd.Process.Pid)))
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: no file (%v, %d bytes); files: %v", v, err, len(b), ls(dir))
		}
		if v == "SOFTROCE_TRACE" && !strings.HasPrefix(string(b), "go 1.") {
			t.Fatalf("%s: the file does not start as a Go execution trace: %q", v, b[:min(len(b), 16)])
		}
		p = start(t, ctx, env(a, v+"="+filepath.Join(dir, "no", "such", "dir")), "ibv_devinfo")
		if err := p.wait(); err != nil || !strings.Contains(p.stderr.String(), v) ||
			strings.Count(p.stderr.String(), "\n") != 1 {
			t.Fatalf("%s: an unwritable file: want one line on stderr and exit 0:\n%s", v, p)
		}
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

// TestCPUProfileSignals: with a profile asked for, a signal the program
// ignores (a shell's background job ignores SIGINT) stays ignored, and
// SIGTERM still ends it, the profile written first.
func TestCPUProfileSignals(t *testing.T) {
	needLib(t, "rping")
	dir := t.TempDir()
	a, _ := addrPair()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	port := freePort(t)
	p := start(t, ctx, env(a, "SOFTROCE_CPUPROFILE="+filepath.Join(dir, "prof")),
		"sh", "-c", `trap "" INT; exec rping -s -a `+a+` -p `+strconv.Itoa(port))
	// The profile file is made as the library loads, just before the
	// signal handling is set up.
	prof := filepath.Join(dir, "prof")
	waitReady(t, p, "start its profile", func() bool { _, err := os.Stat(prof); return err == nil })
	time.Sleep(300 * time.Millisecond)
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
		t.Fatalf("an ignored SIGINT ended the program:\n%s", p)
	case <-time.After(500 * time.Millisecond):
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("SIGTERM did not end the program in 10 s:\n%s", p)
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("want death by SIGTERM:\n%s", p)
	}
	if b, err := os.ReadFile(prof); err != nil || len(b) == 0 {
		t.Fatalf("no profile (%v, %d bytes)", err, len(b))
	}
}
