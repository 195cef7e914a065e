package verbs

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/clock/clocktest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// slowReceiver is a pipe filter on a READ responder's end that models a
// requester slower than the responder (a kernel in an emulated guest): it
// holds up to depth READ responses and takes perMS of them per millisecond
// of the clock; a response that finds it full is dropped, as an overrun
// receive queue drops it. Other packets pass.
type slowReceiver struct {
	clk          clock.Clock
	depth, perMS float64

	mu    sync.Mutex
	level float64
	last  time.Time
	sent  int // READ responses the responder sent
	drops int
}

// isReadResponse reports whether p is an RC READ response.
func isReadResponse(p *link.Packet) bool {
	if p.N < wire.BTHLen {
		return false
	}
	switch wire.Opcode(p.Buf[0]) {
	case wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly:
		return true
	}
	return false
}

func (s *slowReceiver) filter(p *link.Packet) pipe.Verdict {
	if !isReadResponse(p) {
		return pipe.Pass
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	if !s.last.IsZero() {
		s.level = max(0, s.level-s.perMS*float64(now.Sub(s.last))/float64(time.Millisecond))
	}
	s.last = now
	s.sent++
	if s.level+1 > s.depth {
		s.drops++
		return pipe.Drop
	}
	s.level++
	return pipe.Pass
}

func (s *slowReceiver) counts() (sent, drops int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent, s.drops
}

// settle waits until the pipe is idle: every datagram each end sent has
// been read by the other, and the counters stood still for two polls (the
// receive loops have answered what they read).
func settle(t *testing.T, ea, eb *pipe.Endpoint) {
	t.Helper()
	delivered := func(s pipe.Stats) uint64 {
		return s.PacketsOut - s.NoRoute - s.Filtered - s.Lost + s.Duplicated - s.QueueDrops - s.PeerClosed
	}
	var prev [4]uint64
	deadline := time.Now().Add(10 * time.Second)
	// Quiet for 2 ms of samples: on a loaded machine a goroutine with work
	// can go unscheduled for longer than two samples 100 µs apart.
	for stable := 0; stable < 20; {
		if time.Now().After(deadline) {
			t.Fatal("pipe did not settle in 10 s")
		}
		sa, sb := ea.Stats(), eb.Stats()
		cur := [4]uint64{sa.PacketsOut, sa.PacketsIn, sb.PacketsOut, sb.PacketsIn}
		if delivered(sa) == sb.PacketsIn && delivered(sb) == sa.PacketsIn && cur == prev {
			stable++
		} else {
			stable = 0
		}
		prev = cur
		time.Sleep(100 * time.Microsecond)
	}
}

// TestReadPacingSlowRequester: a READ responder facing a requester that
// takes 4 responses per millisecond and holds 32 (the rest of a burst is
// lost, as a slow guest drops it) needs a bounded number of responses per
// response delivered. Four 256 KiB READs need 1024 responses. Unpaced, the
// responder sends all of them in one burst and, on each duplicate READ,
// the whole remainder again: about 32 of each burst get through, 7.5 times
// what is needed in all. Paced (resp_pace.go) it needs about 1.9 times:
// the first burst is still unpaced (nothing is known of the requester
// before it loses something), the rest nearly all gets through.
func TestReadPacingSlowRequester(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.NewFake(time.Unix(0, 0))
		rx := &slowReceiver{clk: clk, depth: 32, perMS: 4}
		readThrough(t, clk, rx.filter, rx.counts, 3)
	})
}

// lossyReceiver is a pipe filter that drops READ responses at random
// (rate per mille, a fixed sequence), as a lossy path does.
type lossyReceiver struct {
	perMille uint64

	mu    sync.Mutex
	rng   uint64
	sent  int
	drops int
}

