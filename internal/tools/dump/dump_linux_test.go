package dump

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/wire"
	"golang.org/x/sys/unix"
)

// dlBuffer is a bytes.Buffer safe for a writer and a poller.
type dlBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *dlBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *dlBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// dlWaitFor polls f until it holds or the deadline passes.
func dlWaitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !f(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// dlLoopbackTarget returns a UDP port on 127.0.0.1 that this test owns (so no
// other test's RoCE traffic on 4791 is disturbed) and a function that sends
// n RoCE packets to it with valid ICRCs.
func dlLoopbackTarget(t *testing.T) (port uint16, send func(n int)) {
	t.Helper()
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	port = uint16(rx.LocalAddr().(*net.UDPAddr).Port)
	tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	// Unconnected with IP_PMTUDISC_DO: Linux sends IPv4 ID 0, so the ICRC
	// computed for ID 0 is the right one (docs/protocol.md §4.2).
	rc, _ := tx.SyscallConn()
	rc.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	})
	if err != nil {
		t.Fatal(err)
	}
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(tx.LocalAddr().(*net.UDPAddr).Port))
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	psn := uint32(0)
	send = func(n int) {
		for range n {
			p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x11, AckReq: true, PSN: psn},
				RETH: wire.RETH{VA: 0x1000, RKey: 0x42, Length: 5}, Payload: []byte("hello")}
			psn++
			b := p.Append(nil)
			wire.FillICRC(b, src, dst, 0)
			if _, err := tx.WriteToUDPAddrPort(b, dst); err != nil {
				t.Error(err)
			}
		}
	}
	return port, send
}

func TestDumpLive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("live capture needs root (AF_PACKET socket); CI runs as root")
	}
	port, send := dlLoopbackTarget(t)
	file := filepath.Join(t.TempDir(), "lo.pcap")
	ps := strconv.Itoa(int(port))
	var stdout, stderr dlBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"dump", "-i", "lo", "-w", file, "-c", "3", "-port", ps}, &stdout, &stderr)
	}()
	dlWaitFor(t, "dump to listen", func() bool { return strings.Contains(stderr.String(), "listening on lo") })
	send(3)
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(stderr.String(), "\n3 packets captured\n") {
			t.Fatalf("exit %d, stderr %q", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("dump -c 3 did not finish; stderr %q", stderr.String())
	}
	out, errOut, code := dlRun(t, "dump", "-r", file, "-port", ps, "-t")
	want := "127.0.0.1." + " > 127.0.0.1." + ps + ": RC_RDMA_WRITE_ONLY dqp 0x000011 psn 0x000000 ackreq RETH va 0x0000000000001000 rkey 0x00000042 len 5 payload 5\n"
	first, _, _ := strings.Cut(out, "\n")
	if code != 0 || errOut != "" || !strings.HasSuffix(out, "\n3 packets, 0 bad ICRC, 0 unknown\n") ||
		!strings.HasPrefix(first, "127.0.0.1.") || !strings.HasSuffix(first+"\n", want[strings.Index(want, " > "):]) {
		t.Errorf("dump -r of the live capture: exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
}
