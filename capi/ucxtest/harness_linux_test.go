package ucxtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/capibuild"
)

var (
	workDir  string // world-readable: the unprivileged test runs programs as nobody
	libDir   string // the built library
	buildErr error
	goTool   string // the softroce binary (softroce exec)
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
	dir, err := os.MkdirTemp("", "softroce-ucx-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		workDir = dir
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

// packages names the Debian package of each program the tests run.
var packages = map[string]string{
	"ucx_info": "ucx-utils", "ucx_perftest": "ucx-utils",
	"mpirun": "openmpi-bin", "mpicc": "libopenmpi-dev",
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
			missing(t, p+" (apt-get install "+packages[p]+")")
		}
	}
}

var netSeq atomic.Uint32

// autoNet returns a loopback /24 no other test of this run uses, for the
// library's automatic device (SOFTROCE_AUTO_NET): each process on it binds
// the first free 127.63.N.x.
func autoNet() string { return fmt.Sprintf("127.63.%d", netSeq.Add(1)) }

// env returns the environment of programs run on the library with the
// automatic loopback device in net.
func env(net string, extra ...string) []string {
	out := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") && !strings.HasPrefix(kv, "SOFTROCE_") &&
			!strings.HasPrefix(kv, "UCX_") && !strings.HasPrefix(kv, "OMPI_") {
			out = append(out, kv)
		}
	}
	// No links: a state file that does not exist.
	out = append(out, "SOFTROCE_STATE="+filepath.Join(workDir, "no-links.json"))
	if v := os.Getenv("SOFTROCE_LOCAL"); v != "" {
		out = append(out, "SOFTROCE_LOCAL="+v) // same-host lanes, as the run asks
	}
	if net != "" {
		out = append(out, "SOFTROCE_AUTO_NET="+net)
	}
	// mpirun refuses root unless told (CI runs as root).
	out = append(out, "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	return append(out, extra...)
}

// onLib is argv run through softroce exec on the built library.
func onLib(argv ...string) []string {
	return append([]string{goTool, "exec", "-L", libDir, "--"}, argv...)
}

// proc is a started program.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	err            error
}

// syncBuffer is a bytes.Buffer safe to read while the program writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t testing.TB, ctx context.Context, envv []string, argv ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Env = envv
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", argv[0], err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p
}

func (p *proc) wait() error { <-p.done; return p.err }

func (p *proc) String() string {
	return fmt.Sprintf("%s: %v\n--- stdout\n%s--- stderr\n%s", strings.Join(p.cmd.Args, " "), p.err, tail(p.stdout.String()), tail(p.stderr.String()))
}

// tail keeps the end of a long output.
func tail(s string) string {
	const max = 6000
	if len(s) > max {
		return "...\n" + s[len(s)-max:]
	}
	return s
}

// run runs argv to completion within limit and returns its stdout, failing
// the test unless it exits 0.
func run(t testing.TB, envv []string, limit time.Duration, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	p := start(t, ctx, envv, argv...)
	if err := p.wait(); err != nil {
		if ctx.Err() != nil {
			t.Fatalf("did not finish within %v:\n%s", limit, p)
		}
		t.Fatalf("%s", p)
	}
	return p.stdout.String()
}

// waitFor waits up to limit for ready, failing if p exits first.
func waitFor(t testing.TB, p *proc, what string, limit time.Duration, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ready() {
		select {
		case <-p.done:
			t.Fatalf("exited before %s:\n%s", what, p)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v:\n%s", what, limit, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