func (l *lossyReceiver) filter(p *link.Packet) pipe.Verdict {
	if !isReadResponse(p) {
		return pipe.Pass
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent++
	l.rng ^= l.rng << 13
	l.rng ^= l.rng >> 7
	l.rng ^= l.rng << 17
	if l.rng%1000 < l.perMille {
		l.drops++
		return pipe.Drop
	}
	return pipe.Pass
}

func (l *lossyReceiver) counts() (sent, drops int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.drops
}

// TestReadPacingRandomLoss: on a path that loses 2% of the READ responses
// whatever the rate, the requester drops everything after each loss until
// the responses stop. Unpaced, the responder sends the whole remainder of
// every outstanding READ for each loss, 5.6 times what is needed in all;
// paced, it pauses after each window, so a loss costs at most a window:
// about 2.7 times.
func TestReadPacingRandomLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.NewFake(time.Unix(0, 0))
		rx := &lossyReceiver{perMille: 20, rng: 0x9E3779B97F4A7C15}
		readThrough(t, clk, rx.filter, rx.counts, 4)
	})
}

// readThrough has b READ four 256 KiB buffers (1024 responses) from a
// through filter on a's end, on clk, and fails if a sent more than bound
// times the responses needed.
func readThrough(t *testing.T, clk *clocktest.Fake, filter pipe.Filter, counts func() (int, int), bound float64) {
	// The requester is rxe-like: it asks for lost responses only on its
	// timer, from the first missing one to the end (a slow kernel in a
	// guest; softroce's own asks for the missing ranges: readgap.go).
	o := pairOpts{filterA: filter, clock: clk, timeout: 10, bufSize: 1 << 20, hooks: &testHooks{noGapFill: true}}
	la, lb := newPipePair(t, &o)
	ea, eb := la.(*pipe.Endpoint), lb.(*pipe.Endpoint)
	a, b := newPairOn(t, la, lb, o) // a answers the READs b posts
	fill(a.buf, 9)
	const reads, size = 4, 256 << 10
	for i := range reads {
		post(t, b.qp, SendWR{WRID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled,
			SGList: sge(b, i*size, size), RemoteAddr: a.mr.Addr() + uint64(i*size), RKey: a.mr.RKey()})
	}
	const step = 500 * time.Microsecond
	var elapsed time.Duration
	for b.scq.Len() < reads && elapsed < 20*time.Second {
		settle(t, ea, eb)
		clk.Advance(step)
		elapsed += step
	}
	wcs := waitWC(t, b.scq, reads, time.Second)
	for _, wc := range wcs {
		if wc.Status != WCSuccess {
			t.Fatalf("READ %d: %v", wc.WRID, wc.Status)
		}
	}
	mustEqual(t, b.buf[:reads*size], a.buf[:reads*size])
	needed := reads * size / 1024
	sent, drops := counts()
	st := a.dev.Stats()
	t.Logf("%d responses sent for %d needed (%.2f x), %d dropped; %v of clock; "+
		"duplicate READs %d, rate cuts %d, paced %d",
		sent, needed, float64(sent)/float64(needed), drops, elapsed, st.DupRequests.Load(),
		st.ReadPaceCuts.Load(), st.ReadPaced.Load())
	if float64(sent) > bound*float64(needed) {
		t.Errorf("the responder sent %d responses for %d needed: more than %g x", sent, needed, bound)
	}
}

// TestReadPacingFastRequester: a requester that keeps up is never paced:
// READs it loses nothing of are answered in one burst each, with no cut
// and no tick waited.
func TestReadPacingFastRequester(t *testing.T) {
	// A long timeout: a requester that times out spuriously (a loaded
	// machine) asks again for responses it has, which is a loss here.
	o := pairOpts{bufSize: 4 << 20, timeout: 20}
	la, lb := newPipePair(t, &o)
	a, b := newPairOn(t, la, lb, o)
	fill(a.buf, 5)
	const reads, size = 8, 512 << 10 // each burst fits the pipe's queue
	for i := range reads {
		post(t, b.qp, SendWR{WRID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled,
			SGList: sge(b, i*size, size), RemoteAddr: a.mr.Addr() + uint64(i*size), RKey: a.mr.RKey()})
		if wc := waitWC(t, b.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
			t.Fatalf("READ %d: %v", i, wc[0].Status)
		}
	}
	mustEqual(t, b.buf, a.buf)
	if d := la.(*pipe.Endpoint).Stats().QueueDrops; d != 0 {
		t.Skipf("the pipe dropped %d responses: the requester did not keep up", d)
	}
	st := a.dev.Stats()
	if c, p := st.ReadPaceCuts.Load(), st.ReadPaced.Load(); c != 0 || p != 0 {
		t.Errorf("lossless READs: %d rate cuts, %d paced sends; want none (duplicates %d; requester timeouts %d)", c, p,
			st.DupRequests.Load(), b.dev.Stats().RetryTimeouts.Load())
	}
}

