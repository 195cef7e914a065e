package linktest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// PairFunc returns two endpoints connected to each other: a datagram a
// writes to b.LocalAddr() arrives at b, and the other way round. The suite
// closes both at the end of each subtest.
type PairFunc func(t testing.TB) (a, b link.Endpoint)

// Timeout bounds every blocking step of the suite.
const Timeout = 10 * time.Second

// Packet returns a RoCEv2 RC SEND_ONLY datagram to QP qpn with the given PSN
// and payload, with a zero ICRC placeholder, appended to dst.
func Packet(dst []byte, qpn, psn uint32, payload []byte) []byte {
	p := wire.Packet{
		BTH:     wire.BTH{Opcode: wire.OpSendOnly, PKey: wire.DefaultPKey, DestQP: qpn, PSN: psn},
		Payload: payload,
	}
	return p.Append(dst)
}

// Payload returns a deterministic payload of n bytes for packet i.
func Payload(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*7 + j)
	}
	return b
}

// Batch allocates n packets with buffers of capacity size.
func Batch(n, size int) []link.Packet {
	pkts := make([]link.Packet, n)
	for i := range pkts {
		pkts[i].Buf = make([]byte, size)
	}
	return pkts
}

// Run runs the suite, one subtest per property, each on a fresh pair:
// endpoint properties; batches in both directions arrive intact, in order,
// with Src and Dst set and an ICRC that verifies (wire.VerifyICRCAddrs, and
// wire.VerifyICRC when the link reports the IP header; not for a datagram
// marked Local); batches larger than
// BatchSize; empty batches; a too-short packet and one over the MTU are
// refused without breaking the link; a buffer of capacity 0 is refused;
// Close unblocks a blocked ReadBatch with net.ErrClosed, later calls fail
// the same way, writing to a closed peer is silently accepted, and Close is
// idempotent.
func Run(t *testing.T, newPair PairFunc) {
	tests := []struct {
		name string
		fn   func(*testing.T, link.Endpoint, link.Endpoint)
	}{
		{"Properties", testProperties},
		{"RoundTrip", testRoundTrip},
		{"BothWays", testBothWays},
		{"LargeBatch", testLargeBatch},
		{"EmptyBatch", testEmptyBatch},
		{"ZeroCapacity", testZeroCapacity},
		{"ShortPacket", testShortPacket},
		{"Oversized", testOversized},
		{"CloseUnblocksRead", testCloseUnblocksRead},
		{"CloseTwice", testCloseTwice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPair(t)
			defer a.Close()
			defer b.Close()
			tc.fn(t, a, b)
		})
	}
}

func testProperties(t *testing.T, a, b link.Endpoint) {
	for _, e := range []link.Endpoint{a, b} {
		if !e.LocalAddr().IsValid() || e.LocalAddr().Port() == 0 {
			t.Errorf("LocalAddr() = %v, want an address with a port", e.LocalAddr())
		}
		if e.MTU() < 576 {
			t.Errorf("MTU() = %d, want >= 576", e.MTU())
		}
		if e.BatchSize() < 1 {
			t.Errorf("BatchSize() = %d, want >= 1", e.BatchSize())
		}
	}
}

// maxPayload is the largest RoCE payload the suite sends over e.
func maxPayload(e link.Endpoint) int {
	return min(4096, e.MTU()-wire.MaxIPHeaderLen-8-wire.BTHLen-wire.ICRCLen)
}

// send writes n packets (payload sizes varying up to max) from a to b and
// returns the bytes sent.
func send(t testing.TB, a, b link.Endpoint, first, n int) [][]byte {
	t.Helper()
	max := maxPayload(a)
	pkts := Batch(n, 0)
	want := make([][]byte, n)
	for i := range pkts {
		k := first + i
		size := (k*997)%max + 1
		pkts[i].Buf = Packet(nil, 0x11, uint32(k), Payload(k, size))
		pkts[i].N = len(pkts[i].Buf)
		pkts[i].Dst = b.LocalAddr()
	}
	w, err := a.WriteBatch(pkts)
	if err != nil || w != n {
		t.Fatalf("WriteBatch(%d packets) = %d, %v", n, w, err)
	}
	for i := range pkts {
		want[i] = pkts[i].Bytes()
	}
	return want
}

