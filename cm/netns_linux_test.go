package cm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/verbs"
)

// openUDPIn opens a softroce device on addr inside network namespace ns:
// the socket is created on a thread switched into ns and keeps working in
// ns after the thread switches back.
func openUDPIn(t *testing.T, ns, addr string) *verbs.Device {
	t.Helper()
	type res struct {
		d   *verbs.Device
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine if switching back fails
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer orig.Close()
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, err}
			return
		}
		d, err := verbs.OpenUDP(addr+":4791", &verbs.Config{Name: ns})
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- res{d, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("device in %s: %v", ns, r.err)
	}
	return r.d
}

// TestNetns connects across two network namespaces joined by a veth pair
// (as two hosts), RC and UD.
func TestNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating network namespaces needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the ip command (iproute2) is not installed")
	}
	id := rand.IntN(200) + 20
	ns1, ns2 := fmt.Sprintf("srcm%da", id), fmt.Sprintf("srcm%db", id)
	a1, a2 := fmt.Sprintf("10.232.%d.1", id), fmt.Sprintf("10.232.%d.2", id)
	ip := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns1)
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns1).Run() })
	ip("netns", "add", ns2)
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns2).Run() })
	v1, v2 := fmt.Sprintf("srcm%da", id), fmt.Sprintf("srcm%db", id)
	ip("link", "add", v1, "netns", ns1, "type", "veth", "peer", "name", v2, "netns", ns2)
	ip("-n", ns1, "addr", "add", a1+"/24", "dev", v1)
	ip("-n", ns2, "addr", "add", a2+"/24", "dev", v2)
	ip("-n", ns1, "link", "set", v1, "up")
	ip("-n", ns2, "link", "set", v2, "up")

	db := openUDPIn(t, ns1, a1) // server side
	defer db.Close()
	da := openUDPIn(t, ns2, a2)
	defer da.Close()
	// A fresh veth may drop the first packets (carrier, ARP): allow more
	// time before UNREACHABLE than the in-memory tests do.
	ncfg := testConfig()
	ncfg.Timeout, ncfg.MaxRetries = 250*time.Millisecond, 10
	ab, err := Attach(db, ncfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Close()
	aa, err := Attach(da, ncfg)
	if err != nil {
		t.Fatal(err)
	}
	defer aa.Close()
	p := &pair{da: da, db: db, aa: aa, ab: ab}
	for _, ps := range []mad.PortSpace{mad.PortSpaceTCP, mad.PortSpaceUDP} {
		t.Run(ps.String(), func(t *testing.T) {
			c, s := connect(t, p, "7500", &Options{PortSpace: ps, PrivateData: []byte("across")}, &Options{PortSpace: ps})
			if !strings.HasPrefix(string(s.PeerPrivateData), "across") {
				t.Errorf("private data %q", s.PeerPrivateData)
			}
			if ps == mad.PortSpaceTCP {
				src := newBuf(t, c.PD, 4096)
				dst := newBuf(t, s.PD, 4096)
				copy(dst.b, "remote memory")
				s.QP.State() // order the fill before the server's receive path
				c.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: src.sge(),
					RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey()}})
				if wc := pollWC(t, c.SendCQ, 10*time.Second); wc.Status != verbs.WCSuccess || string(src.b[:13]) != "remote memory" {
					t.Fatalf("RDMA READ across namespaces: %v %q", wc.Status, src.b[:13])
				}
				s.Disconnect()
				<-c.Disconnected()
			}
		})
	}
}
