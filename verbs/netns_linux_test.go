package verbs_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/verbs"
)

// inNetns runs f on an OS thread switched into the named network namespace.
func inNetns(name string, f func() error) error {
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(self)
	runtime.LockOSThread()
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := f()
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it dies with this goroutine, never reused in the wrong namespace.
		return fmt.Errorf("restoring the network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// TestTwoNamespaces runs RC traffic between two network namespaces joined
// by a veth pair, each device on port 4791 of its own address, as two hosts.
func TestTwoNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and a veth pair")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
	id := os.Getpid() % 100000
	nsA, nsB := fmt.Sprintf("srA%d", id), fmt.Sprintf("srB%d", id)
	vA, vB := fmt.Sprintf("sra%d", id), fmt.Sprintf("srb%d", id)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", nsA).Run()
		exec.Command("ip", "netns", "del", nsB).Run()
	})
	run("netns", "add", nsA)
	run("netns", "add", nsB)
	run("link", "add", vA, "netns", nsA, "type", "veth", "peer", "name", vB, "netns", nsB)
	run("-n", nsA, "addr", "add", "10.199.0.1/24", "dev", vA)
	run("-n", nsB, "addr", "add", "10.199.0.2/24", "dev", vB)
	run("-n", nsA, "link", "set", vA, "up")
	run("-n", nsB, "link", "set", vB, "up")
	open := func(ns, addr string) *verbs.Device {
		var ep *udp.Endpoint
		if err := inNetns(ns, func() (err error) {
			ep, err = udp.Listen(netip.MustParseAddrPort(addr))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		d, err := verbs.Open(ep, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	da, db := open(nsA, "10.199.0.1:4791"), open(nsB, "10.199.0.2:4791")
	if m := da.ActiveMTU(); m != verbs.MTU1024 {
		t.Errorf("active MTU %v on a 1500-byte veth, want 1024 (rxe)", m)
	}
	a, b := connected(t, da, db, verbs.QPTypeRC)
	fill := func(p []byte) {
		for i := range p {
			p[i] = byte(i * 7)
		}
	}
	fill(a.buf[:100000])
	b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: b.sge(0, 100000)}})
	a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 100000)},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 50000), RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()},
		{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(300000, 50000), RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()},
	})
	for _, wc := range poll(t, a.cq, 3) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("%+v", wc)
		}
	}
	if wc := poll(t, b.cq, 1); wc[0].ByteLen != 100000 {
		t.Fatalf("%+v", wc)
	}
	for i := 0; i < 50000; i++ {
		if a.buf[300000+i] != a.buf[i] {
			t.Fatalf("READ data differs at %d", i)
		}
	}
}
