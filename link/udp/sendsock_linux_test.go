package udp

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
	"golang.org/x/sys/unix"
)

// epollWatched returns the descriptors registered with any epoll instance
// of this process (the "tfd:" lines of each eventpoll's fdinfo): Go's
// netpoller registers every socket it waits on.
func epollWatched(t *testing.T) map[int]bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	watched := map[int]bool{}
	for _, d := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + d.Name()); err != nil || l != "anon_inode:[eventpoll]" {
			continue
		}
		f, err := os.Open("/proc/self/fdinfo/" + d.Name())
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == "tfd:" {
				if n, err := strconv.Atoi(fs[1]); err == nil {
					watched[n] = true
				}
			}
		}
		f.Close()
	}
	return watched
}

// epollWatchedInodes returns the inodes of the files registered with any
// epoll instance of this process (the "ino:" field of the "tfd:" lines, in
// hex): a socket is watched whichever duplicate of its descriptor was
// registered.
func epollWatchedInodes(t *testing.T) map[uint64]bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	watched := map[uint64]bool{}
	for _, d := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + d.Name()); err != nil || l != "anon_inode:[eventpoll]" {
			continue
		}
		b, err := os.ReadFile("/proc/self/fdinfo/" + d.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "tfd:") {
				continue
			}
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "ino:"); ok {
					if n, err := strconv.ParseUint(v, 16, 64); err == nil {
						watched[n] = true
					}
				}
			}
		}
	}
	return watched
}

// sockInode returns the inode of endpoint e's bound socket.
func sockInode(t *testing.T, e *Endpoint) uint64 {
	t.Helper()
	var st unix.Stat_t
	var serr error
	if err := e.rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return st.Ino
}

// TestSendSocket: by default an endpoint sends from a second socket on its
// address, with a port of its own that the datagrams carry (SendAddr), which
// Go's netpoller does not watch (its sends would wake a parked netpoller
// thread); SendFromBound sends from the bound socket. Close closes both.
// (The bound socket is watched while a reader waits on it, and with
// Config.Netpoll always, which shows that the check sees the netpoller;
// TestServeStepsAside checks when it is not.)
func TestSendSocket(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			a, b := listen(t, addr), listen(t, addr)
			if s, l := a.SendAddr(), a.LocalAddr(); s.Addr() != l.Addr() || s.Port() == 0 || s.Port() == l.Port() {
				t.Fatalf("SendAddr() = %v with LocalAddr() %v: want the same address and another port", s, l)
			}
			want := sendOne(t, a, b.LocalAddr(), a.LocalAddr(), 0)
			p := readN(t, b, 1)[0]
			if p.Src != a.SendAddr() || string(p.Bytes()) != string(want) {
				t.Errorf("received from %v, want from SendAddr() %v", p.Src, a.SendAddr())
			}
			if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok {
				t.Error("ICRC does not verify for the send socket's port")
			}
			np := listen(t, addr, WithNetpoll())
			var npBound int
			if err := np.rc.Control(func(fd uintptr) { npBound = int(fd) }); err != nil {
				t.Fatal(err)
			}
			w := epollWatched(t)
			if !w[npBound] {
				t.Fatalf("Netpoll: the bound socket (fd %d) is not among the epoll-watched descriptors %v: the check cannot see the netpoller", npBound, w)
			}
			if wi := epollWatchedInodes(t); !wi[sockInode(t, np)] {
				t.Errorf("Netpoll: the bound socket's inode is not among the epoll-watched inodes %v", wi)
			}
			if w[a.tx.fd] {
				t.Errorf("the send socket (fd %d) is watched by an epoll instance (the netpoller)", a.tx.fd)
			}

			dropsReceived(t, a.SendAddr(), a.tx.fd)

			c := listen(t, addr, WithSendFromBound())
			if c.SendAddr() != c.LocalAddr() {
				t.Errorf("SendFromBound: SendAddr() = %v, want LocalAddr() %v", c.SendAddr(), c.LocalAddr())
			}
			sendOne(t, c, b.LocalAddr(), c.LocalAddr(), 0)
			if q := readN(t, b, 1)[0]; q.Src != c.LocalAddr() {
				t.Errorf("SendFromBound: received from %v, want from %v", q.Src, c.LocalAddr())
			}

			if err := a.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if a.tx.fd != -1 {
				t.Errorf("send socket still open after Close (fd %d)", a.tx.fd)
			}
			pkts := linktest.Batch(1, 0)
			pkts[0].Buf = linktest.Packet(nil, 0x42, 1, nil)
			pkts[0].N, pkts[0].Dst = len(pkts[0].Buf), b.LocalAddr()
			if n, err := a.WriteBatch(pkts); n != 0 || !errors.Is(err, net.ErrClosed) {
				t.Errorf("WriteBatch after Close = %d, %v; want 0, net.ErrClosed", n, err)
			}
		})
	}
}

// freePort returns a UDP port free on addr's IP (bound and released).
func freePort(t *testing.T, addr string) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

