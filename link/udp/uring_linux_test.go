package udp

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
)

// withURing selects io_uring (tests and benchmarks).
func withURing(m uringMode) Option { return func(c *Config) { c.uring = m } }

// needURing skips t when the kernel gives no io_uring.
func needURing(t testing.TB) {
	t.Helper()
	e := listen(t, "127.0.0.1:0", withURing(uringOn))
	if !e.usesURing() {
		t.Skip("io_uring unavailable (io_uring_setup refused: old kernel, seccomp or kernel.io_uring_disabled)")
	}
}

func TestURingConformance(t *testing.T) {
	needURing(t)
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		for _, mode := range []struct {
			name string
			opts []Option
		}{
			{"offload", []Option{withURing(uringOn)}},
			{"plain", []Option{withURing(uringOn), WithoutGSO(), WithoutGRO()}},
			{"zerocopy", []Option{withURing(uringZC)}},
		} {
			t.Run(addr+"/"+mode.name, func(t *testing.T) {
				linktest.Run(t, func(t testing.TB) (link.Endpoint, link.Endpoint) {
					return listen(t, addr, mode.opts...), listen(t, addr, mode.opts...)
				})
			})
		}
	}
}

// BenchmarkIOUring compares, on loopback with UDP GSO and GRO, the
// recvmmsg/sendmmsg path (mmsg) with io_uring RECVMSG/SENDMSG (uring) and
// io_uring with zero-copy sends (uring-zc), for 4 KiB and 1 KiB RoCE
// payloads in batches of 64. Compare figures of one run only: run with
// -count and alternate, e.g.
//
//	go test -run '^$' -bench IOUring -count 5 ./link/udp
func BenchmarkIOUring(b *testing.B) {
	needURing(b)
	for _, payload := range []int{4096, 1024} {
		for _, m := range []struct {
			name string
			mode uringMode
		}{{"mmsg", uringOff}, {"uring", uringOn}, {"uring-zc", uringZC}} {
			b.Run(m.name+"-"+itoa(payload/1024)+"k", func(b *testing.B) {
				benchBatched(b, 64, payload, withURing(m.mode))
			})
		}
	}
}

const iouOpNop = 0 // IORING_OP_NOP

// newTestRing returns a ring of entries slots, skipping t without io_uring.
func newTestRing(t *testing.T, entries uint32) (*ring, *atomic.Uint64) {
	t.Helper()
	var calls atomic.Uint64
	r, err := newRing(entries, &calls, iouOpNop)
	if err != nil {
		t.Skipf("io_uring unavailable: %v", err)
	}
	t.Cleanup(func() { r.close() })
	return r, &calls
}

// TestRingAccounting pushes batches of NOPs of every size through a small
// ring, many times round its indices, and checks that each completes once,
// in order, with pending back at zero; batches larger than the queue are
// submitted in parts by push, and completions beyond the completion queue's
// size are kept by the kernel (IORING_FEAT_NODROP) until reaped.
func TestRingAccounting(t *testing.T) {
	r, calls := newTestRing(t, 4)
	if r.sqSize != 4 || len(r.cqes) != 8 {
		t.Fatalf("ring of %d/%d entries, want 4/8", r.sqSize, len(r.cqes))
	}
	next, want := uint64(0), uint64(0)
	for round := 0; round < 300; round++ {
		n := 1 + round%13 // up to 3 queues' worth
		for i := 0; i < n; i++ {
			s, err := r.push()
			if err != nil {
				t.Fatal(err)
			}
			s.opcode, s.userData = iouOpNop, next
			next++
		}
		if r.pending != n {
			t.Fatalf("round %d: pending %d after %d pushes", round, r.pending, n)
		}
		for r.pending > 0 {
			r.reap(func(ud uint64, res int32, fl uint32) {
				if ud != want || res != 0 || fl&iouCQEFMore != 0 {
					t.Fatalf("completion %d: user data %d, res %d, flags %#x", want, ud, res, fl)
				}
				want++
			})
			if r.pending > 0 {
				if err := r.enter(uint32(min(r.pending, 8))); err != nil {
					t.Fatal(err)
				}
			}
		}
		if r.queued() != 0 || r.ready() != 0 {
			t.Fatalf("round %d: %d queued, %d ready after all completions", round, r.queued(), r.ready())
		}
	}
	if want != next {
		t.Fatalf("%d completions for %d requests", want, next)
	}
	if r.tail < 1000 || calls.Load() == 0 {
		t.Fatalf("tail %d after %d requests, %d enters", r.tail, next, calls.Load())
	}
}

// TestRingDrain checks that drain waits for submitted and queued requests.
func TestRingDrain(t *testing.T) {
	r, _ := newTestRing(t, 8)
	for i := 0; i < 20; i++ {
		s, err := r.push()
		if err != nil {
			t.Fatal(err)
		}
		s.opcode = iouOpNop
	}
	if err := r.drain(); err != nil {
		t.Fatal(err)
	}
	if r.pending != 0 || r.queued() != 0 || r.ready() != 0 {
		t.Fatalf("after drain: pending %d, queued %d, ready %d", r.pending, r.queued(), r.ready())
	}
}

