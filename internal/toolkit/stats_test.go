package toolkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

func TestStatsFile(t *testing.T) {
	a, b, err := verbs.OpenPipe(pipe.Config{}, pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	a.Stats().RetryTimeouts.Add(3)
	a.Stats().TxPackets.Add(7)
	b.Stats().RetryTimeouts.Add(2)

	t.Setenv(StatsEnv, "")
	if err := appendStats(a); err != nil { // unset: nothing written, no error
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "stats")
	t.Setenv(StatsEnv, file)
	for _, d := range []*verbs.Device{a, b} {
		if err := appendStats(d); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(text), "\n"); lines != 2 {
		t.Fatalf("%d lines, want one per device:\n%s", lines, text)
	}
	want := "device " + a.Name() + " counters: TxPackets=7 RetryTimeouts=3\n" +
		"device " + b.Name() + " counters: RetryTimeouts=2\n"
	if diff := cmp.Diff(want, string(text)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", StatsEnv, diff)
	}

	t.Setenv(StatsEnv, filepath.Join(t.TempDir(), "missing", "stats"))
	if err := appendStats(a); err == nil || !strings.Contains(err.Error(), StatsEnv) || !strings.Contains(err.Error(), "unset it") {
		t.Errorf("unwritable file: err %v, want one naming %s and what to do", err, StatsEnv)
	}
}
