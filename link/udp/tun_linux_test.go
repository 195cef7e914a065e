package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
)

// TestWireIPv4IDs checks the IP headers the kernel really puts on the wire,
// including for UDP GSO sends. It creates a private network namespace with
// a TUN device that has no offloads, so the kernel segments GSO buffers in
// software and hands every datagram, with its final IP header, to the TUN
// file descriptor. Each datagram's ICRC must verify against that header:
// ID 0 with DF for single sends, IDs 0, 1, 2, ... for GSO segments.
func TestWireIPv4IDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace and a TUN device")
	}
	local := netip.MustParseAddr("198.18.0.1")
	peer := netip.MustParseAddrPort("198.18.0.2:4791")
	type setup struct {
		tun     *os.File
		tunFD   int // non-blocking; do not call tun.Fd, which makes it blocking
		gso     *Endpoint
		plain   *Endpoint
		err     error
		skipMsg string
	}
	ch := make(chan setup, 1)
	go func() {
		// This thread enters a new network namespace for the set-up and
		// goes back to its own after it (the sockets and the TUN device
		// keep the new one alive). Left there, it could be the process's
		// main thread, which the runtime keeps when its goroutine exits
		// locked: /proc/net, which shows that thread's namespace, would
		// then show the new one to the tests after this one.
		runtime.LockOSThread()
		var s setup
		defer func() { ch <- s }()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			s.skipMsg = "this thread's network namespace: " + err.Error()
			return
		}
		defer func() {
			// Unlocked only once back home; else the thread dies with the
			// goroutine (or, the main thread, is kept but never runs Go code).
			if err := unix.Setns(self, unix.CLONE_NEWNET); err == nil {
				runtime.UnlockOSThread()
			} else if s.err == nil {
				s.err = fmt.Errorf("back to the test's network namespace: %w", err)
			}
			unix.Close(self)
		}()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			s.skipMsg = "unshare(CLONE_NEWNET): " + err.Error()
			return
		}
		s.tun, s.tunFD, s.err = openTUN("srtun0", local)
		if s.err != nil {
			if errors.Is(s.err, os.ErrNotExist) || errors.Is(s.err, unix.EPERM) {
				s.skipMsg, s.err = s.err.Error(), nil
			}
			return
		}
		if s.gso, s.err = Listen(netip.AddrPortFrom(local, 0)); s.err != nil {
			return
		}
		s.plain, s.err = Listen(netip.AddrPortFrom(local, 4792), WithoutGSO())
	}()
	s := <-ch
	if s.tun != nil {
		defer s.tun.Close()
	}
	if s.gso != nil {
		defer s.gso.Close()
	}
	if s.plain != nil {
		defer s.plain.Close()
	}
	if s.skipMsg != "" {
		t.Skip(s.skipMsg)
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	if s.gso.MTU() != 1500 {
		t.Errorf("MTU of the TUN address = %d, want 1500", s.gso.MTU())
	}
	if !s.gso.GSO() {
		t.Log("kernel without UDP GSO: only single sends are checked")
	}

	const n = 150 // several GSO runs and several sendmmsg calls
	for _, c := range []struct {
		name string
		e    *Endpoint
		tos  uint8
		last int // size of the last payload
	}{
		{"gso", s.gso, 0, 1024},
		{"gso-short-last", s.gso, 0x02, 100},
		{"plain", s.plain, 0, 1024},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkts := linktest.Batch(n, 0)
			for i := range pkts {
				size := 1024
				if i == n-1 {
					size = c.last
				}
				pkts[i].Buf = linktest.Packet(nil, 0x11, uint32(i), linktest.Payload(i, size))
				pkts[i].N, pkts[i].Dst, pkts[i].TOS = len(pkts[i].Buf), peer, c.tos
			}
			before := c.e.Stats()
			if k, err := c.e.WriteBatch(pkts); k != n || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			st := c.e.Stats()
			gso := st.GSOSegments > before.GSOSegments
			if c.e == s.plain && gso {
				t.Error("WithoutGSO endpoint used GSO")
			}
			for i := 0; i < n; i++ {
				ip := readTUN(t, s.tunFD)
				if len(ip) < 28 || ip[0] != 0x45 || ip[9] != unix.IPPROTO_UDP {
					t.Fatalf("datagram %d: not IPv4/UDP: %x", i, ip[:min(len(ip), 28)])
				}
				hdr, udp := ip[:20], ip[20:]
				sport, dport := binary.BigEndian.Uint16(udp), binary.BigEndian.Uint16(udp[2:])
				payload := udp[8:binary.BigEndian.Uint16(udp[4:])]
				psn := binary.BigEndian.Uint32(payload[8:]) & 0xFFFFFF
				id := binary.BigEndian.Uint16(hdr[4:])
				wantID := uint16(0)
				if gso {
					// Runs are cut at txPkts packets per call and at the
					// GSO limits; each run starts again at ID 0.
					perRun := min(maxGSOSegments, maxGSOBytes/len(pkts[0].Bytes()))
					wantID = uint16(int(psn) % c.e.txPkts % perRun)
				}
				if psn != uint32(i) || id != wantID || hdr[6]&0x40 == 0 || hdr[1] != c.tos {
					t.Errorf("datagram %d: PSN %d, IPv4 ID %d, flags %#x, TOS %#x; want PSN %d, ID %d, DF, TOS %#x",
						i, psn, id, hdr[6], hdr[1], i, wantID, c.tos)
				}
				if !wire.VerifyICRC(hdr, sport, dport, payload) {
					t.Errorf("datagram %d (ID %d): ICRC does not verify against the header on the wire", i, id)
				}
			}
			t.Logf("%d datagrams, %d GSO sends, %d GSO segments", n, st.GSOMessages-before.GSOMessages, st.GSOSegments-before.GSOSegments)
		})
	}
}

// openTUN creates an IPv4 TUN device without offloads in the calling
// thread's network namespace, with address a/24, and brings it up.
func openTUN(name string, a netip.Addr) (*os.File, int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: "/dev/net/tun", Err: err}
	}
	f := os.NewFile(uintptr(fd), "tun")
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		f.Close()
		return nil, 0, os.NewSyscallError("TUNSETIFF", err)
	}
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	defer unix.Close(s)
	a4, mask := a.As4(), [4]byte{255, 255, 255, 0}
	for _, op := range []struct {
		req uint
		v   []byte
	}{{unix.SIOCSIFADDR, a4[:]}, {unix.SIOCSIFNETMASK, mask[:]}} {
		ifr, _ := unix.NewIfreq(name)
		ifr.SetInet4Addr(op.v)
		if err := unix.IoctlIfreq(s, op.req, ifr); err != nil {
			f.Close()
			return nil, 0, os.NewSyscallError("ioctl", err)
		}
	}
	ifr, _ = unix.NewIfreq(name)
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		f.Close()
		return nil, 0, os.NewSyscallError("SIOCGIFFLAGS", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		f.Close()
		return nil, 0, os.NewSyscallError("SIOCSIFFLAGS", err)
	}
	return f, fd, nil
}

// readTUN returns the next IPv4/UDP datagram from the TUN device, skipping
// anything else (e.g. IPv6 router solicitations).
func readTUN(t *testing.T, fd int) []byte {
	t.Helper()
	buf := make([]byte, 65536)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := unix.Read(fd, buf)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				time.Sleep(time.Millisecond)
				continue
			}
			t.Fatalf("read TUN: %v", err)
		}
		if n >= 28 && buf[0]>>4 == 4 && buf[9] == unix.IPPROTO_UDP {
			return buf[:n]
		}
	}
	t.Fatal("no datagram on the TUN device")
	return nil
}
