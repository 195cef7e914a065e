package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/capibuild"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/internal/tooltest"
)

// TestProfileEnv: SOFTROCE_CPUPROFILE and SOFTROCE_TRACE write a profile
// and a trace of any command; a file that cannot be created is one line
// naming the variable and exit 1, before the command runs.
func TestProfileEnv(t *testing.T) {
	dir := t.TempDir()
	prof, tr := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "run.trace")
	t.Setenv(envCPUProfile, prof)
	t.Setenv(envTrace, tr)
	var o, e strings.Builder
	if code := run([]string{"devinfo", "-h"}, &o, &e); code != 0 {
		t.Fatalf("devinfo -h with profiling: exit %d, %s", code, e.String())
	}
	for _, f := range []string{prof, tr} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (size %d), want a non-empty file", f, err, sizeOf(st))
		}
	}
	for _, env := range []string{envCPUProfile, envTrace} {
		t.Setenv(envCPUProfile, "")
		t.Setenv(envTrace, "")
		t.Setenv(env, filepath.Join(dir, "missing", "x"))
		o.Reset()
		e.Reset()
		code := run([]string{"devinfo", "-h"}, &o, &e)
		lines := strings.Split(strings.TrimSpace(e.String()), "\n")
		if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], env) || o.Len() != 0 {
			t.Errorf("%s unwritable: exit %d, stderr %q, stdout %q; want exit 1 and one line naming it", env, code, e.String(), o.String())
		}
	}
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return -1
	}
	return st.Size()
}

// TestLogEnv: SOFTROCE_LOG gives the tools' devices and CM agents a logger
// on stderr: an rping exchange at debug shows the CM's MADs on both sides.
// An unknown level is one line naming the variable and exit 1, before the
// command runs; unset, the library is silent.
func TestLogEnv(t *testing.T) {
	t.Setenv(toolkit.LogEnv, "loud")
	var o, e strings.Builder
	code := run([]string{"devinfo", "-h"}, &o, &e)
	lines := strings.Split(strings.TrimSpace(e.String()), "\n")
	if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], toolkit.LogEnv) || o.Len() != 0 {
		t.Errorf("%s=loud: exit %d, stderr %q, stdout %q; want exit 1 and one line naming it", toolkit.LogEnv, code, e.String(), o.String())
	}

	bin := tooltest.Binary(t)
	for _, level := range []string{"debug", ""} {
		t.Setenv(toolkit.LogEnv, level)
		sa, ca := tooltest.LoopPair()
		port := strconv.Itoa(tooltest.FreeTCPPort(t))
		s, c := tooltest.RunPair(t, 30*time.Second,
			[]string{bin, "rping", "-s", "-a", sa, "-p", port, "-C", "2"},
			[]string{bin, "rping", "-c", "-a", sa, "-I", ca, "-p", port, "-C", "2"})
		if s.Code != 0 || c.Code != 0 {
			t.Fatalf("%s=%q: server %v\nclient %v", toolkit.LogEnv, level, s, c)
		}
		for side, r := range map[string]tooltest.ProcResult{"server": s, "client": c} {
			if got := strings.Contains(r.Stderr, `msg="cm send"`); got != (level == "debug") {
				t.Errorf("%s=%q: %s's stderr has the CM's debug logs: %v, want %v\n%s", toolkit.LogEnv, level, side, got, level == "debug", r.Stderr)
			}
		}
	}
}

// TestExecProfileEnv: softroce exec leaves SOFTROCE_CPUPROFILE and
// SOFTROCE_TRACE to the program it runs. A profile it started itself
// would keep its timer across the exec, and the first SIGPROF would kill
// a program that does not handle it (mpirun did).
func TestExecProfileEnv(t *testing.T) {
	bin := tooltest.Binary(t)
	dir := t.TempDir()
	prof, tr := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "run.trace")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A few tenths of a second of the shell's own CPU: a profile timer
	// fires every 10 ms of it.
	// sh loads no RDMA library: a stand-in file satisfies exec's check.
	lib := filepath.Join(dir, "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, capibuild.Lib), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "exec", "-L", lib, "--", "sh", "-c",
		`i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo survived`)
	cmd.Env = append(os.Environ(), envCPUProfile+"="+prof, envTrace+"="+tr)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "survived" {
		t.Fatalf("softroce exec with %s set: %v, output %q; want the program to run to its end", envCPUProfile, err, out)
	}
	for _, f := range []string{prof, tr} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s was created: softroce exec profiled itself", f)
		}
	}
}
