package udp

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
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

// TestSendSocket: by default an endpoint sends from a second socket on its
// address, with a port of its own that the datagrams carry (SendAddr), which
// Go's netpoller does not watch (its sends would wake a parked netpoller
// thread); SendFromBound sends from the bound socket. Close closes both.
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
			var bound int
			if err := a.rc.Control(func(fd uintptr) { bound = int(fd) }); err != nil {
				t.Fatal(err)
			}
			w := epollWatched(t)
			if !w[bound] {
				t.Fatalf("the bound socket (fd %d) is not among the epoll-watched descriptors %v: the check cannot see the netpoller", bound, w)
			}
			if w[a.tx.fd] {
				t.Errorf("the send socket (fd %d) is watched by an epoll instance (the netpoller)", a.tx.fd)
			}

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
