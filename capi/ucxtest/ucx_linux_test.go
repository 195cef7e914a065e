package ucxtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/tooltest"
)

// ucxInfoRE matches a transport of softroce's device in ucx_info -d.
var ucxInfoRE = regexp.MustCompile(`(?m)^#\s+Transport: (\w+)\n#\s+Device: lo:1$`)

// checkUCXInfo checks that ucx_info -d lists exactly rc_verbs and ud_verbs
// on the device: rc_mlx5, dc_mlx5 and ud_mlx5 need mlx5 direct verbs
// (libmlx5's own queue layouts and doorbells), which a provider-less
// library cannot offer.
func checkUCXInfo(t *testing.T, out string) {
	t.Helper()
	var tls []string
	for _, m := range ucxInfoRE.FindAllStringSubmatch(out, -1) {
		tls = append(tls, m[1])
	}
	if strings.Join(tls, ",") != "rc_verbs,ud_verbs" {
		t.Fatalf("transports on lo:1: %v, want [rc_verbs ud_verbs]; ucx_info -d:\n%s", tls, tail(out))
	}
	if !strings.Contains(out, "# Memory domain: lo\n#     Component: ib") {
		t.Errorf("no ib memory domain lo:\n%s", tail(out))
	}
}

// TestUCXInfo: ucx_info -d lists softroce's device with rc_verbs and
// ud_verbs; without the device view (--no-view) UCX does not see it.
func TestUCXInfo(t *testing.T) {
	needLib(t, "ucx_info")
	out := run(t, env(autoNet()), 30*time.Second, onLib("ucx_info", "-d")...)
	checkUCXInfo(t, out)

	argv := []string{goTool, "exec", "-L", libDir, "--no-view", "--", "ucx_info", "-d"}
	if _, err := os.Stat("/dev/infiniband"); err == nil {
		return // a host with RDMA devices: UCX may see /dev/infiniband without the view
	}
	if out := run(t, env(autoNet()), 30*time.Second, argv...); ucxInfoRE.MatchString(out) {
		t.Errorf("without the view UCX still lists the device: the test proves nothing\n%s", tail(out))
	}
}

// TestUCXInfoUnprivileged: as a user without privileges softroce exec
// builds the view in a user namespace, and UCX finds the device the same.
func TestUCXInfoUnprivileged(t *testing.T) {
	needLib(t, "ucx_info")
	if os.Geteuid() != 0 {
		// Already unprivileged: the plain test is this one.
		out := run(t, env(autoNet()), 30*time.Second, onLib("ucx_info", "-d")...)
		checkUCXInfo(t, out)
		return
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" {
		t.Skip("unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "exec", "-L", libDir, "--", "sh", "-c", "id -u; exec ucx_info -d")
	cmd.Env = env(autoNet())
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, tail(string(out)))
	}
	if !strings.HasPrefix(string(out), "65534\n") {
		t.Fatalf("the program did not run as nobody:\n%s", tail(string(out)))
	}
	if strings.Contains(string(out), "no /dev/infiniband") {
		if regexp.MustCompile(`user namespace: .*(operation not permitted|permission denied|no space left)`).Match(out) {
			t.Skipf("this host does not let unprivileged users make user namespaces:\n%s", out)
		}
		t.Fatalf("no view:\n%s", tail(string(out)))
	}
	checkUCXInfo(t, string(out))
}

// TestExecNoView: when softroce exec cannot make the view (here: the
// device the environment names does not exist) it says so in one line and
// runs the program anyway.
func TestExecNoView(t *testing.T) {
	needLib(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "exec", "-L", libDir, "--", "sh", "-c", "echo ran; test -e /dev/infiniband/uverbs0 && echo view; exit 0")
	cmd.Env = env("", "SOFTROCE_DEVICE=no-such-device-xyz")
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if _, serr := os.Stat("/dev/infiniband/uverbs0"); serr != nil && len(lines) > 2 {
		t.Errorf("a view was made after all:\n%s", out)
	}
	if err != nil || len(lines) < 2 || !strings.HasPrefix(lines[0], "softroce exec: no /dev/infiniband and /sys/class/infiniband view (") || lines[1] != "ran" {
		t.Fatalf("want one line about the view, then the program's output: %v\n%s", err, out)
	}
}

