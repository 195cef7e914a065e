package capture

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/softroce/softroce/wire"
	"golang.org/x/sys/unix"
)

func TestRoceFilterShape(t *testing.T) {
	for _, tc := range []struct {
		off uint32
		lo  int
	}{{0, 0}, {14, 0}, {14, -1}, {0, 1}} {
		off := tc.off
		prog := roceFilter(off, tc.lo, []uint16{4791, 5000}, 1000)
		last := prog[len(prog)-1]
		if last.Code != unix.BPF_RET|unix.BPF_K || last.K != 1000 || prog[len(prog)-2].K != 0 {
			t.Errorf("off %d: program does not end in drop, accept: %+v", off, prog)
		}
		for i, in := range prog {
			if in.Code&0x07 == unix.BPF_JMP && i+1+int(in.Jt) >= len(prog) {
				t.Errorf("off %d: instruction %d jumps out of the program", off, i)
			}
		}
	}
}

// TestLiveLoopback captures datagrams sent over lo to a UDP port of our own
// (so no other test's RoCE traffic on 4791 is disturbed) and checks frames,
// addresses and ICRCs.
func TestLiveLoopback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("live capture needs root (AF_PACKET socket)")
	}
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	port := uint16(rx.LocalAddr().(*net.UDPAddr).Port)
	l, err := OpenLive("lo", &LiveOptions{Ports: []uint16{port}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.LinkType() != LinkTypeEthernet {
		t.Errorf("lo link type %v", l.LinkType())
	}
	tx := pmtuDiscDoSocket(t)
	defer tx.Close()
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(tx.LocalAddr().(*net.UDPAddr).Port))
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	const N = 3
	for i := range N {
		p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: uint32(i)}, Payload: []byte("ping")}
		b := p.Append(nil)
		wire.FillICRC(b, src, dst, 0)
		if _, err := tx.WriteToUDPAddrPort(b, dst); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 2048)
	l.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := range N {
		n, wl, ts, err := l.ReadFrame(buf)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if n != wl || time.Since(ts) > time.Minute {
			t.Errorf("frame %d: n %d wire %d ts %v", i, n, wl, ts)
		}
		var p Packet
		if !ParseFrame(LinkTypeEthernet, buf[:n], &p) {
			t.Fatalf("frame %d not UDP: %x", i, buf[:n])
		}
		if p.Src != src || p.Dst != dst {
			t.Errorf("frame %d: %v > %v", i, p.Src, p.Dst)
		}
		if !wire.VerifyICRC(p.IPHdr, p.Src.Port(), p.Dst.Port(), p.Payload) {
			t.Errorf("frame %d: bad ICRC (IP header %x)", i, p.IPHdr)
		}
	}
	st, err := l.Stats()
	if err != nil || st.Received < N {
		t.Errorf("stats %+v, %v", st, err)
	}
	// Close wakes a blocked reader.
	l.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, _, _, err := l.ReadFrame(buf); done <- err }()
	time.Sleep(20 * time.Millisecond)
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("read after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake ReadFrame")
	}
}

// pmtuDiscDoSocket returns an unconnected UDP socket with IP_PMTUDISC_DO, so
// Linux sends IPv4 ID 0 and the ICRC can be computed in advance.
func pmtuDiscDoSocket(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := c.SyscallConn()
	var serr error
	rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	})
	if serr != nil {
		t.Fatal(serr)
	}
	return c
}

func TestOpenLiveErrors(t *testing.T) {
	_, err := OpenLive("nosuchif0", nil)
	if err == nil {
		t.Fatal("no error for a missing interface")
	}
	if os.Geteuid() != 0 {
		return
	}
	t.Logf("%v", err)
}
