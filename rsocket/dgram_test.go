package rsocket

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"
)

// packetPair opens a datagram rsocket on each device of a UDP pair.
func packetPair(t *testing.T, cfg *Config) (*PacketConn, *PacketConn) {
	t.Helper()
	p := newUDPPair(t)
	a, err := ListenPacket(netip.AddrPortFrom(p.aa.Addr(), 0).String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ListenPacket(netip.AddrPortFrom(p.ab.Addr(), 0).String(), cfg)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestPacketPingPong: the first datagram goes over UDP and teaches both
// sides the other's QP; the rest are UD SENDs, each reported from the
// sender's address, in both directions, with any size up to MaxDatagram.
func TestPacketPingPong(t *testing.T) {
	a, b := packetPair(t, nil)
	a.SetDeadline(time.Now().Add(10 * time.Second))
	b.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, MaxDatagram+10)
	sizes := []int{1, 16, 100, 1000, MaxDatagram, 0, 64, 2000}
	var lastUDP uint64 // a's UDP sends before the last round trip
	for i, size := range sizes {
		if i == len(sizes)-1 {
			lastUDP = a.Stats.SentUDP.Load()
		}
		msg := bytes.Repeat([]byte{byte(i + 1)}, size)
		if n, err := a.WriteTo(msg, b.LocalAddr()); err != nil || n != size {
			t.Fatalf("a.WriteTo %d bytes: %d, %v", size, n, err)
		}
		n, from, err := b.ReadFrom(buf)
		if err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("b.ReadFrom: %d bytes, %v; want %d bytes of %d", n, err, size, i+1)
		}
		if from.String() != a.LocalAddr().String() {
			t.Fatalf("from %v, want %v", from, a.LocalAddr())
		}
		if n, err := b.WriteTo(msg, from); err != nil || n != size {
			t.Fatalf("b.WriteTo: %d, %v", n, err)
		}
		if n, from, err = a.ReadFrom(buf); err != nil || !bytes.Equal(buf[:n], msg) || from.String() != b.LocalAddr().String() {
			t.Fatalf("a.ReadFrom: %d bytes from %v, %v", n, from, err)
		}
	}
	if a.Stats.SentUDP.Load() == 0 || a.Stats.Sent.Load() == 0 || b.Stats.Sent.Load() == 0 || b.Stats.ReceivedUDP.Load() == 0 {
		t.Fatalf("stats: a sent %d over UD and %d over UDP, b sent %d over UD and received %d over UDP",
			a.Stats.Sent.Load(), a.Stats.SentUDP.Load(), b.Stats.Sent.Load(), b.Stats.ReceivedUDP.Load())
	}
	// The peer's answer naming its QP comes over UDP, handled beside the UD
	// traffic: a may send a datagram or two more over UDP before it is
	// taken (more under the race detector), but not after 7 round trips.
	if n := a.Stats.SentUDP.Load(); n != lastUDP || n >= uint64(len(sizes)) {
		t.Fatalf("a sent %d datagrams over UDP (%d before the last): the peer's QP was not learnt", n, lastUDP)
	}
}

// TestPacketConnected: Connect sets Write's destination; a burst the
// receive queue holds arrives whole and in order.
func TestPacketConnected(t *testing.T) {
	a, b := packetPair(t, nil)
	b.SetDeadline(time.Now().Add(10 * time.Second))
	a.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.Write([]byte("x")); !errors.Is(err, syscall.EDESTADDRREQ) {
		t.Fatalf("Write unconnected: %v, want EDESTADDRREQ", err)
	}
	if err := a.Connect(b.LocalAddr().(Addr).AddrPort); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	// The first round trip teaches both sides the QPs.
	a.Write([]byte("hello"))
	n, from, err := b.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("%q %v", buf[:n], err)
	}
	b.WriteTo([]byte("hi"), from)
	if n, err = a.Read(buf); err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("%q %v", buf[:n], err)
	}
	for i := range 40 {
		if _, err := a.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		n, err := b.Read(buf)
		if err != nil || n != 1 || buf[0] != byte(i) {
			t.Fatalf("datagram %d: % x, %v", i, buf[:n], err)
		}
	}
	if _, err := a.Write(make([]byte, MaxDatagram+1)); !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("a datagram too long: %v, want EMSGSIZE", err)
	}
}

