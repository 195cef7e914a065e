package pingpong

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/internal/tooltest"
	"github.com/softroce/softroce/wire"
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
	for _, l := range [][]string{{"ppsrv", sa}, {"ppcli", ca}} {
		cmd := exec.Command(bin, "link", "add", l[0], "addr", l[1], "sport", "qp")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("link add %s: %v\n%s", l[0], err, out)
		}
	}
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
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.NewReader(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]map[uint16]int{}
	var p capture.Packet
	n := 0
	for {
		if err := r.Next(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Payload); !ok {
			t.Errorf("frame %d from %v: ICRC does not verify", p.Frame, p.Src)
		}
		who := p.Src.Addr().String()
		if ports[who] == nil {
			ports[who] = map[uint16]int{}
		}
		ports[who][p.Src.Port()]++
	}
	if n < 40 || len(ports[sa]) != 1 || len(ports[ca]) != 1 {
		t.Fatalf("%d datagrams; source ports by sender: %v (want one port each for %s and %s)", n, ports, sa, ca)
	}
	for sp := range ports[sa] {
		if _, same := ports[ca][sp]; !same || sp < 0xC000 {
			t.Errorf("source ports %v: want one port of 0xC000 and up, the same on both sides (rxe's rule for a connection)", ports)
		}
	}
}
