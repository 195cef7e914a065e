// Package tooltest holds the helpers of the tests that run the softroce
// binary as a user would: it builds the binary once, starts servers and
// clients on loopback pairs or in network namespaces, and collects results.
package tooltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/netnstest"
	"github.com/softroce/softroce/internal/toolkit"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// Main runs the tests and removes the binary Binary built.
func Main(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// Binary builds the softroce binary once per test run.
func Binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the softroce binary")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "softroce-tools-")
		if binErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		binPath = filepath.Join(binDir, "softroce")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", binPath, "github.com/softroce/softroce/cmd/softroce").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// FreeTCPPort returns a TCP port, below the ephemeral range, that was free
// on every address a moment ago and that no other test of this process, nor
// of another test process of this repository running meanwhile, got
// (lockPort).
func FreeTCPPort(t testing.TB) int {
	t.Helper()
	freePorts.Lock()
	defer freePorts.Unlock()
	if freePorts.used == nil {
		freePorts.used = map[int]bool{}
	}
	// Below Linux's ephemeral range (32768 and up): a port the kernel hands
	// out for :0 is free only until the next outgoing connection takes it,
	// and the tools' servers bind it a moment later on every address.
	for try := 0; try < 1000; try++ {
		p := 10000 + rand.IntN(20000)
		if freePorts.used[p] {
			continue
		}
		if !lockPort(t, p) {
			continue // another test process has it
		}
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		freePorts.used[p] = true
		return p
	}
	t.Fatal("no free TCP port in 10000-29999")
	return 0
}

// freePorts are the ports FreeTCPPort handed out in this process.
var freePorts struct {
	sync.Mutex
	used map[int]bool
}

// loopPairs is the pairs LoopPair handed out in this process.
var loopPairs struct {
	sync.Mutex
	used map[[2]int]bool
}

// LoopPair returns two loopback addresses no other test uses for UDP 4791:
// 127.x.y.1 (server) and 127.x.y.2 (client), never the same pair twice in
// one test process (parallel tests drew the same random pair), and
// addresses whose port 4791 was free when drawn (another test process).
func LoopPair() (string, string) {
	loopPairs.Lock()
	defer loopPairs.Unlock()
	if loopPairs.used == nil {
		loopPairs.used = map[[2]int]bool{}
	}
	for try := 0; ; try++ {
		k := [2]int{100 + rand.IntN(150), 1 + rand.IntN(250)}
		a, b := fmt.Sprintf("127.%d.%d.1", k[0], k[1]), fmt.Sprintf("127.%d.%d.2", k[0], k[1])
		if loopPairs.used[k] || try < 100 && !(udp4791Free(a) && udp4791Free(b)) {
			continue
		}
		loopPairs.used[k] = true
		return a, b
	}
}

// WaitDevice waits, for at most max, until a device is up on UDP port 4791
// of the local address addr (the port is bound), so that a client's first
// REQ reaches a server's CM instead of being lost and resent only after the
// CM response timeout (seconds). It returns false if none came up in time.
func WaitDevice(addr string, max time.Duration) bool {
	for deadline := time.Now().Add(max); ; {
		c, err := net.ListenPacket("udp4", net.JoinHostPort(addr, "4791"))
		if err != nil {
			return errors.Is(err, syscall.EADDRINUSE)
		}
		c.Close()
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// udp4791Free reports whether UDP port 4791 of addr can be bound now.
func udp4791Free(addr string) bool {
	c, err := net.ListenPacket("udp4", net.JoinHostPort(addr, "4791"))
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// ProcResult is one finished process.
type ProcResult struct {
	Stdout, Stderr string
	Code           int
}

// String shows the exit code and both outputs.
func (r ProcResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// Env is the environment of a tool process: a link state file of its own.
func Env(t *testing.T) []string {
	return append(os.Environ(), toolkit.StateEnv+"="+filepath.Join(t.TempDir(), "links.json"))
}

// StartProc starts argv (prefix, then the binary's arguments).
func StartProc(ctx context.Context, t *testing.T, env []string, argv []string) func() ProcResult {
	t.Helper()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() ProcResult {
		err := cmd.Wait()
		r := ProcResult{Stdout: o.String(), Stderr: e.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.Code = ee.ExitCode()
		} else if err != nil {
			r.Code = -1
			r.Stderr += "\n(" + err.Error() + ")"
		}
		return r
	}
}

// Subtest is one of the subtests Concurrently runs.
type Subtest struct {
	Name string
	F    func(t *testing.T)
}

// Concurrently runs the subtests all at once, each on a goroutine of its
// own, and returns when they have ended. Unlike t.Parallel it is not
// limited by -parallel (the number of processors): it is for subtests
// that mostly wait (for a timeout, a peer, a fixed -D period), each on
// addresses and ports of its own (LoopPair, FreeTCPPort).
func Concurrently(t *testing.T, subtests ...Subtest) {
	t.Helper()
	var wg sync.WaitGroup
	for _, st := range subtests {
		wg.Go(func() { t.Run(st.Name, st.F) })
	}
	wg.Wait()
}

// RunPair runs a server and a client (the client retries its TCP connect
// while the server comes up) and returns both results.
func RunPair(t *testing.T, timeout time.Duration, server, client []string) (ProcResult, ProcResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	env := Env(t)
	waitS := StartProc(ctx, t, env, server)
	time.Sleep(50 * time.Millisecond)
	waitC := StartProc(ctx, t, env, client)
	c := waitC()
	s := waitS()
	if ctx.Err() != nil {
		t.Errorf("timed out after %v", timeout)
	}
	return s, c
}

// MustMatch fails the test unless r's stdout matches every regexp in res.
func MustMatch(t *testing.T, who string, r ProcResult, res ...string) {
	t.Helper()
	for _, re := range res {
		if !regexp.MustCompile(re).MatchString(r.Stdout) {
			t.Errorf("%s: output does not match %q\n%s", who, re, r)
		}
	}
}

// PtGIDTail formats an IPv4 address as perftest prints the end of a GID.
func PtGIDTail(a string) string {
	parts := strings.Split(a, ".")
	for i, p := range parts {
		n, _ := strconv.Atoi(p)
		parts[i] = fmt.Sprintf("%02d", n)
	}
	return strings.Join(parts, ".")
}

// NetnsPair creates two namespaces joined by a veth pair with
// 10.231.0.1/24 and 10.231.0.2/24 and lo up, deleted when the test ends; it
// skips the test unless it runs as root with iproute2.
func NetnsPair(t *testing.T) (ns1, ns2, a1, a2 string) {
	t.Helper()
	p := netnstest.NewPair(t, netnstest.Config{
		Prefix:   "srtl",
		IPv4:     [2]string{"10.231.0.1/24", "10.231.0.2/24"},
		Loopback: true,
	})
	return p.NS[0], p.NS[1], p.Addr[0], p.Addr[1]
}