// TestPacketNoPeer: as UDP, a datagram to an address with no rsocket is
// sent without an error and lost; a read then waits until its deadline
// (bounded), or fails with EAGAIN at once when non-blocking.
func TestPacketNoPeer(t *testing.T) {
	a, b := packetPair(t, nil)
	dead := netip.AddrPortFrom(b.LocalAddr().(Addr).Addr(), b.LocalAddr().(Addr).Port()+1)
	for range 3 {
		if n, err := a.SendTo([]byte("anyone?"), dead, 0); err != nil || n != 7 {
			t.Fatalf("SendTo a port with no rsocket: %d, %v", n, err)
		}
	}
	a.SetNonblock(true)
	buf := make([]byte, 10)
	start := time.Now()
	if _, _, err := a.RecvFrom(buf, 0); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("non-blocking read: %v, want EAGAIN", err)
	}
	a.SetNonblock(false)
	a.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, _, err := a.ReadFrom(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
	if a.Poll(PollIn, false) != 0 {
		t.Fatal("PollIn with nothing received")
	}
	if a.Poll(PollOut, false) != PollOut {
		t.Fatal("no PollOut")
	}
	a.Close()
	if _, err := a.WriteTo([]byte("x"), b.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// TestPacketBadUDP: datagrams on the UDP socket that are not the rsocket
// protocol are dropped and counted.
func TestPacketBadUDP(t *testing.T) {
	a, _ := packetPair(t, nil)
	u, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(a.LocalAddr().(Addr).AddrPort))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for _, b := range [][]byte{{1, 2, 3}, bytes.Repeat([]byte{0x55}, 40), make([]byte, 16)} {
		u.Write(b)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats.Dropped.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := a.Stats.Dropped.Load(); got != 3 {
		t.Fatalf("dropped %d, want 3", got)
	}
	if a.Poll(PollIn, false) != 0 {
		t.Fatal("a bad datagram was queued")
	}
}

// TestPacketFirstMaxOverUDP: a first datagram of MaxDatagram bytes, which
// goes over UDP behind the DS UDP header (the peer's QP is not known yet),
// arrives whole (a receive buffer of RS_SNDLOWAT cut it to 2,032 bytes).
func TestPacketFirstMaxOverUDP(t *testing.T) {
	a, b := packetPair(t, nil)
	a.SetDeadline(time.Now().Add(10 * time.Second))
	b.SetDeadline(time.Now().Add(10 * time.Second))
	msg := bytes.Repeat([]byte{7}, MaxDatagram)
	if n, err := a.WriteTo(msg, b.LocalAddr()); err != nil || n != len(msg) {
		t.Fatalf("WriteTo: %d, %v", n, err)
	}
	buf := make([]byte, MaxDatagram+10)
	n, _, err := b.ReadFrom(buf)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("ReadFrom: %d bytes, %v; want %d", n, err, len(msg))
	}
	if a.Stats.SentUDP.Load() == 0 {
		t.Fatal("the first datagram did not go over UDP")
	}
}

// TestPacketNonblockingNeverParks: on devices whose links can be polled, a
// non-blocking RecvFrom with nothing queued, or one whose poll brought
// datagrams for it, fails or returns at once; it never sleeps (it used to
// park up to nbPark after polls that found nothing). Before its first
// send a socket has no UD QP to poll, and a call may still park.
func TestPacketNonblockingNeverParks(t *testing.T) {
	a, b := packetPair(t, nil)
	buf := make([]byte, 64)
	// A socket's UD QP comes with its first send; until then only its UDP
	// socket's goroutine can bring a datagram, and a call parks for it.
	b.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := b.WriteTo([]byte{1}, a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	parks := b.Stats.Parks.Load()
	for range 20 {
		if _, _, err := b.RecvFrom(buf, MsgDontWait); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("RecvFrom with nothing sent: %v, want EAGAIN", err)
		}
	}
	for i := range 50 {
		if _, err := a.WriteTo([]byte{byte(i)}, b.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(10 * time.Second)
		for {
			n, _, err := b.RecvFrom(buf, MsgDontWait)
			if err == nil {
				if n != 1 || buf[0] != byte(i) {
					t.Fatalf("datagram %d: %d bytes %x", i, n, buf[:n])
				}
				break
			}
			if !errors.Is(err, syscall.EAGAIN) {
				t.Fatal(err)
			}
			if time.Now().After(end) {
				t.Fatalf("datagram %d not received within 10 s", i)
			}
		}
	}
	if n := b.Stats.Parks.Load() - parks; n != 0 {
		t.Fatalf("non-blocking RecvFrom parked %d times, want 0", n)
	}
}
