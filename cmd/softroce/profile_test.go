package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
