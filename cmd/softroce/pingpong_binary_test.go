package main

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
	"testing"
	"time"

	"github.com/softroce/softroce/internal/netnstest"
)

// The tests in this file and in perftest_binary_test.go run the softroce
// binary as a user would: a server and a client process on two loopback
// addresses (two devices on one host), or in two network namespaces.

var (
	toolBinOnce sync.Once
	toolBinPath string
	toolBinErr  error
	toolBinDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if toolBinDir != "" {
		os.RemoveAll(toolBinDir)
	}
	os.Exit(code)
}

// toolBinary builds the softroce binary once per test run.
func toolBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the softroce binary")
	}
	toolBinOnce.Do(func() {
		toolBinDir, toolBinErr = os.MkdirTemp("", "softroce-tools-")
		if toolBinErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		toolBinPath = filepath.Join(toolBinDir, "softroce")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", toolBinPath, ".").CombinedOutput()
		if err != nil {
			toolBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if toolBinErr != nil {
		t.Fatal(toolBinErr)
	}
	return toolBinPath
}

// freeTCPPort returns a TCP port that was free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// loopPair returns two loopback addresses no other test is likely to use
// for UDP 4791: 127.x.y.1 (server) and 127.x.y.2 (client).
func loopPair() (string, string) {
	x, y := 100+rand.IntN(150), 1+rand.IntN(250)
	return fmt.Sprintf("127.%d.%d.1", x, y), fmt.Sprintf("127.%d.%d.2", x, y)
}

// procResult is one finished process.
type procResult struct {
	stdout, stderr string
	code           int
}

func (r procResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

func toolEnv(t *testing.T) []string {
	return append(os.Environ(), stateEnv+"="+filepath.Join(t.TempDir(), "links.json"))
}

// startProc starts argv (prefix, then the binary's arguments).
func startProc(ctx context.Context, t *testing.T, env []string, argv []string) func() procResult {
	t.Helper()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() procResult {
		err := cmd.Wait()
		r := procResult{stdout: o.String(), stderr: e.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
			r.stderr += "\n(" + err.Error() + ")"
		}
		return r
	}
}

// runPair runs a server and a client (the client retries its TCP connect
// while the server comes up) and returns both results.
func runPair(t *testing.T, timeout time.Duration, server, client []string) (procResult, procResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	env := toolEnv(t)
	waitS := startProc(ctx, t, env, server)
	time.Sleep(50 * time.Millisecond)
	waitC := startProc(ctx, t, env, client)
	c := waitC()
	s := waitS()
	if ctx.Err() != nil {
		t.Errorf("timed out after %v", timeout)
	}
	return s, c
}

func mustMatch(t *testing.T, who string, r procResult, res ...string) {
	t.Helper()
	for _, re := range res {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("%s: output does not match %q\n%s", who, re, r)
		}
	}
}

const (
	ppLocalRE  = `(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:%s$`
	ppLocalUD  = `(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}: GID ::ffff:%s$`
	ppRemoteRE = `(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:%s$`
	ppBytesRE  = `(?m)^%d bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec$`
	ppItersRE  = `(?m)^%d iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`
)

func TestPingpongBinary(t *testing.T) {
	bin := toolBinary(t)
	for _, tc := range []struct {
		tool  string
		extra []string
		size  int
	}{
		{"rc_pingpong", []string{"-n", "20", "-s", "4096", "-c"}, 4096},
		{"rc_pingpong", []string{"-n", "20", "-s", "100", "-c", "-e"}, 100}, // inline sends, CQ events
		{"rc_pingpong", []string{"-n", "10", "-s", "9000", "-m", "1024", "-c"}, 9000},
		{"uc_pingpong", []string{"-n", "20", "-s", "2048", "-c"}, 2048},
		{"ud_pingpong", []string{"-n", "20", "-s", "512", "-c"}, 512},
		{"srq_pingpong", []string{"-n", "20", "-q", "4", "-s", "256", "-c"}, 256},
	} {
		t.Run(tc.tool+strings.Join(tc.extra, ""), func(t *testing.T) {
			sa, ca := loopPair()
			port := strconv.Itoa(freeTCPPort(t))
			srv := append([]string{bin, tc.tool, "-d", sa, "-p", port}, tc.extra...)
			cli := append([]string{bin, tc.tool, "-d", ca, "-p", port}, tc.extra...)
			cli = append(cli, "127.0.0.1")
			s, c := runPair(t, 60*time.Second, srv, cli)
			if s.code != 0 || c.code != 0 {
				t.Fatalf("server: %v\nclient: %v", s, c)
			}
			n := 20
			if tc.tool == "rc_pingpong" && tc.size == 9000 {
				n = 10
			}
			local := ppLocalRE
			if tc.tool == "ud_pingpong" {
				local = ppLocalUD
			}
			for _, x := range []struct {
				who        string
				r          procResult
				self, peer string
			}{{"server", s, sa, ca}, {"client", c, ca, sa}} {
				mustMatch(t, x.who, x.r, fmt.Sprintf(local, regexp.QuoteMeta(x.self)), fmt.Sprintf(ppRemoteRE, regexp.QuoteMeta(x.peer)),
					fmt.Sprintf(ppBytesRE, tc.size*n*2), fmt.Sprintf(ppItersRE, n))
				if strings.Contains(x.r.stdout, "invalid data") {
					t.Errorf("%s: -c validation failed:\n%s", x.who, x.r)
				}
			}
			if tc.tool == "srq_pingpong" {
				if k := strings.Count(s.stdout, "  local address:"); k != 4 {
					t.Errorf("server printed %d local addresses, want 4 (one per QP)", k)
				}
				if k := strings.Count(c.stdout, "  remote address:"); k != 4 {
					t.Errorf("client printed %d remote addresses, want 4", k)
				}
			}
		})
	}
}

// TestPingpongValidationDetectsMismatch: a client without -c leaves the
// page-start bytes at 0x7b, so a validating server reports the pages, as
// rdma-core's does, and softroce's exits non-zero.
func TestPingpongValidationDetectsMismatch(t *testing.T) {
	bin := toolBinary(t)
	sa, ca := loopPair()
	port := strconv.Itoa(freeTCPPort(t))
	s, c := runPair(t, 60*time.Second,
		[]string{bin, "rc_pingpong", "-d", sa, "-p", port, "-n", "5", "-s", "8192", "-c"},
		[]string{bin, "rc_pingpong", "-d", ca, "-p", port, "-n", "5", "-s", "8192", "127.0.0.1"})
	if c.code != 0 {
		t.Errorf("client: %v", c)
	}
	if s.code != 1 || !strings.Contains(s.stdout, "invalid data in page 0\ninvalid data in page 1\n") ||
		!strings.Contains(s.stderr, "validation failed") {
		t.Errorf("server should report invalid pages and fail: %v", s)
	}
}

// TestPingpongPcap writes the server's traffic with --pcap and decodes it
// with "softroce dump -r": every packet, no ICRC error.
func TestPingpongPcap(t *testing.T) {
	bin := toolBinary(t)
	for _, tool := range []string{"rc_pingpong", "ud_pingpong", "write_bw"} {
		t.Run(tool, func(t *testing.T) {
			sa, ca := loopPair()
			port := strconv.Itoa(freeTCPPort(t))
			file := filepath.Join(t.TempDir(), "pp.pcap")
			s, c := runPair(t, 60*time.Second,
				[]string{bin, tool, "-d", sa, "-p", port, "-n", "10", "-s", "1024", "--pcap", file},
				[]string{bin, tool, "-d", ca, "-p", port, "-n", "10", "-s", "1024", "127.0.0.1"})
			if s.code != 0 || c.code != 0 {
				t.Fatalf("server: %v\nclient: %v", s, c)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "dump", "-r", file).CombinedOutput()
			if err != nil {
				t.Fatalf("dump -r: %v\n%s", err, out)
			}
			// RC: 10 SENDs and 10 ACKs each way; UD: 10 SENDs each way.
			want := "\n40 packets, 0 bad ICRC, 0 unknown"
			op := "RC_SEND_ONLY"
			switch tool {
			case "ud_pingpong":
				want, op = "\n20 packets, 0 bad ICRC, 0 unknown", "UD_SEND_ONLY"
			case "write_bw":
				// 10 WRITEs; ACKs may be coalesced.
				want, op = " packets, 0 bad ICRC, 0 unknown", "RC_RDMA_WRITE_ONLY"
			}
			if !strings.Contains(string(out), want) || !strings.Contains(string(out), op) {
				t.Errorf("dump -r: want %q and %s lines, got:\n%s", want, op, out)
			}
		})
	}
}

// TestPingpongCrossNamespace runs server and client in two network
// namespaces joined by a veth pair, as on two hosts.
func TestPingpongCrossNamespace(t *testing.T) {
	bin := toolBinary(t)
	ns1, ns2, a1, a2 := newNetnsPair(t)
	for _, tool := range []string{"rc_pingpong", "ud_pingpong", "write_bw", "send_lat"} {
		t.Run(tool, func(t *testing.T) {
			args := []string{"-n", "20", "-s", "1024"}
			if tool == "rc_pingpong" || tool == "ud_pingpong" {
				args = append(args, "-c")
			}
			port := strconv.Itoa(10000 + rand.IntN(50000))
			srv := netnstest.Argv(ns1, append([]string{bin, tool, "-d", a1, "-p", port}, args...)...)
			cli := netnstest.Argv(ns2, append(append([]string{bin, tool, "-d", a2, "-p", port}, args...), a1)...)
			s, c := runPair(t, 60*time.Second, srv, cli)
			if s.code != 0 || c.code != 0 {
				t.Fatalf("server (%s): %v\nclient (%s): %v", ns1, s, ns2, c)
			}
			if strings.HasSuffix(tool, "pingpong") {
				mustMatch(t, "client", c, fmt.Sprintf(ppRemoteRE, regexp.QuoteMeta(a1)), fmt.Sprintf(ppItersRE, 20))
			} else {
				mustMatch(t, "client", c, `(?m)^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:`+strings.ReplaceAll(ptGIDTail(a1), ".", ":")+`$`)
			}
		})
	}
}

// ptGIDTail formats an IPv4 address as perftest prints the end of a GID.
func ptGIDTail(a string) string {
	parts := strings.Split(a, ".")
	for i, p := range parts {
		n, _ := strconv.Atoi(p)
		parts[i] = fmt.Sprintf("%02d", n)
	}
	return strings.Join(parts, ".")
}

// newNetnsPair creates two namespaces joined by a veth pair with
// 10.231.0.1/24 and 10.231.0.2/24 and lo up, deleted when the test ends; it
// skips the test unless it runs as root with iproute2.
func newNetnsPair(t *testing.T) (ns1, ns2, a1, a2 string) {
	t.Helper()
	p := netnstest.NewPair(t, netnstest.Config{
		Prefix:   "srtl",
		IPv4:     [2]string{"10.231.0.1/24", "10.231.0.2/24"},
		Loopback: true,
	})
	return p.NS[0], p.NS[1], p.Addr[0], p.Addr[1]
}

// TestToolsStopOnSIGINT: a server waiting for its client exits on SIGINT
// with a message and a failure code, like the C tools' default handler.
func TestToolsStopOnSIGINT(t *testing.T) {
	bin := toolBinary(t)
	for _, tool := range []string{"rc_pingpong", "write_bw"} {
		t.Run(tool, func(t *testing.T) {
			sa, _ := loopPair()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tool, "-d", sa, "-p", strconv.Itoa(freeTCPPort(t)))
			cmd.Env = toolEnv(t)
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			cmd.Process.Signal(os.Interrupt)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(e.String(), "interrupted while waiting for a client") {
				t.Errorf("after SIGINT: %v, stderr %q", err, e.String())
			}
		})
	}
}
