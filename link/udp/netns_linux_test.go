package udp

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
)

// inNetns runs f on an OS thread switched into the named network namespace
// (socket creation and interface-name look-ups depend on it).
func inNetns(t *testing.T, name string, f func()) {
	t.Helper()
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(self)
	runtime.LockOSThread()
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: it dies with this goroutine.
			t.Errorf("restoring the network namespace: %v", err)
			return
		}
		runtime.UnlockOSThread()
	}()
	f()
}

// readHere reads n datagrams from e on the calling goroutine (so on its
// thread and namespace), closing e if they do not come within 5 s.
func readHere(t *testing.T, e *Endpoint, n int) []link.Packet {
	t.Helper()
	timer := time.AfterFunc(5*time.Second, func() { e.Close() })
	defer timer.Stop()
	var got []link.Packet
	buf := linktest.Batch(e.BatchSize(), 65536)
	for len(got) < n {
		k, err := e.ReadBatch(buf)
		if err != nil {
			t.Fatalf("ReadBatch after %d of %d datagrams: %v", len(got), n, err)
		}
		for _, p := range buf[:k] {
			q := p
			q.Buf = bytes.Clone(p.Bytes())
			got = append(got, q)
		}
	}
	return got
}

// TestTwoHosts runs the link between two network namespaces joined by a
// veth pair, as two hosts: IPv4 with GSO/GRO over a 1500-byte MTU, IPv6
// link-local addresses (zones), and a wildcard IPv6 endpoint.
func TestTwoHosts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and a veth pair")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
	id := os.Getpid() % 100000
	nsA, nsB := fmt.Sprintf("sluA%d", id), fmt.Sprintf("sluB%d", id)
	vA, vB := fmt.Sprintf("slua%d", id), fmt.Sprintf("slub%d", id)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", nsA).Run()
		exec.Command("ip", "netns", "del", nsB).Run()
	})
	ip("netns", "add", nsA)
	ip("netns", "add", nsB)
	ip("link", "add", vA, "netns", nsA, "type", "veth", "peer", "name", vB, "netns", nsB)
	ip("-n", nsA, "addr", "add", "10.198.0.1/24", "dev", vA)
	ip("-n", nsB, "addr", "add", "10.198.0.2/24", "dev", vB)
	ip("-n", nsA, "addr", "add", "fe80::a/64", "dev", vA, "nodad")
	ip("-n", nsB, "addr", "add", "fe80::b/64", "dev", vB, "nodad")
	ip("-n", nsA, "link", "set", vA, "up")
	ip("-n", nsB, "link", "set", vB, "up")

	open := func(addr string) *Endpoint {
		e, err := Listen(netip.MustParseAddrPort(addr))
		if err != nil {
			t.Fatalf("Listen(%s): %v", addr, err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	var a4, a6, b4, b6, bw *Endpoint
	inNetns(t, nsA, func() {
		a4, a6 = open("10.198.0.1:4791"), open("[fe80::a%"+vA+"]:4791")
	})
	inNetns(t, nsB, func() {
		b4, b6, bw = open("10.198.0.2:4791"), open("[fe80::b%"+vB+"]:4791"), open("[::]:4793")
	})
	if a4.MTU() != 1500 || b6.MTU() != 1500 {
		t.Errorf("MTU on veth = %d, %d; want 1500", a4.MTU(), b6.MTU())
	}

	t.Run("IPv4-GSO", func(t *testing.T) {
		const n = 100
		pkts := linktest.Batch(n, 0)
		for i := range pkts {
			pkts[i].Buf = linktest.Packet(nil, 0x11, uint32(i), linktest.Payload(i, 1024))
			pkts[i].N, pkts[i].Dst = len(pkts[i].Buf), b4.LocalAddr()
		}
		if k, err := a4.WriteBatch(pkts); k != n || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
		got := readHere(t, b4, n)
		for i, p := range got {
			if !bytes.Equal(p.Bytes(), pkts[i].Bytes()) || p.Src != a4.LocalAddr() || p.Dst != b4.LocalAddr() {
				t.Fatalf("datagram %d differs", i)
			}
			if id, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok {
				t.Errorf("datagram %d: ICRC does not verify", i)
			} else if a4.GSO() && int(id) != i%a4.BatchSize()%(maxGSOBytes/p.N) {
				t.Errorf("datagram %d: ICRC computed for ID %d", i, id)
			}
		}
		t.Logf("sender %+v", a4.Stats())
		t.Logf("receiver %+v", b4.Stats())
	})

	t.Run("IPv6-link-local", func(t *testing.T) {
		inNetns(t, nsA, func() {
			sendOne(t, a6, netip.MustParseAddrPort("[fe80::b%"+vA+"]:4791"), netip.AddrPort{}, 0)
		})
		var p link.Packet
		inNetns(t, nsB, func() {
			p = readHere(t, b6, 1)[0]
			sendOne(t, b6, p.Src, netip.AddrPort{}, 0) // reply to the zoned source
		})
		if want := netip.MustParseAddrPort("[fe80::a%" + vB + "]:4791"); p.Src != want || p.Dst != b6.LocalAddr() {
			t.Errorf("Src, Dst = %v, %v; want %v, %v", p.Src, p.Dst, want, b6.LocalAddr())
		}
		if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok {
			t.Error("ICRC does not verify")
		}
		inNetns(t, nsA, func() {
			q := readHere(t, a6, 1)[0]
			if want := netip.MustParseAddrPort("[fe80::b%" + vA + "]:4791"); q.Src != want {
				t.Errorf("reply Src = %v, want %v", q.Src, want)
			}
		})
	})

	t.Run("IPv6-wildcard", func(t *testing.T) {
		inNetns(t, nsA, func() {
			sendOne(t, a6, netip.MustParseAddrPort("[fe80::b%"+vA+"]:4793"), netip.AddrPort{}, 0)
		})
		inNetns(t, nsB, func() {
			p := readHere(t, bw, 1)[0]
			if want := netip.MustParseAddrPort("[fe80::b%" + vB + "]:4793"); p.Dst != want {
				t.Errorf("wildcard Dst = %v, want %v", p.Dst, want)
			}
			sendOne(t, bw, p.Src, netip.AddrPort{}, 0) // source from the route
		})
		inNetns(t, nsA, func() {
			q := readHere(t, a6, 1)[0]
			if want := netip.MustParseAddrPort("[fe80::b%" + vA + "]:4793"); q.Src != want {
				t.Errorf("reply Src = %v, want %v", q.Src, want)
			}
			if _, ok := wire.VerifyICRCAddrs(q.Src, q.Dst, q.Bytes()); !ok {
				t.Error("reply ICRC does not verify")
			}
		})
	})
}
