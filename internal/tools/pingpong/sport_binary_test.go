package pingpong

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/tooltest"
)

// TestPingpongSportQP: on links added with 'sport qp', rc_pingpong's
// datagrams leave from the QP's UDP source port as rxe's do: both ends
// compute the same port for one connection from the two QPNs (0xC000 and
// up), and every ICRC, computed for that port, verifies. The server's
// --pcap records both directions.
func TestPingpongSportQP(t *testing.T) {
	bin := tooltest.Binary(t)
	sa, ca := tooltest.LoopPair()
	env := tooltest.Env(t)
	tooltest.AddLinks(t, bin, env, [2]string{"ppsrv", sa}, [2]string{"ppcli", ca})
	port := strconv.Itoa(tooltest.FreeTCPPort(t))
	file := filepath.Join(t.TempDir(), "sport.pcap")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitS := tooltest.StartProc(ctx, t, env, []string{bin, "rc_pingpong", "-d", "ppsrv", "-p", port, "-n", "10", "-s", "6000", "-c", "--pcap", file})
	time.Sleep(50 * time.Millisecond)
	c := tooltest.StartProc(ctx, t, env, []string{bin, "rc_pingpong", "-d", "ppcli", "-p", port, "-n", "10", "-s", "6000", "-c", "127.0.0.1"})()
	s := waitS()
	if s.Code != 0 || c.Code != 0 {
		t.Fatalf("server: %v\nclient: %v", s, c)
	}
	ports, n := tooltest.SourcePorts(t, file)
	if n < 40 || len(ports[sa]) != 1 || len(ports[ca]) != 1 {
		t.Fatalf("%d datagrams; source ports by sender: %v (want one port each for %s and %s)", n, ports, sa, ca)
	}
	for sp := range ports[sa] {
		if _, same := ports[ca][sp]; !same || sp < 0xC000 {
			t.Errorf("source ports %v: want one port of 0xC000 and up, the same on both sides (rxe's rule for a connection)", ports)
		}
	}
}
