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
			s, c := rpingPair(t, 60*time.Second, tc.server(a1, a2, port, file), tc.client(a1, a2, port, file))
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