// TestURingFallback makes io_uring_setup fail as a kernel without io_uring,
// or with it disabled, would, and checks that the endpoints fall back to
// recvmmsg/sendmmsg and work.
func TestURingFallback(t *testing.T) {
	saved := uringSetup
	t.Cleanup(func() { uringSetup = saved })
	for _, errno := range []unix.Errno{unix.ENOSYS, unix.EPERM, unix.EINVAL} {
		uringSetup = func(uint32, *iouParams) (int, error) { return -1, errno }
		a, b := listen(t, "127.0.0.1:0", withURing(uringOn)), listen(t, "127.0.0.1:0", withURing(uringZC))
		if a.usesURing() || b.usesURing() {
			t.Fatalf("%v: endpoints use io_uring", errno)
		}
		sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
		readN(t, b, 1)
		if _, err := newRing(4, new(atomic.Uint64)); !errors.Is(err, errno) {
			t.Errorf("newRing with a failing setup: %v, want %v", err, errno)
		}
	}
}

// TestURingClose checks that a closed io_uring endpoint, and a reader
// blocked on it, return net.ErrClosed, and that its rings are released.
func TestURingClose(t *testing.T) {
	needURing(t)
	e := listen(t, "127.0.0.1:0", withURing(uringZC))
	u := e.ur
	done := make(chan error)
	go func() {
		_, err := e.ReadBatch(linktest.Batch(4, 2048))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the reader block in io_uring_enter
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("blocked ReadBatch: %v, want net.ErrClosed", err)
	}
	if _, err := e.ReadBatchView(linktest.Batch(1, 2048)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatchView after Close: %v", err)
	}
	if _, err := u.recv(e); !errors.Is(err, net.ErrClosed) {
		t.Errorf("recv after Close: %v", err)
	}
	if _, err := u.send(e, 1); !errors.Is(err, net.ErrClosed) {
		t.Errorf("send after Close: %v", err)
	}
	if u.rx != nil || u.tx != nil || u.wake != -1 {
		t.Errorf("rings or eventfd not released")
	}
	if _, ok := liveURings.Load(u); ok {
		t.Errorf("closed endpoint still registered")
	}
}

// TestURingZeroAllocs pins the io_uring paths' steady state at zero
// allocations per batch.
func TestURingZeroAllocs(t *testing.T) {
	needURing(t)
	for _, m := range []uringMode{uringOn, uringZC} {
		for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "0.0.0.0:0"} {
			zeroAllocs(t, addr, withURing(m))
		}
	}
}

// TestURingGSO checks that zero-copy sends keep GSO runs within
// MAX_SKB_FRAGS pages (no EMSGSIZE, no fallback) and that everything
// arrives, in order.
func TestURingGSO(t *testing.T) {
	needURing(t)
	for _, m := range []uringMode{uringOn, uringZC} {
		a, b := listen(t, "127.0.0.1:0", withURing(m)), listen(t, "127.0.0.1:0", withURing(m))
		const n = 64
		pkts := linktest.Batch(n, 0)
		for i := range pkts {
			pkts[i].Buf = linktest.Packet(nil, 0x11, uint32(i), linktest.Payload(i, 4096))
			pkts[i].N, pkts[i].Dst = len(pkts[i].Buf), b.LocalAddr()
		}
		if k, err := a.WriteBatch(pkts); k != n || err != nil {
			t.Fatalf("mode %d: WriteBatch = %d, %v", m, k, err)
		}
		got := readN(t, b, n)
		for i, p := range got {
			if !bytes.Equal(p.Bytes(), pkts[i].Bytes()) {
				t.Fatalf("mode %d: packet %d differs", m, i)
			}
		}
		if s := a.Stats(); s.GSOMessages == 0 || s.GSOFallbacks != 0 {
			t.Errorf("mode %d: sender stats %+v", m, s)
		}
	}
}

func TestSpanPages(t *testing.T) {
	buf := make([]byte, 4*pageSize)
	base := int(uintptr(unsafe.Pointer(&buf[0])) & uintptr(pageSize-1))
	at := func(off int) int { return (pageSize - base + off) % pageSize } // offset of a page start + off
	for _, c := range []struct{ off, n, want int }{{0, 1, 1}, {0, pageSize, 1}, {0, pageSize + 1, 2}, {pageSize - 1, 2, 2}, {100, 2 * pageSize, 3}} {
		if got := spanPages(buf[at(c.off) : at(c.off)+c.n]); got != c.want {
			t.Errorf("spanPages(offset %d, len %d) = %d, want %d", c.off, c.n, got, c.want)
		}
	}
}
