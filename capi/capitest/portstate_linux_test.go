package capitest

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/netnstest"
)

// TestPortEvents: stock ibv_asyncwatch through the library on a device bound
// on a veth prints a port error event when the interface goes down and when
// its carrier goes (the peer end down), and a port active event each time it
// comes back, as over rxe; stock ibv_devinfo shows the port PORT_DOWN
// meanwhile, and the veth's 10 Gb/s as rxe would (active_speed FDR10). Runs in network namespaces of its own (root).
func TestPortEvents(t *testing.T) {
	needLib(t, "ibv_asyncwatch", "ibv_devinfo")
	p := netnstest.NewPair(t, netnstest.Config{Prefix: "srpe", IPv4: [2]string{"10.199.8.1/24", "10.199.8.2/24"}, Loopback: true})
	netnstest.IP(t, "-n", p.NS[0], "addr", "add", "10.199.8.3/24", "dev", p.Veth[0])
	ctx, cancel := contextWithTimeout(t, 60*time.Second)
	defer cancel()
	argv := netnstest.Argv(p.NS[0], "ibv_asyncwatch")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env(p.Addr[0])
	cmd.WaitDelay = time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	want := func(what, sub string) {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s: ibv_asyncwatch ended; stderr:\n%s", what, stderr.String())
			}
			if !strings.Contains(l, sub) {
				t.Fatalf("%s: got %q, want a line with %q", what, l, sub)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no line with %q in 10 s; stderr:\n%s", what, sub, stderr.String())
		}
	}
	var speed string // active_speed, as the last portState read it
	portState := func() string {
		t.Helper()
		argv := netnstest.Argv(p.NS[0], "ibv_devinfo", "-v")
		c := exec.CommandContext(ctx, argv[0], argv[1:]...)
		c.Env = env("10.199.8.3") // an address of its own on the same veth
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("ibv_devinfo: %v\n%s", err, b)
		}
		state := ""
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) >= 2 && f[0] == "state:" {
				state = f[1]
			}
			if len(f) >= 2 && f[0] == "active_speed:" {
				speed = strings.Join(f[1:], " ")
			}
		}
		if state != "" {
			return state
		}
		t.Fatalf("no port state in ibv_devinfo's output:\n%s", b)
		return ""
	}
	want("start", "async event FD")
	if s := portState(); s != "PORT_ACTIVE" {
		t.Fatalf("port %s with the interface up", s)
	}
	if speed != "10.0 Gbps (8)" { // rxe's for a veth (10,000 Mb/s): FDR10
		t.Errorf("active_speed %q, want 10.0 Gbps (8)", speed)
	}
	netnstest.IP(t, "-n", p.NS[0], "link", "set", p.Veth[0], "down")
	want("interface down", "IBV_EVENT_PORT_ERR (10), port 1")
	if s := portState(); s != "PORT_DOWN" {
		t.Errorf("port %s with the interface down", s)
	}
	netnstest.IP(t, "-n", p.NS[0], "link", "set", p.Veth[0], "up")
	want("interface up", "IBV_EVENT_PORT_ACTIVE (9), port 1")
	netnstest.IP(t, "-n", p.NS[1], "link", "set", p.Veth[1], "down")
	want("carrier lost", "IBV_EVENT_PORT_ERR (10), port 1")
	netnstest.IP(t, "-n", p.NS[1], "link", "set", p.Veth[1], "up")
	want("carrier back", "IBV_EVENT_PORT_ACTIVE (9), port 1")
}
