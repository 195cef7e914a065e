package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/netnstest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
)

// igmpMembers counts the memberships of IPv4 group g in this thread's
// network namespace's igmp file (-1: the file cannot be read). Not
// /proc/net/igmp: that shows the main thread's namespace.
func igmpMembers(g netip.Addr) int {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := os.ReadFile("/proc/thread-self/net/igmp")
	if err != nil {
		return -1
	}
	a := g.As4()
	want := fmt.Sprintf("%02X%02X%02X%02X", a[3], a[2], a[1], a[0])
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == want {
			var users int
			fmt.Sscan(f[1], &users)
			n += users
		}
	}
	return n
}

// TestJoinGroup: two endpoints of one host join a group on loopback and
// each gets every datagram sent to it, with the group as destination and
// an ICRC that verifies for it; the joining endpoints themselves and a
// member of another group get none; leaving (Close) stops delivery and
// drops the membership.
func TestJoinGroup(t *testing.T) {
	r1 := listen(t, "127.0.0.2:0")
	port := r1.LocalAddr().Port()
	r2 := listen(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), port).String())
	s := listen(t, "127.0.0.4:0")
	group := netip.MustParseAddr("239.7.7.7")
	dst := netip.AddrPortFrom(group, port)
	before := igmpMembers(group)

	g1, err := r1.JoinGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	defer g1.Close()
	g2, err := r2.JoinGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	other, err := r2.JoinGroup(netip.MustParseAddr("239.7.7.8"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if n := igmpMembers(group); before >= 0 && n != before+2 {
		t.Errorf("memberships of %v: %d, want %d", group, n, before+2)
	}

	want := sendOne(t, s, dst, netip.AddrPort{}, 0x28)
	for i, g := range []link.Endpoint{g1, g2} {
		p := readN(t, g.(*Endpoint), 1)[0]
		if string(p.Bytes()) != string(want) || p.Dst != dst || p.Src != s.SendAddr() || p.TOS != 0x28 {
			t.Errorf("member %d got %d bytes %v -> %v tos %#x; want %d bytes %v -> %v tos 0x28",
				i+1, p.N, p.Src, p.Dst, p.TOS, len(want), s.SendAddr(), dst)
		}
		if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok {
			t.Errorf("member %d: ICRC does not verify for %v -> %v", i+1, p.Src, p.Dst)
		}
	}
	nothing := func(e link.Endpoint) {
		t.Helper()
		time.Sleep(20 * time.Millisecond)
		if n, err := e.(*Endpoint).PollBatch(linktest.Batch(4, 65536)); n != 0 || err != nil {
			t.Errorf("%v: PollBatch = %d, %v; want nothing", e.LocalAddr(), n, err)
		}
	}
	nothing(r1)
	nothing(r2)
	nothing(other)

	if err := g2.Close(); err != nil {
		t.Fatal(err)
	}
	if n := igmpMembers(group); before >= 0 && n != before+1 {
		t.Errorf("after a leave, memberships of %v: %d, want %d", group, n, before+1)
	}
	sendOne(t, s, dst, netip.AddrPort{}, 0)
	readN(t, g1.(*Endpoint), 1)
	if _, err := g2.ReadBatch(linktest.Batch(1, 65536)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatch after Close: %v, want net.ErrClosed", err)
	}
	nothing(r2)
}

// TestJoinGroupErrors: what JoinGroup refuses, and a group endpoint does
// not send.
func TestJoinGroupErrors(t *testing.T) {
	e := listen(t, "127.0.0.1:0")
	if _, err := e.JoinGroup(netip.MustParseAddr("127.0.0.9")); !errors.Is(err, ErrNotMulticast) {
		t.Errorf("unicast group: %v", err)
	}
	if _, err := e.JoinGroup(netip.MustParseAddr("ff02::1:7")); !errors.Is(err, ErrNotMulticast) {
		t.Errorf("IPv6 group on IPv4: %v", err)
	}
	w := listen(t, "0.0.0.0:0")
	if _, err := w.JoinGroup(netip.MustParseAddr("239.7.7.9")); !errors.Is(err, ErrWildcardGroup) {
		t.Errorf("wildcard endpoint: %v", err)
	}
	g, err := e.JoinGroup(netip.MustParseAddr("::ffff:239.7.7.9")) // IPv4-mapped is IPv4
	if err != nil {
		t.Fatal(err)
	}
	if g.LocalAddr() != netip.AddrPortFrom(netip.MustParseAddr("239.7.7.9"), e.LocalAddr().Port()) {
		t.Errorf("group endpoint on %v", g.LocalAddr())
	}
	pkts := linktest.Batch(1, 0)
	pkts[0].Buf = linktest.Packet(nil, 0x42, 7, nil)
	pkts[0].N, pkts[0].Dst = len(pkts[0].Buf), e.LocalAddr()
	if n, err := g.WriteBatch(pkts); n != 0 || err == nil {
		t.Errorf("group endpoint WriteBatch = %d, %v", n, err)
	}
	if _, err := g.(link.GroupJoiner).JoinGroup(netip.MustParseAddr("239.7.7.10")); err == nil {
		t.Error("a group endpoint joined a group")
	}
	g.Close()
	e.Close()
	if _, err := e.JoinGroup(netip.MustParseAddr("239.7.7.9")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// TestJoinGroupTwoHosts: over a veth pair between two network namespaces,
// a sender's datagrams to an IPv4 and an IPv6 group leave on its
// endpoint's interface (no route to the groups is configured) and reach
// the other host's members. IPv6 multicast needs a multicast-capable
// interface: loopback is not one.
func TestJoinGroupTwoHosts(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Config{
		Prefix: "slg",
		IPv4:   [2]string{"10.197.0.1/24", "10.197.0.2/24"},
		IPv6:   [2]string{"fd97::1/64", "fd97::2/64"},
	})
	open := func(addr string) *Endpoint {
		e, err := Listen(netip.MustParseAddrPort(addr))
		if err != nil {
			t.Fatalf("Listen(%s): %v", addr, err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	// The kernel adds an interface's IPv6 multicast route (ff00::/8)
	// once its carrier is up, a moment after the link is set up; until
	// then what arrives for a group is dropped (Ip6InNoRoutes).
	for _, ns := range p.NS {
		for deadline := time.Now().Add(5 * time.Second); ; {
			out, _ := exec.Command("ip", "-n", ns, "-6", "route", "show", "table", "local").CombinedOutput()
			if strings.Contains(string(out), "ff00::/8") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no IPv6 multicast route in %s: %s", ns, out)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var s4, s6, r4, r6 *Endpoint
	var g4, g6, gl link.Endpoint
	netnstest.Run(t, p.NS[0], func() { s4, s6 = open("10.197.0.1:4791"), open("[fd97::1]:4791") })
	netnstest.Run(t, p.NS[1], func() {
		r4, r6 = open("10.197.0.2:4791"), open("[fd97::2]:4791")
		var err error
		if g4, err = r4.JoinGroup(netip.MustParseAddr("239.7.7.11")); err != nil {
			t.Fatal(err)
		}
		if g6, err = r6.JoinGroup(netip.MustParseAddr("ff05::7:11")); err != nil {
			t.Fatal(err)
		}
		if gl, err = r6.JoinGroup(netip.MustParseAddr("ff02::7:11")); err != nil {
			t.Fatal(err) // link scope: bound on the interface
		}
	})
	defer g4.Close()
	defer g6.Close()
	defer gl.Close()
	for _, c := range []struct {
		s *Endpoint
		g link.Endpoint
	}{{s4, g4}, {s6, g6}, {s6, gl}} {
		var want []byte
		netnstest.Run(t, p.NS[0], func() { want = sendOne(t, c.s, c.g.LocalAddr(), netip.AddrPort{}, 0) })
		var got link.Packet
		netnstest.Run(t, p.NS[1], func() { got = readHere(t, c.g.(*Endpoint), 1)[0] })
		if string(got.Bytes()) != string(want) || got.Dst != c.g.LocalAddr() || got.Src.Addr() != c.s.LocalAddr().Addr() {
			t.Errorf("%v: got %d bytes %v -> %v", c.g.LocalAddr(), got.N, got.Src, got.Dst)
		}
		if _, ok := wire.VerifyICRCAddrs(got.Src, got.Dst, got.Bytes()); !ok {
			t.Errorf("%v: ICRC does not verify", c.g.LocalAddr())
		}
	}
}