// respCounter is a pipe filter counting the READ responses sent per PSN.
type respCounter struct {
	mu  sync.Mutex
	psn map[uint32]int
	n   int
}

func (c *respCounter) filter(p *link.Packet) pipe.Verdict {
	var h wire.BTH
	if p.N >= wire.BTHLen {
		h.Decode(p.Buf[:p.N])
		switch h.Opcode {
		case wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly:
			c.mu.Lock()
			c.psn[h.PSN]++
			c.n++
			c.mu.Unlock()
		}
	}
	return pipe.Pass
}

func (c *respCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestReadReplayRestartsStream: a duplicate READ for a PSN inside a
// stream still being sent moves the stream back to that PSN (rxe_resp.c
// duplicate_request resets its one resource the same way); the responder
// does not send a second copy of the remainder next to the first. A paced
// responder (4 per tick) has sent 12 of a READ's 32 responses when the
// requester asks again from the fifth: then 5..12 go again, and 13..32
// once, 40 in all (unpaced, the old way: 32 + 28 = 60).
func TestReadReplayRestartsStream(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	c := &respCounter{psn: map[uint32]int{}}
	o := pairOpts{filterA: c.filter, clock: clk, timeout: 20}
	la, lb := newPipePair(t, &o)
	ea, eb := la.(*pipe.Endpoint), lb.(*pipe.Endpoint)
	a, b := newPairOn(t, la, lb, o)
	a.qp.mu.Lock()
	p := a.qp.newPacer()
	p.burst, p.tokens = 4, 4
	a.qp.mu.Unlock()
	fill(a.buf, 7)
	const size = 32 << 10
	post(t, b.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled,
		SGList: sge(b, 0, size), RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()})
	settle(t, ea, eb)
	for range 2 {
		clk.Advance(paceTick)
		settle(t, ea, eb)
	}
	if n := c.total(); n != 12 {
		t.Fatalf("%d responses sent after two ticks, want 12", n)
	}
	// The requester's SQ PSN is 100 (connect): ask again from PSN 104.
	var h wire.Packet
	h.BTH = wire.BTH{Opcode: wire.RCReadRequest, DestQP: a.qp.QPN(), PSN: 104, PKey: wire.DefaultPKey}
	h.RETH = wire.RETH{VA: a.mr.Addr() + 4<<10, RKey: a.mr.RKey(), Length: size - 4<<10}
	buf := h.Append(nil)
	b.dev.write([]link.Packet{{Buf: buf, N: len(buf), Dst: a.dev.LocalAddr(), Src: b.dev.LocalAddr()}})
	for i := 0; b.scq.Len() == 0 && i < 100; i++ {
		settle(t, ea, eb)
		clk.Advance(paceTick)
	}
	if wc := waitWC(t, b.scq, 1, time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("READ: %v", wc[0].Status)
	}
	mustEqual(t, b.buf[:size], a.buf[:size])
	settle(t, ea, eb)
	c.mu.Lock()
	defer c.mu.Unlock()
	for psn := uint32(100); psn < 132; psn++ {
		want := 1
		if psn >= 104 && psn < 112 {
			want = 2
		}
		if c.psn[psn] != want {
			t.Errorf("PSN %d sent %d times, want %d", psn, c.psn[psn], want)
		}
	}
	if c.n != 40 {
		t.Errorf("%d responses sent, want 40", c.n)
	}
}