// receive reads n packets from b, failing after Timeout.
func receive(t testing.TB, b link.Endpoint, n int) []link.Packet {
	t.Helper()
	got, err := Receive(b, n)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Receive reads n datagrams from e (copying each) and returns them. After
// Timeout it closes e and returns an error. It may be called from any
// goroutine.
func Receive(e link.Endpoint, n int) ([]link.Packet, error) {
	var got []link.Packet
	done := make(chan error, 1)
	go func() {
		buf := Batch(e.BatchSize(), 65536)
		for len(got) < n {
			k, err := e.ReadBatch(buf)
			if err != nil {
				done <- err
				return
			}
			for _, p := range buf[:k] {
				q := p
				q.Buf = bytes.Clone(p.Bytes())
				got = append(got, q)
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			return got, fmt.Errorf("ReadBatch after %d of %d packets: %w", len(got), n, err)
		}
	case <-time.After(Timeout):
		e.Close()
		<-done
		return got, fmt.Errorf("received %d of %d packets in %v", len(got), n, Timeout)
	}
	return got, nil
}

// check compares received packets with the sent ones, in order, and
// verifies addresses and ICRCs.
func check(t testing.TB, from, to link.Endpoint, want [][]byte, got []link.Packet) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d packets, want %d", len(got), len(want))
	}
	for i, p := range got {
		if !bytes.Equal(p.Bytes(), want[i]) {
			t.Fatalf("packet %d: got %d bytes %x..., want %d bytes %x...", i, p.N, head(p.Bytes()), len(want[i]), head(want[i]))
		}
		if sa := link.CapabilitiesOf(from).SendAddr; p.Src != sa || p.Dst != to.LocalAddr() {
			t.Errorf("packet %d: Src, Dst = %v, %v; want %v, %v", i, p.Src, p.Dst, sa, to.LocalAddr())
		}
		// (Any IPv4 ID: UDP GSO numbers segments 0, 1, 2, ...) A datagram
		// that crossed no wire (Local) carries no ICRC.
		if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok && !p.Local {
			t.Errorf("packet %d: VerifyICRCAddrs failed", i)
		}
		if p.IPHdrLen > 0 && !wire.VerifyICRC(p.IPHdr[:p.IPHdrLen], p.Src.Port(), p.Dst.Port(), p.Bytes()) {
			t.Errorf("packet %d: VerifyICRC with the reported IP header failed", i)
		}
		var wp wire.Packet
		if err := wp.Parse(p.Bytes()); err != nil {
			t.Errorf("packet %d: Parse: %v", i, err)
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

func testRoundTrip(t *testing.T, a, b link.Endpoint) {
	want := send(t, a, b, 0, 10)
	check(t, a, b, want, receive(t, b, len(want)))
}

func testBothWays(t *testing.T, a, b link.Endpoint) {
	var wg sync.WaitGroup
	var gotA, gotB []link.Packet
	var errA, errB error
	wg.Add(2)
	go func() { defer wg.Done(); gotB, errB = Receive(b, 20) }()
	go func() { defer wg.Done(); gotA, errA = Receive(a, 20) }()
	wantB := send(t, a, b, 0, 20)
	wantA := send(t, b, a, 100, 20)
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("a: %v; b: %v", errA, errB)
	}
	check(t, a, b, wantB, gotB)
	check(t, b, a, wantA, gotA)
}

func testLargeBatch(t *testing.T, a, b link.Endpoint) {
	n := 3*a.BatchSize() + 1
	// Read while writing: a socket with a small receive buffer (not root)
	// could not hold them all.
	var got []link.Packet
	var err error
	done := make(chan struct{})
	go func() { defer close(done); got, err = Receive(b, n) }()
	want := send(t, a, b, 0, n)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	check(t, a, b, want, got)
}

func testEmptyBatch(t *testing.T, a, b link.Endpoint) {
	if n, err := a.WriteBatch(nil); n != 0 || err != nil {
		t.Errorf("WriteBatch(nil) = %d, %v; want 0, nil", n, err)
	}
	if n, err := b.ReadBatch(nil); n != 0 || err != nil {
		t.Errorf("ReadBatch(nil) = %d, %v; want 0, nil", n, err)
	}
}

func testZeroCapacity(t *testing.T, a, b link.Endpoint) {
	if n, err := b.ReadBatch(Batch(2, 0)); n != 0 || err == nil {
		t.Errorf("ReadBatch with zero-capacity buffers = %d, %v; want 0, an error", n, err)
	}
}

func testShortPacket(t *testing.T, a, b link.Endpoint) {
	pkts := Batch(2, 64)
	pkts[0].Buf = Packet(pkts[0].Buf[:0], 1, 1, nil)
	pkts[0].N = len(pkts[0].Buf)
	pkts[0].Dst = b.LocalAddr()
	pkts[1].N = 3
	pkts[1].Dst = b.LocalAddr()
	n, err := a.WriteBatch(pkts)
	if n != 1 || err == nil {
		t.Fatalf("WriteBatch(good, 3-byte packet) = %d, %v; want 1, an error", n, err)
	}
	check(t, a, b, [][]byte{pkts[0].Bytes()}, receive(t, b, 1))
}

func testOversized(t *testing.T, a, b link.Endpoint) {
	pkts := Batch(1, a.MTU())
	pkts[0].N = a.MTU() // plus IP and UDP headers: over the MTU
	pkts[0].Dst = b.LocalAddr()
	n, err := a.WriteBatch(pkts)
	if n != 0 || err == nil {
		t.Fatalf("WriteBatch(%d-byte datagram, MTU %d) = %d, %v; want 0, an error", pkts[0].N, a.MTU(), n, err)
	}
	// The link still works.
	want := send(t, a, b, 0, 1)
	check(t, a, b, want, receive(t, b, 1))
}

func testCloseUnblocksRead(t *testing.T, a, b link.Endpoint) {
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadBatch(Batch(1, 65536))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked ReadBatch after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(Timeout):
		t.Fatal("ReadBatch still blocked after Close")
	}
	if _, err := b.ReadBatch(Batch(1, 65536)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatch after Close: %v, want net.ErrClosed", err)
	}
	pkts := Batch(1, 0)
	pkts[0].Buf = Packet(nil, 1, 1, nil)
	pkts[0].N = len(pkts[0].Buf)
	pkts[0].Dst = a.LocalAddr()
	if _, err := b.WriteBatch(pkts); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteBatch after Close: %v, want net.ErrClosed", err)
	}
	// Writing to a closed peer is not an error the sender sees (as on a network).
	pkts[0].Dst = b.LocalAddr()
	if n, err := a.WriteBatch(pkts); n != 1 || err != nil {
		t.Errorf("WriteBatch to a closed peer = %d, %v; want 1, nil", n, err)
	}
}

func testCloseTwice(t *testing.T, a, b link.Endpoint) {
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
