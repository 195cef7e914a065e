package dump

import (
	"bytes"
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

	"github.com/softroce/softroce/internal/tooltest"
)

// TestDumpLinkBinary runs the built softroce binary as a user would: link
// add/show/delete against a private state file, dump -r on the testdata
// captures (file and stdin), and, as root, a live capture on lo stopped by
// SIGINT.
func TestDumpLinkBinary(t *testing.T) {
	bin := tooltest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state", "links.json")
	env := append(os.Environ(), "SOFTROCE_STATE="+state, "TZ=UTC")
	sh := func(stdin []byte, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), code
	}

	t.Run("link", func(t *testing.T) {
		if out, errOut, code := sh(nil, "link", "add", "rxe0", "type", "rxe", "netdev", "lo"); code != 0 || out != "" || errOut != "" {
			t.Fatalf("link add: %d %q %q", code, out, errOut)
		}
		if _, err := os.Stat(state); err != nil {
			t.Fatalf("state file: %v", err)
		}
		out, _, code := sh(nil, "link")
		if code != 0 || !strings.HasPrefix(out, "link rxe0/1 state ACTIVE physical_state LINK_UP netdev lo addr 127.0.0.1:4791") {
			t.Errorf("link: %d %q", code, out)
		}
		if _, errOut, code := sh(nil, "link", "add", "rxe1", "netdev", "nosuchif0"); code != 1 || !strings.Contains(errOut, `no netdev "nosuchif0" (netdevs: `) {
			t.Errorf("bad netdev: %d %q", code, errOut)
		}
		if _, errOut, code := sh(nil, "link", "add", "rxe0", "addr", "127.0.0.1:4800"); code != 1 || !strings.Contains(errOut, "already exists") {
			t.Errorf("duplicate: %d %q", code, errOut)
		}
		if _, _, code := sh(nil, "link", "delete", "rxe0"); code != 0 {
			t.Errorf("delete: %d", code)
		}
		if out, _, code := sh(nil, "link", "show"); code != 0 || out != "" {
			t.Errorf("show after delete: %d %q", code, out)
		}
		if _, errOut, code := sh(nil, "link", "delete", "rxe0"); code != 1 || !strings.Contains(errOut, "no links") {
			t.Errorf("delete missing: %d %q", code, errOut)
		}
	})

	t.Run("dump-r", func(t *testing.T) {
		want, err := os.ReadFile("testdata/rping.dump")
		if err != nil {
			t.Fatal(err)
		}
		if out, errOut, code := sh(nil, "dump", "-r", rpingPcap); code != 0 || out != string(want) || errOut != "" {
			t.Errorf("dump -r: exit %d, stderr %q, stdout differs from testdata/rping.dump:\n%s", code, errOut, out)
		}
		img, _ := os.ReadFile(tooltest.CapturesDir + "/ud_pingpong.pcap")
		if out, _, code := sh(img, "dump", "-r", "-"); code != 0 || !strings.HasSuffix(out, "\n20 packets, 0 bad ICRC, 0 unknown (11 other frames skipped)\n") {
			t.Errorf("dump -r - (stdin): exit %d, %q", code, out)
		}
		if _, _, code := sh(nil, "dump"); code != 2 {
			t.Errorf("dump without -r/-i: exit %d, want 2", code)
		}
		if _, errOut, code := sh(nil, "dump", "-r", "testdata/missing.pcap"); code != 1 || errOut == "" {
			t.Errorf("missing file: exit %d %q", code, errOut)
		}
	})

	t.Run("dump-i-sigint", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("live capture needs root (AF_PACKET socket); CI runs as root")
		}
		port, send := dlLoopbackTarget(t)
		file := filepath.Join(dir, "live.pcap")
		ps := strconv.Itoa(int(port))
		cmd := exec.CommandContext(ctx, bin, "dump", "-i", "lo", "-w", file, "-port", ps)
		cmd.Env = env
		var stderr dlBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		dlWaitFor(t, "dump to listen", func() bool { return strings.Contains(stderr.String(), "listening on lo") })
		send(2)
		time.Sleep(100 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGINT)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("dump after SIGINT: %v; stderr %q", err, stderr.String())
		}
		if !strings.Contains(stderr.String(), "\n2 packets captured\n") {
			t.Errorf("stderr %q", stderr.String())
		}
		out, _, code := sh(nil, "dump", "-r", file, "-port", ps)
		if code != 0 || !strings.HasSuffix(out, "\n2 packets, 0 bad ICRC, 0 unknown\n") {
			t.Errorf("reading the live capture: %d %q", code, out)
		}
	})
}
