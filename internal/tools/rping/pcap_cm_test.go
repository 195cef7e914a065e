package rping

import (
	"context"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/tooltest"
)

// TestPcapOnCMTools: rping and krping write their device's traffic with
// --pcap, as every traffic tool does; "dump -r" decodes the CM handshake
// and the pings, every ICRC right.
func TestPcapOnCMTools(t *testing.T) {
	bin := tooltest.Binary(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name           string
		server, client func(a1, a2, port, file string) []string
	}{
		{"rping",
			func(a1, _, port, file string) []string {
				return []string{bin, "rping", "-s", "-a", a1, "-p", port, "--pcap", file}
			},
			func(a1, a2, port, _ string) []string {
				return []string{bin, "rping", "-c", "-a", a1, "-I", a2, "-p", port, "-V", "-C", "10"}
			}},
		{"krping",
			func(a1, _, port, file string) []string {
				return []string{bin, "krping", "--pcap", file, "server,addr=" + a1 + ",port=" + port + ",count=10"}
			},
			func(a1, _, port, _ string) []string {
				return []string{bin, "krping", "client,validate,addr=" + a1 + ",port=" + port + ",count=10"}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a1, a2 := tooltest.LoopPair()
			port := strconv.Itoa(20000 + rand.IntN(30000))
			file := filepath.Join(dir, tc.name+".pcap")
			s, c := runPair(t, 60*time.Second, tc.server(a1, a2, port, file), tc.client(a1, a2, port, file))
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", s, c)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "dump", "-r", file).CombinedOutput()
			if err != nil {
				t.Fatalf("dump -r: %v\n%s", err, out)
			}
			for _, re := range []string{`MAD CM REQ`, `MAD CM RTU`, `RC_SEND_ONLY`, `(?m)^\d+ packets, 0 bad ICRC, 0 unknown`} {
				if !regexp.MustCompile(re).Match(out) {
					t.Errorf("dump -r of the server's --pcap: no %q in\n%s", re, out)
				}
			}
		})
	}
}

// TestCMToolsSportQP: rping and krping take an address, not -d, and still
// honour the link at that address: with 'sport qp' their datagrams leave
// from rxe's per-QP ports, the CM's MADs from QP1's and the connection's
// from the one port both ends derive for it, so that both sides send from
// the same ports.
func TestCMToolsSportQP(t *testing.T) {
	bin := tooltest.Binary(t)
	for _, tool := range []string{"rping", "krping"} {
		t.Run(tool, func(t *testing.T) {
			a1, a2 := tooltest.LoopPair()
			env := tooltest.Env(t)
			tooltest.AddLinks(t, bin, env, [2]string{"cms", a1}, [2]string{"cmc", a2})
			port := strconv.Itoa(20000 + rand.IntN(30000))
			file := filepath.Join(t.TempDir(), tool+".pcap")
			srv := []string{bin, "rping", "-s", "-a", a1, "-p", port, "--pcap", file}
			cli := []string{bin, "rping", "-c", "-a", a1, "-I", a2, "-p", port, "-V", "-C", "10"}
			if tool == "krping" {
				srv = []string{bin, "krping", "--pcap", file, "server,addr=" + a1 + ",port=" + port + ",count=10"}
				cli = []string{bin, "krping", "client,validate,addr=" + a1 + ",port=" + port + ",count=10"}
			}
			s, c := pairEnv(t, 60*time.Second, env, srv, cli)
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", s, c)
			}
			ports, n := tooltest.SourcePorts(t, file)
			if n < 20 || len(ports) != 2 {
				t.Fatalf("%d datagrams from %v, want both sides", n, ports)
			}
			for p := range ports[a1] {
				if _, same := ports[a2][p]; !same || p < 0xC000 || len(ports[a1]) != len(ports[a2]) {
					t.Errorf("source ports %v: want the same set on both sides, each 0xC000 and up", ports)
					break
				}
			}
		})
	}
}
