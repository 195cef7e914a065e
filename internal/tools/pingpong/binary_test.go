package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/netnstest"
	"github.com/softroce/softroce/internal/tooltest"
)

// The tests in this file and in perftest_binary_test.go run the softroce
// binary as a user would: a server and a client process on two loopback
// addresses (two devices on one host), or in two network namespaces.

const (
	localRE  = `(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:%s$`
	localUD  = `(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}: GID ::ffff:%s$`
	remoteRE = `(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:%s$`
	bytesRE  = `(?m)^%d bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec$`
	itersRE  = `(?m)^%d iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`
)

func TestPingpongBinary(t *testing.T) {
	bin := tooltest.Binary(t)
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
			sa, ca := tooltest.LoopPair()
			port := strconv.Itoa(tooltest.FreeTCPPort(t))
			srv := append([]string{bin, tc.tool, "-d", sa, "-p", port}, tc.extra...)
			cli := append([]string{bin, tc.tool, "-d", ca, "-p", port}, tc.extra...)
			cli = append(cli, "127.0.0.1")
			s, c := tooltest.RunPair(t, 60*time.Second, srv, cli)
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", s, c)
			}
			n := 20
			if tc.tool == "rc_pingpong" && tc.size == 9000 {
				n = 10
			}
			local := localRE
			if tc.tool == "ud_pingpong" {
				local = localUD
			}
			for _, x := range []struct {
				who        string
				r          tooltest.ProcResult
				self, peer string
			}{{"server", s, sa, ca}, {"client", c, ca, sa}} {
				tooltest.MustMatch(t, x.who, x.r, fmt.Sprintf(local, regexp.QuoteMeta(x.self)), fmt.Sprintf(remoteRE, regexp.QuoteMeta(x.peer)),
					fmt.Sprintf(bytesRE, tc.size*n*2), fmt.Sprintf(itersRE, n))
				if strings.Contains(x.r.Stdout, "invalid data") {
					t.Errorf("%s: -c validation failed:\n%s", x.who, x.r)
				}
			}
			if tc.tool == "srq_pingpong" {
				if k := strings.Count(s.Stdout, "  local address:"); k != 4 {
					t.Errorf("server printed %d local addresses, want 4 (one per QP)", k)
				}
				if k := strings.Count(c.Stdout, "  remote address:"); k != 4 {
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
	bin := tooltest.Binary(t)
	sa, ca := tooltest.LoopPair()
	port := strconv.Itoa(tooltest.FreeTCPPort(t))
	s, c := tooltest.RunPair(t, 60*time.Second,
		[]string{bin, "rc_pingpong", "-d", sa, "-p", port, "-n", "5", "-s", "8192", "-c"},
		[]string{bin, "rc_pingpong", "-d", ca, "-p", port, "-n", "5", "-s", "8192", "127.0.0.1"})
	if c.Code != 0 {
		t.Errorf("client: %v", c)
	}
	if s.Code != 1 || !strings.Contains(s.Stdout, "invalid data in page 0\ninvalid data in page 1\n") ||
		!strings.Contains(s.Stderr, "validation failed") {
		t.Errorf("server should report invalid pages and fail: %v", s)
	}
}

// TestPingpongPcap writes the server's traffic with --pcap and decodes it
// with "softroce dump -r": every packet, no ICRC error.
func TestPingpongPcap(t *testing.T) {
	bin := tooltest.Binary(t)
	for _, tool := range []string{"rc_pingpong", "ud_pingpong", "write_bw"} {
		t.Run(tool, func(t *testing.T) {
			sa, ca := tooltest.LoopPair()
			port := strconv.Itoa(tooltest.FreeTCPPort(t))
			file := filepath.Join(t.TempDir(), "pp.pcap")
			s, c := tooltest.RunPair(t, 60*time.Second,
				[]string{bin, tool, "-d", sa, "-p", port, "-n", "10", "-s", "1024", "--pcap", file},
				[]string{bin, tool, "-d", ca, "-p", port, "-n", "10", "-s", "1024", "127.0.0.1"})
			if s.Code != 0 || c.Code != 0 {
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
	bin := tooltest.Binary(t)
	ns1, ns2, a1, a2 := tooltest.NetnsPair(t)
	for _, tool := range []string{"rc_pingpong", "ud_pingpong", "write_bw", "send_lat"} {
		t.Run(tool, func(t *testing.T) {
			args := []string{"-n", "20", "-s", "1024"}
			if tool == "rc_pingpong" || tool == "ud_pingpong" {
				args = append(args, "-c")
			}
			port := strconv.Itoa(10000 + rand.IntN(50000))
			srv := netnstest.Argv(ns1, append([]string{bin, tool, "-d", a1, "-p", port}, args...)...)
			cli := netnstest.Argv(ns2, append(append([]string{bin, tool, "-d", a2, "-p", port}, args...), a1)...)
			s, c := tooltest.RunPair(t, 60*time.Second, srv, cli)
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("server (%s): %v\nclient (%s): %v", ns1, s, ns2, c)
			}
			if strings.HasSuffix(tool, "pingpong") {
				tooltest.MustMatch(t, "client", c, fmt.Sprintf(remoteRE, regexp.QuoteMeta(a1)), fmt.Sprintf(itersRE, 20))
			} else {
				tooltest.MustMatch(t, "client", c, `(?m)^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:`+strings.ReplaceAll(tooltest.PtGIDTail(a1), ".", ":")+`$`)
			}
		})
	}
}

// TestToolsStopOnSIGINT: a server waiting for its client exits on SIGINT
// with a message and a failure code, like the C tools' default handler.
func TestToolsStopOnSIGINT(t *testing.T) {
	bin := tooltest.Binary(t)
	for _, tool := range []string{"rc_pingpong", "write_bw"} {
		t.Run(tool, func(t *testing.T) {
			sa, _ := tooltest.LoopPair()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tool, "-d", sa, "-p", strconv.Itoa(tooltest.FreeTCPPort(t)))
			cmd.Env = tooltest.Env(t)
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
