package dump

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/netnstest"
	"github.com/softroce/softroce/internal/tooltest"
)

// TestDumpLoopbackSplitsGSO: softroce sends bursts with UDP GSO, and a
// capture on lo sees each burst as one super-packet. "dump -i lo" must cut
// them as the kernel does: every RoCE packet decoded, no bad ICRC. It runs
// in a namespace of its own, so no other test's traffic on lo gets in.
func TestDumpLoopbackSplitsGSO(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("live capture and namespaces need root")
	}
	// The tools' traffic must cross lo to be captured there: no
	// same-host lanes.
	t.Setenv("SOFTROCE_LOCAL", "0")
	bin := tooltest.Binary(t)
	ns := netnstest.NewPair(t, netnstest.Config{Prefix: "srgs", IPv4: [2]string{"10.232.0.1/24", "10.232.0.2/24"}, Loopback: true}).NS[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	file := filepath.Join(t.TempDir(), "lo.pcap")
	dump := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, bin, "dump", "-i", "lo", "-w", file)...)
	var derr dlBuffer
	dump.Stderr = &derr
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	defer dump.Process.Kill()
	dlWaitFor(t, "dump to listen", func() bool { return strings.Contains(derr.String(), "listening on lo") })
	port := strconv.Itoa(tooltest.FreeTCPPort(t))
	args := []string{"-p", port, "-n", "20", "-s", "65536"}
	s, c := tooltest.RunPair(t, time.Minute,
		netnstest.Argv(ns, append([]string{bin, "write_bw", "-d", "127.0.0.1"}, args...)...),
		netnstest.Argv(ns, append(append([]string{bin, "write_bw", "-d", "127.0.0.2"}, args...), "127.0.0.1")...))
	if s.Code != 0 || c.Code != 0 {
		t.Fatalf("server: %v\nclient: %v", s, c)
	}
	time.Sleep(200 * time.Millisecond)
	dump.Process.Signal(syscall.SIGINT)
	if err := dump.Wait(); err != nil {
		t.Fatalf("dump: %v\n%s", err, derr.String())
	}
	out, err := exec.CommandContext(ctx, bin, "dump", "-r", file).CombinedOutput()
	if err != nil {
		t.Fatalf("dump -r: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^(\d+) packets, 0 bad ICRC, 0 unknown`).FindSubmatch(out)
	// 20 WRITEs of 64 KiB in packets of at most 4096 bytes: at least 320.
	if m == nil || tooltest.Atoi(t, string(m[1])) < 20*16 {
		tail := string(out[max(len(out)-200, 0):])
		t.Errorf("dump -r of the lo capture: want every WRITE packet decoded and no bad ICRC, got ...%s", tail)
	}
}
