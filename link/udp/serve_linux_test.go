package udp

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
)

// TestServeView: ServeView hands over every datagram, in order, one at a
// time (a ping-pong) and in a GSO burst, with and without GRO; after a
// read that drained the socket it waits instead of reading again, so one
// datagram at a time costs no empty read (a loop of ReadBatchView calls
// makes one per datagram); and it returns net.ErrClosed when the endpoint
// closes.
func TestServeView(t *testing.T) {
	forGROModes(t, func(t *testing.T, a, b *Endpoint) {
		got := make(chan []byte, 256)
		done := make(chan error, 1)
		go func() {
			done <- a.ServeView(linktest.Batch(16, 8192), 0, func(pkts []link.Packet) {
				for _, p := range pkts {
					got <- bytes.Clone(p.Buf[:p.N])
				}
			})
		}()
		expect := func(want []byte) {
			t.Helper()
			select {
			case g := <-got:
				// The ICRC covers the IPv4 ID, which GSO numbers per
				// run: check it, and compare the rest.
				if len(g) != len(want) || !bytes.Equal(g[:len(g)-wire.ICRCLen], want[:len(want)-wire.ICRCLen]) {
					t.Fatalf("received %x, want %x", g, want)
				}
				if _, ok := wire.VerifyICRCAddrs(b.SendAddr(), a.LocalAddr(), g); !ok {
					t.Fatalf("received a datagram with a bad ICRC: %x", g)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no datagram in 5 s")
			}
		}
		send := func(first, n int) [][]byte {
			t.Helper()
			pkts := make([]link.Packet, n)
			want := make([][]byte, n)
			for i := range pkts {
				w := linktest.Packet(nil, 0x0A, uint32(first+i), linktest.Payload(first+i, 1000))
				pkts[i] = link.Packet{Buf: bytes.Clone(w), N: len(w), Dst: a.LocalAddr()}
				wire.FillICRC(w, b.SendAddr(), a.LocalAddr(), 0)
				want[i] = w
			}
			if k, err := b.WriteBatch(pkts); k != n || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			return want
		}
		const rounds = 20
		time.Sleep(10 * time.Millisecond) // let ServeView wait on the empty socket
		empty0 := a.Stats().EmptyReads
		for i := 0; i < rounds; i++ {
			want := send(i, 1)
			expect(want[0])
		}
		if n := a.Stats().EmptyReads - empty0; n > rounds/4 {
			t.Errorf("%d empty reads for %d datagrams sent one at a time; want at most %d", n, rounds, rounds/4)
		}
		for _, w := range send(rounds, 100) {
			expect(w)
		}
		a.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("ServeView after Close = %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("ServeView did not return within 5 s of Close")
		}
	})
}

// TestPollBesideServe: Poll, called in a loop beside ServeView (as a
// program's polling thread beside the device's receive loop), receives part
// of a stream, and the two hand every datagram over once and in the order
// sent, with and without GRO; an empty Poll allocates nothing, and Poll
// after Close returns net.ErrClosed.
func TestPollBesideServe(t *testing.T) {
	forGROModes(t, func(t *testing.T, a, b *Endpoint) {
		const total = 3000
		var seq []uint32 // PSNs in the order handled (handles are serialized)
		polled := 0
		record := func(pkts []link.Packet) {
			for _, p := range pkts {
				var h wire.BTH
				h.Decode(p.Buf[:p.N])
				seq = append(seq, h.PSN)
			}
		}
		done := make(chan error, 1)
		go func() { done <- a.ServeView(linktest.Batch(16, 8192), 0, record) }()
		stop := pollBusily(a, record, func(n int, err error) bool {
			if err != nil {
				t.Error(err)
				return false
			}
			polled += n
			return true
		})
		for first := 0; first < total; first += 10 {
			pkts := make([]link.Packet, 10)
			for i := range pkts {
				w := linktest.Packet(nil, 0x0A, uint32(first+i), linktest.Payload(first+i, 200))
				wire.FillICRC(w, b.SendAddr(), a.LocalAddr(), 0)
				pkts[i] = link.Packet{Buf: w, N: len(w), Dst: a.LocalAddr()}
			}
			if _, err := b.WriteBatch(pkts); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Microsecond) // within the socket's buffer
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			a.rd.Lock()
			n := len(seq)
			a.rd.Unlock()
			if n >= total || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		stop()
		a.rd.Lock()
		got := append([]uint32(nil), seq...)
		a.rd.Unlock()
		t.Logf("%d datagrams, %d by Poll", len(got), polled)
		if len(got) != total {
			t.Fatalf("handled %d datagrams, want %d", len(got), total)
		}
		for i, psn := range got {
			if psn != uint32(i) {
				t.Fatalf("datagram %d handled has PSN %d: out of order", i, psn)
			}
		}
		if polled == 0 {
			t.Error("Poll received none of the stream")
		}
		pkts := linktest.Batch(16, 8192)
		if n := testing.AllocsPerRun(100, func() { a.Poll(pkts, record) }); n != 0 && !raceEnabled {
			t.Errorf("%.1f allocations per empty Poll, want 0", n)
		}
		a.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("ServeView after Close: %v", err)
		}
		if _, err := a.Poll(pkts, record); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Poll after Close: %v, want net.ErrClosed", err)
		}
	})
}