// TestSourcePorts: with Config.SourcePorts each datagram leaves from the
// port its Src names, on a socket per port (at most SourcePorts of them)
// that the netpoller does not watch, with an ICRC for that port and Src
// set to it on return; a port in use elsewhere, ports past the limit and
// packets without a port leave from SendAddr. GSO still cuts runs of one
// port, and Close closes every per-port socket.
func TestSourcePorts(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			a, b := listen(t, addr, WithSourcePorts(3)), listen(t, addr)
			ip := a.LocalAddr().Addr()
			p1, p2, p3 := freePort(t, addr), freePort(t, addr), freePort(t, addr)
			busy, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			pb := uint16(busy.LocalAddr().(*net.UDPAddr).Port)
			shared := a.SendAddr()
			// ask: the port Src names (0: none); want: the port it must leave from.
			// Three slots: p1, then pb (in use: its bind fails and it
			// keeps a slot), then p2; p3 finds none left.
			cases := []struct{ ask, want uint16 }{
				{p1, p1}, {p1, p1}, {p1, p1}, {pb, shared.Port()}, {p2, p2}, {0, shared.Port()},
				{p3, shared.Port()}, {p2, p2}, {p1, p1},
			}
			pkts := linktest.Batch(len(cases), 0)
			var sent [][]byte
			for i, c := range cases {
				pkts[i].Buf = linktest.Packet(nil, 0x0A, uint32(i), linktest.Payload(i, 1000))
				pkts[i].N, pkts[i].Dst = len(pkts[i].Buf), b.LocalAddr()
				if c.ask != 0 {
					pkts[i].Src = netip.AddrPortFrom(ip, c.ask)
				}
			}
			if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			for i, c := range cases {
				if want := netip.AddrPortFrom(ip, c.want); pkts[i].Src != want {
					t.Errorf("packet %d: Src after WriteBatch = %v, want %v", i, pkts[i].Src, want)
				}
				sent = append(sent, pkts[i].Bytes())
			}
			got := readN(t, b, len(cases))
			for i, p := range got {
				if want := netip.AddrPortFrom(ip, cases[i].want); p.Src != want || !bytes.Equal(p.Bytes(), sent[i]) {
					t.Errorf("datagram %d: from %v, want %v (same bytes: %v)", i, p.Src, want, bytes.Equal(p.Bytes(), sent[i]))
				}
				if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok {
					t.Errorf("datagram %d: ICRC does not verify for source %v", i, p.Src)
				}
			}
			st := a.Stats()
			// Fallbacks: pb's datagram and p3's (a packet without a port
			// asked for none).
			if st.SourcePortSockets != 2 || st.SourcePortFallbacks != 2 {
				t.Errorf("SourcePortSockets, SourcePortFallbacks = %d, %d; want 2, 2", st.SourcePortSockets, st.SourcePortFallbacks)
			}
			if a.GSO() && st.GSOMessages == 0 {
				t.Error("no GSO message: runs of one port are not coalesced")
			}
			w := epollWatched(t)
			var fds []int
			for port, fd := range a.tx.ports {
				if fd >= 0 {
					fds = append(fds, fd)
					if w[fd] {
						t.Errorf("the socket of port %d (fd %d) is watched by an epoll instance", port, fd)
					}
				}
			}
			if len(fds) != 2 {
				t.Fatalf("%d per-port sockets open, want 2", len(fds))
			}
			dropsReceived(t, netip.AddrPortFrom(ip, p1), a.tx.ports[p1])
			if err := a.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			for _, fd := range fds {
				if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
					// The number may have been reused: only a socket bound
					// to p1 or p2 would be ours.
					if sa, err := unix.Getsockname(fd); err == nil {
						t.Errorf("fd %d still open after Close (bound to %v)", fd, sa)
					}
				}
			}
			for _, p := range []uint16{p1, p2} {
				c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, p)))
				if err != nil {
					t.Errorf("port %d not free after Close: %v", p, err)
					continue
				}
				c.Close()
			}
		})
	}
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"with SendFromBound", []Option{WithSourcePorts(4), WithSendFromBound()}},
		{"negative", []Option{WithSourcePorts(-1)}},
		{"over the limit", []Option{WithSourcePorts(MaxSourcePorts + 1)}},
	} {
		if e, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), append(c.opts, WithAnyPort())...); err == nil {
			e.Close()
			t.Errorf("%s: Listen succeeded, want an error", c.name)
		}
	}
}

// dropsReceived sends datagrams to a send socket's address (to, socket fd)
// and checks that none is queued on it: nothing reads a send socket.
func dropsReceived(t *testing.T, to netip.AddrPort, fd int) {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 8; i++ {
		if _, err := c.Write(make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	// Loopback delivers within the sending call.
	if n, err := unix.IoctlGetInt(fd, unix.SIOCINQ); err != nil || n != 0 {
		t.Errorf("send socket %v (fd %d): %d bytes queued (err %v), want 0: nothing reads it", to, fd, n, err)
	}
}
