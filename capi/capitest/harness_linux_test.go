package capitest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/capibuild"
	"github.com/softroce/softroce/internal/tooltest"
)

var (
	libDir   string // the built library
	buildErr error
	goTool   string // the softroce binary, for crossed runs
)

// strict reports whether a missing tool fails the test (CI) rather than
// skipping it.
func strict() bool {
	return os.Getenv("CI") == "true" || os.Getenv("SOFTROCE_REQUIRE_TOOLS") != ""
}

// missing skips the test (or fails it under CI) with one line.
func missing(t testing.TB, what string) {
	t.Helper()
	if strict() {
		t.Fatalf("missing: %s (CI requires it)", what)
	}
	t.Skipf("missing: %s", what)
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "softroce-capi-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		root, err := capibuild.ModuleRoot()
		if err == nil {
			err = capibuild.Build(root, filepath.Join(dir, "lib"))
		}
		if err == nil {
			goTool = filepath.Join(dir, "softroce")
			cmd := exec.Command("go", "build", "-o", goTool, "./cmd/softroce")
			cmd.Dir = root
			if out, berr := cmd.CombinedOutput(); berr != nil {
				err = fmt.Errorf("building softroce: %v\n%s", berr, out)
			}
		}
		libDir, buildErr = filepath.Join(dir, "lib"), err
		return m.Run()
	}()
	os.Exit(code)
}

// needLib skips (or fails) when the library could not be built, and when
// any of the programs is not installed.
func needLib(t testing.TB, progs ...string) {
	t.Helper()
	if buildErr != nil {
		if strings.Contains(buildErr.Error(), capibuild.ErrMissing.Error()) {
			missing(t, buildErr.Error())
		}
		t.Fatalf("building the library: %v", buildErr)
	}
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			pkg := "ibverbs-utils"
			switch {
			case strings.HasPrefix(p, "ib_"):
				pkg = "perftest"
			case p == "rping" || p == "ucmatose" || p == "udaddy" || p == "mckey" || p == "rstream" || p == "riostream" || p == "rcopy" || p == "udpong":
				pkg = "rdmacm-utils"
			case p == "gcc" || p == "cc":
				pkg = "gcc"
			}
			missing(t, p+" (apt-get install "+pkg+")")
		}
	}
}

var addrSeq atomic.Uint32

// addrPair returns two loopback addresses no other test in this run uses.
func addrPair() (string, string) {
	n := addrSeq.Add(1)
	return fmt.Sprintf("127.60.%d.%d", n/100, n%100*2+1), fmt.Sprintf("127.60.%d.%d", n/100, n%100*2+2)
}

// freePort returns a TCP port free now, outside the ephemeral range
// (tooltest.FreeTCPPort).
func freePort(t testing.TB) int { return tooltest.FreeTCPPort(t) }

// env returns the environment of a program run on the library at addr.
func env(addr string, extra ...string) []string {
	e := os.Environ()
	out := e[:0:0]
	for _, kv := range e {
		// GOMAXPROCS too: the library's choice of processors is under test
		// (TestProcs), and a test that wants one sets it.
		if !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") && !strings.HasPrefix(kv, "SOFTROCE_") && !strings.HasPrefix(kv, "GOMAXPROCS=") {
			out = append(out, kv)
		}
	}
	// No links: a state file that does not exist.
	out = append(out, "LD_LIBRARY_PATH="+libDir, "SOFTROCE_STATE="+filepath.Join(libDir, "no-links.json"))
	if addr != "" {
		out = append(out, "SOFTROCE_ADDR="+addr)
	}
	if v := os.Getenv("SOFTROCE_LOCAL"); v != "" {
		out = append(out, "SOFTROCE_LOCAL="+v) // same-host lanes, as the run asks
	}
	return append(out, extra...)
}

// proc is a started program.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	err            error
}

func start(t testing.TB, ctx context.Context, envv []string, argv ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Env = envv
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", argv[0], err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p
}

func (p *proc) wait() error { <-p.done; return p.err }

func (p *proc) String() string {
	return fmt.Sprintf("%s: %v\n--- stdout\n%s--- stderr\n%s", strings.Join(p.cmd.Args, " "), p.err, p.stdout.String(), p.stderr.String())
}

// waitListen waits until server listens on TCP port.
func waitListen(t testing.TB, port int, server *proc) {
	t.Helper()
	// A bare connect would be taken as the client by some servers: look
	// for the listening socket instead.
	waitReady(t, server, fmt.Sprintf("listen on %d", port), func() bool { return tcpListening(port) })
}

// waitReady waits up to 10 s for ready, failing if server exits first.
func waitReady(t testing.TB, server *proc, what string, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ready() {
		select {
		case <-server.done:
			t.Fatalf("server exited before it would %s:\n%s", what, server)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not %s:\n%s", what, server)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tcpListening reports whether some socket listens on TCP port.
func tcpListening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// pair runs server then client (each argv gets its port flag appended by
// the caller) and returns both once they exited, failing the test unless
// both exit 0.
type side struct {
	argv []string
	env  []string
}

func runPair(t *testing.T, port int, server, client side, limit time.Duration) (*proc, *proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	s := start(t, ctx, server.env, server.argv...)
	waitListen(t, port, s)
	c := start(t, ctx, client.env, client.argv...)
	// One side failing ends the other at once (a server would wait for
	// its client forever).
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if c.wait() != nil {
			cancel()
		}
	}()
	go func() {
		defer wg.Done()
		if s.wait() != nil {
			cancel()
		}
	}()
	wg.Wait()
	if s.err == nil && c.err == nil {
		return s, c
	}
	if ctx.Err() != nil && time.Until(deadline(ctx)) <= 0 {
		t.Fatalf("did not finish within %v\nserver %s\nclient %s", limit, s, c)
	}
	if s.err != nil || c.err != nil {
		t.Fatalf("server %s\nclient %s", s, c)
	}
	return s, c
}

func itoa(n int) string { return strconv.Itoa(n) }

func deadline(ctx context.Context) time.Time { d, _ := ctx.Deadline(); return d }

func contextWithTimeout(t testing.TB, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

// measurePin runs argv on CPU cpu alone (taskset -c) with
// SOFTROCE_MEASURE_PIN=1 on a machine of two CPUs or more: the two sides
// of a pair, each on a core of its own, as on two hosts. Unpinned, where
// the scheduler puts the two programs' threads (six or more, on 2 CPUs)
// decides more than the code does.
func measurePin(argv []string, cpu int) []string {
	if os.Getenv("SOFTROCE_MEASURE_PIN") != "1" || runtime.NumCPU() < 2 {
		return argv
	}
	return append([]string{"taskset", "-c", itoa(cpu)}, argv...)
}

// measureRT wraps a measured program's argv for SOFTROCE_MEASURE_RT=1: the
// program runs under chrt -f 10 (only the measured programs: never the go
// command, which livelocks at that priority), below a timeout at priority
// 20 that kills it after 90 s. A program spinning at real-time priority
// (stock cmtime's client waits in a sched_yield loop) starves the threads
// that deliver its packets and froze a 2-core host for half an hour once;
// the timeout, above it, still runs.
func measureRT(argv []string) []string {
	if os.Getenv("SOFTROCE_MEASURE_RT") != "1" {
		return argv
	}
	return append([]string{"chrt", "-f", "20", "timeout", "-s", "KILL", "90", "chrt", "-f", "10"}, argv...)
}
