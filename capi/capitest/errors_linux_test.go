package capitest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCErrorPaths builds testdata/errors.c against the installed headers
// and runs it on the library: bad QP transitions, a full send queue
// (ENOMEM and bad_wr), an SGE outside its MR (an error completion, as
// rxe), destroy while in use (EBUSY), completion events under O_NONBLOCK
// and edge-triggered epoll (one per arming, none lost or doubled),
// destroy_cq waiting for the acks, an empty async fd (EAGAIN), 8 threads
// posting and polling at once, and refused arguments.
func TestCErrorPaths(t *testing.T) {
	needLib(t, "gcc")
	bin := filepath.Join(t.TempDir(), "errors")
	cc := exec.Command("gcc", "-O1", "-Wall", "-o", bin, filepath.Join("testdata", "errors.c"), "-L"+libDir, "-libverbs", "-lpthread")
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	a, _ := addrPair()
	ctx, cancel := contextWithTimeout(t, 90*time.Second)
	defer cancel()
	p := start(t, ctx, env(a), bin)
	err := p.wait()
	for _, line := range strings.Split(strings.TrimSpace(p.stdout.String()), "\n") {
		if strings.HasPrefix(line, "FAIL") {
			t.Error(line)
		} else {
			t.Log(line)
		}
	}
	if err != nil {
		t.Fatalf("%s", p)
	}
	if n := strings.Count(p.stdout.String(), "ok "); n != 10 {
		t.Fatalf("%d cases passed, want 10:\n%s", n, p)
	}
}
