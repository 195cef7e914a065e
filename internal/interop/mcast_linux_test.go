package interop

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/toolkit"
)

// TestCLibraryMckey runs Debian's stock mckey, unmodified, on softroce's C
// library against the guest's stock mckey over the kernel's rxe: the
// kernel sends to an IPv4 group and softroce receives, and the reverse
// (the sender is the "server" role here). The receiver starts first; the
// sender once the receiver's host has joined the group (the sender sends
// 3 s after its own join). Each side exits 0 with its normal output.
func TestCLibraryMckey(t *testing.T) {
	bothRoles(t, func(t *testing.T, softroceSends bool) {
		need(t, true)
		if cfg.capiLib == "" {
			t.Fatalf("the C library could not be built: %v", cfg.capiErr)
		}
		g := bootGuest(t, 0)
		t.Setenv(toolkit.StateEnv, filepath.Join(t.TempDir(), "links.json"))
		group := "239.77.0.1"
		if softroceSends {
			group = "239.77.0.2"
		}
		flags := "-m " + group + " -C 20 -S 500"
		host := endpoint{cmd: fmt.Sprintf("exec -a %s -L %s -- mckey %s -b %s", hostIP, cfg.capiLib, flags, hostIP)}
		guestSide := endpoint{guest: g, cmd: fmt.Sprintf("mckey %s -b %s", flags, g.ip)}
		sender, recver := guestSide, host
		if softroceSends {
			sender, recver = host, guestSide
		}
		sender.cmd += " -s"
		t.Logf("receiver: %s", recver)
		t.Logf("sender: %s", sender)
		ctx := context.Background()
		rch := recver.start(ctx, 90*time.Second)
		joined := func() bool {
			if recver.guest != nil {
				return g.exec(ctx, 20*time.Second, "ip maddr show dev eth0 | grep -qF 'inet  "+group+"'").code == 0
			}
			out, _ := exec.Command("ip", "netns", "exec", cfg.ns, "cat", "/proc/net/igmp").Output()
			return strings.Contains(string(out), igmpHex(group))
		}
		deadline := time.Now().Add(60 * time.Second)
		for !joined() {
			select {
			case r := <-rch:
				t.Fatalf("receiver exited before joining: %v", r)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the receiver's host did not join %s within 60 s", group)
			}
			time.Sleep(200 * time.Millisecond)
		}
		s := <-sender.start(ctx, 90*time.Second)
		r := <-rch
		want := "mckey: joined dgid: ::ffff:" + group + " mlid 0x0 sl 0"
		for _, x := range []struct {
			name string
			r    result
		}{{"sender", s}, {"receiver", r}} {
			if x.r.code != 0 || !strings.Contains(x.r.out, want) || !strings.Contains(x.r.out, "data transfers complete") ||
				!strings.Contains(x.r.out, "return status 0") {
				t.Errorf("%s: %v", x.name, x.r)
			}
		}
	})
}

// igmpHex is an IPv4 group as /proc/net/igmp lists it.
func igmpHex(group string) string {
	var a [4]int
	fmt.Sscanf(group, "%d.%d.%d.%d", &a[0], &a[1], &a[2], &a[3])
	return fmt.Sprintf("%02X%02X%02X%02X", a[3], a[2], a[1], a[0])
}