// perfCase is one ucx_perftest run: UCP tests take their transport from
// UCX_TLS, UCT tests from -x.
type perfCase struct {
	name string
	tls  string // UCX_TLS for UCP tests
	args []string
}

// TestPerftest runs ucx_perftest pairs over softroce, each transport
// alone: rc_verbs (with ud_verbs only as the auxiliary transport that
// carries UCP's wire-up) and ud_verbs, through UCP (tag matching, stream,
// put, get, active messages) and directly through UCT. ucx_perftest checks
// no data: TestMPI does.
func TestPerftest(t *testing.T) {
	needLib(t, "ucx_perftest")
	const rc, ud = "rc_verbs,ud_verbs:aux", "ud_verbs"
	n := []string{"-n", "1000", "-w", "100"}
	big := []string{"-s", "1048576", "-n", "50", "-w", "5"}
	uct := func(tl string, a ...string) []string { return append([]string{"-x", tl, "-d", "lo:1"}, a...) }
	cases := []perfCase{
		{"rc/tag_lat", rc, append([]string{"-t", "tag_lat"}, n...)},
		{"rc/tag_bw", rc, append([]string{"-t", "tag_bw"}, big...)},
		{"rc/stream_bw", rc, append([]string{"-t", "stream_bw", "-s", "65536"}, n...)},
		{"rc/ucp_put_bw", rc, append([]string{"-t", "ucp_put_bw", "-s", "65536"}, n...)},
		{"rc/ucp_get", rc, append([]string{"-t", "ucp_get", "-s", "65536"}, n...)},
		{"rc/ucp_am_bw", rc, append([]string{"-t", "ucp_am_bw", "-s", "4096"}, n...)},
		{"rc/put_lat", "", uct("rc_verbs", append([]string{"-t", "put_lat"}, n...)...)},
		{"rc/put_bw", "", uct("rc_verbs", append([]string{"-t", "put_bw", "-D", "zcopy", "-s", "65536"}, n...)...)},
		{"rc/get_bw", "", uct("rc_verbs", append([]string{"-t", "get", "-D", "zcopy", "-s", "65536"}, n...)...)},
		{"rc/am_bw", "", uct("rc_verbs", append([]string{"-t", "am_bw", "-D", "bcopy", "-s", "4096"}, n...)...)},
		{"ud/tag_lat", ud, append([]string{"-t", "tag_lat"}, n...)},
		{"ud/tag_bw", ud, append([]string{"-t", "tag_bw"}, big...)},
		{"ud/stream_bw", ud, append([]string{"-t", "stream_bw", "-s", "65536"}, n...)},
		{"ud/ucp_put_bw", ud, append([]string{"-t", "ucp_put_bw", "-s", "65536"}, n...)},
		{"ud/ucp_get", ud, append([]string{"-t", "ucp_get", "-s", "16384"}, n...)},
		{"ud/am_lat", "", uct("ud_verbs", append([]string{"-t", "am_lat"}, n...)...)},
		{"ud/am_bw", "", uct("ud_verbs", append([]string{"-t", "am_bw", "-D", "bcopy", "-s", "1024"}, n...)...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := perftestPair(t, c, 60*time.Second)
			if !regexp.MustCompile(`(?m)^Final:\s+\d+\s+[0-9.]+`).MatchString(out) {
				t.Fatalf("no Final line:\n%s", tail(out))
			}
		})
	}
}

// perftestPair runs a ucx_perftest server and client over the automatic
// loopback device (each process its own 127.63.N.x) and returns the
// client's output; both must exit 0 within limit.
func perftestPair(t *testing.T, c perfCase, limit time.Duration) string {
	t.Helper()
	return perftestPairDev(t, c, "lo:1", limit)
}

// perftestPairDev is perftestPair with UCX_NET_DEVICES=dev.
func perftestPairDev(t *testing.T, c perfCase, dev string, limit time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	port := tooltest.FreeTCPPort(t)
	e := env(autoNet(), "UCX_NET_DEVICES="+dev)
	if c.tls != "" {
		e = append(e, "UCX_TLS="+c.tls)
	}
	args := append([]string{"ucx_perftest", "-p", fmt.Sprint(port)}, c.args...)
	s := start(t, ctx, e, onLib(args...)...)
	waitFor(t, s, fmt.Sprintf("a listening socket on TCP %d", port), 15*time.Second, func() bool { return tcpListening(port) })
	cl := start(t, ctx, e, onLib(append(args, "127.0.0.1")...)...)
	var wg sync.WaitGroup
	wg.Add(2)
	for _, p := range []*proc{s, cl} {
		go func() {
			defer wg.Done()
			if p.wait() != nil {
				cancel() // one side failing ends the other at once
			}
		}()
	}
	wg.Wait()
	if s.err != nil || cl.err != nil {
		if d, _ := ctx.Deadline(); time.Until(d) <= 0 {
			t.Fatalf("did not finish within %v\nserver %s\nclient %s", limit, s, cl)
		}
		t.Fatalf("server %s\nclient %s", s, cl)
	}
	return cl.stdout.String()
}

