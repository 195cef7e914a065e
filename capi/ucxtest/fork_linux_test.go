package ucxtest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestForkWithoutExec: a child forked without exec from a process that
// loaded the library gets EOPNOTSUPP and one line from the calls that
// would use a device or wait for its events (ibv_get_cq_event,
// rdma_get_cm_event), at once (Open MPI forks its daemons and helpers);
// fork then exec works, and the parent's device is unharmed.
func TestForkWithoutExec(t *testing.T) {
	needLib(t)
	if _, err := exec.LookPath("gcc"); err != nil {
		missing(t, "gcc (apt-get install gcc)")
	}
	bin := filepath.Join(t.TempDir(), "forkchild")
	src, _ := filepath.Abs(filepath.Join("testdata", "forkchild.c"))
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-o", bin, src, "-L"+libDir, "-libverbs", "-lrdmacm").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(env(autoNet()), "LD_LIBRARY_PATH="+libDir)
	// A hung forked child holds stdout open after its parent is killed:
	// the whole process group goes, and the wait for output is bounded.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.Output(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("did not finish within 30 s:\n%s%s", out, stderr.String())
	}
	if err != nil || !strings.Contains(string(out), "forkchild: OK") {
		t.Fatalf("%v\n%s%s", err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "softroce: ibv_get_cq_event in process ") || !strings.Contains(lines[0], "forked without exec") {
		t.Errorf("stderr is not the one line about the forked child:\n%s", stderr.String())
	}
}