// TestPreparePoll checks that PreparePoll leaves Poll's first call nothing
// to allocate (the C library prepares it when it opens a device, so that a
// program's first poll, often inside its timed work, does not clear
// buffers), that Poll's GRO buffers are pollGROMsgs (not the receive loop's
// groMsgs), and that a Poll then receives a burst whole, over several calls.
func TestPreparePoll(t *testing.T) {
	forGROModes(t, func(t *testing.T, a, b *Endpoint) {
		a.PreparePoll()
		if a.prx == nil {
			t.Fatal("PreparePoll left Poll's receive state unallocated")
		}
		if want := pollGROMsgs * groBufSize; a.gro && len(a.prx.groBuf) != want {
			t.Errorf("Poll's GRO buffers: %d bytes, want %d", len(a.prx.groBuf), want)
		}
		pkts := linktest.Batch(16, 8192)
		n := 0
		handle := func(ps []link.Packet) { n += len(ps) }
		if !raceEnabled {
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			a.Poll(pkts, handle)
			runtime.ReadMemStats(&m1)
			if d := m1.Mallocs - m0.Mallocs; d != 0 {
				t.Errorf("the first Poll after PreparePoll made %d allocations, want 0", d)
			}
		}
		// More than pollGROMsgs GRO messages' worth: 200 datagrams of
		// 1,400 bytes in one burst.
		const total = 200
		out := make([]link.Packet, total)
		for i := range out {
			w := linktest.Packet(nil, 0x0A, uint32(i), linktest.Payload(i, 1400))
			wire.FillICRC(w, b.SendAddr(), a.LocalAddr(), 0)
			out[i] = link.Packet{Buf: w, N: len(w), Dst: a.LocalAddr()}
		}
		for sent := 0; sent < total; {
			k, err := b.WriteBatch(out[sent:])
			if err != nil {
				t.Fatal(err)
			}
			sent += k
		}
		deadline := time.Now().Add(5 * time.Second)
		for n < total && time.Now().Before(deadline) {
			if _, err := a.Poll(pkts, handle); err != nil {
				t.Fatal(err)
			}
		}
		if n != total {
			t.Errorf("Poll handed over %d of %d datagrams", n, total)
		}
	})
}

// forGROModes runs f as a subtest in each receive mode, GRO (the default)
// and plain datagrams without GSO, with two endpoints on loopback.
func forGROModes(t *testing.T, f func(t *testing.T, a, b *Endpoint)) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"gro", nil}, {"plain", []Option{WithoutGSO(), WithoutGRO()}}} {
		t.Run(mode.name, func(t *testing.T) {
			f(t, listen(t, "127.0.0.1:0", mode.opts...), listen(t, "127.0.0.1:0", mode.opts...))
		})
	}
}