// tcpListening reports whether some socket listens on TCP port.
func tcpListening(port int) bool { return tcpState(port, "0A") }

// tcpState reports whether some socket on local TCP port is in state st
// (/proc/net/tcp's hex: 0A listening, 01 established).
func tcpState(port int, st string) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == st {
				return true
			}
		}
	}
	return false
}

// TestPerftestPeerKilled: the server of a ucx_perftest bandwidth run over
// rc_verbs is killed mid-run; the client's RC QP exhausts its retries
// (UCX's timeout shortened to 100 ms, 3 retries) and UCX ends it with
// "transport retry counter exceeded", in bounded time.
func TestPerftestPeerKilled(t *testing.T) {
	needLib(t, "ucx_perftest")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	port := tooltest.FreeTCPPort(t)
	e := env(autoNet(), "UCX_NET_DEVICES=lo:1", "UCX_TLS=rc_verbs,ud_verbs:aux", "UCX_RC_TIMEOUT=100ms", "UCX_RC_RETRY_COUNT=3")
	args := []string{"ucx_perftest", "-p", fmt.Sprint(port), "-t", "tag_bw", "-s", "65536", "-n", "100000000"}
	s := start(t, ctx, e, onLib(args...)...)
	waitFor(t, s, fmt.Sprintf("a listening socket on TCP %d", port), 15*time.Second, func() bool { return tcpListening(port) })
	cl := start(t, ctx, e, onLib(append(args, "127.0.0.1")...)...)
	// The client connected (its output is buffered: it cannot say so).
	waitFor(t, s, "a connection", 30*time.Second, func() bool { return tcpState(port, "01") })
	time.Sleep(2 * time.Second) // the transfer runs
	killed := time.Now()
	s.cmd.Process.Signal(syscall.SIGKILL)
	const limit = 30 * time.Second
	select {
	case <-cl.done:
	case <-time.After(limit):
		t.Fatalf("the client did not end within %v of the kill:\n%s", limit, cl)
	}
	t.Logf("the client ended %v after the kill", time.Since(killed).Round(time.Millisecond))
	if cl.err == nil || !strings.Contains(cl.stdout.String()+cl.stderr.String(), "transport retry counter exceeded") {
		t.Fatalf("want an exit with UCX's retry error:\n%s", cl)
	}
}

// TestExecUnprivilegedSignals: without root softroce exec waits for the
// program it started in the user namespace: a SIGTERM sent to it reaches
// the program, and it ends as the program does (killed by that signal);
// its exit status is the program's.
func TestExecUnprivilegedSignals(t *testing.T) {
	needLib(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the programs as nobody")
	}
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd := exec.Command(goTool, "exec", "-L", libDir, "--", "sh", "-c", "exit 7")
	cmd.Env, cmd.Dir, cmd.SysProcAttr = env(""), "/", nobody
	if err := cmd.Run(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 7 {
		t.Fatalf("exit status: %v, want 7", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd = exec.CommandContext(ctx, goTool, "exec", "-L", libDir, "--", "sleep", "1000")
	cmd.Env, cmd.Dir, cmd.SysProcAttr = env(""), "/", nobody
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var kids []int
	deadline := time.Now().Add(10 * time.Second)
	for len(kids) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		kids = procsNamed("sleep", cmd.Process.Pid)
	}
	if len(kids) != 1 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no sleep below softroce exec (%v)", kids)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("softroce exec ended with %v, want killed by SIGTERM", cmd.ProcessState)
	}
	if syscall.Kill(kids[0], 0) == nil {
		syscall.Kill(kids[0], syscall.SIGKILL)
		t.Errorf("the program outlived the signal")
	}
}
