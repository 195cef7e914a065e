package verbs

import (
	"errors"
	"syscall"
	"testing"
	"time"
)

// linkPollUntil calls PollLink on s's device and polls cq until it holds a
// completion, or fails the test after d; it returns the completion.
func linkPollUntil(t *testing.T, s *side, cq *CQ, d time.Duration) WC {
	t.Helper()
	var wc [1]WC
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		s.dev.PollLink()
	}
	t.Fatalf("no completion within %v", d)
	return WC{}
}

// TestPollLink runs SEND ping-pongs over real UDP sockets where each side
// busy-polls its CQ with PollLink beside its receive loop, as the C
// library's ibv_poll_cq does: the data arrives, most datagrams are received
// on the polling goroutine (RxPolled), the ACK of a polled SEND leaves with
// the reply (ACKsBehindReply), and nothing is retransmitted.
func TestPollLink(t *testing.T) {
	a, b := udpPair(t, pairOpts{timeout: 18}) // ~1 s: a late ACK would show as a retransmission
	const rounds = 200
	fill(a.buf[:64], 1)
	fill(b.buf[4096:4096+64], 2)
	for i := 0; i < rounds; i++ {
		postRecv(t, b, uint64(i), 1024, 64)
		postRecv(t, a, uint64(i), 5120, 64)
		post(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSend, SGList: sge(a, 0, 64)})
		if wc := linkPollUntil(t, b, b.rcq, 10*time.Second); wc.Status != WCSuccess || wc.ByteLen != 64 {
			t.Fatalf("round %d: b received %+v", i, wc)
		}
		post(t, b.qp, SendWR{WRID: uint64(i), Opcode: WRSend, SGList: sge(b, 4096, 64)})
		if wc := linkPollUntil(t, a, a.rcq, 10*time.Second); wc.Status != WCSuccess || wc.ByteLen != 64 {
			t.Fatalf("round %d: a received %+v", i, wc)
		}
	}
	mustEqual(t, b.buf[1024:1024+64], a.buf[:64])
	mustEqual(t, a.buf[5120:5120+64], b.buf[4096:4096+64])
	sa, sb := a.dev.Stats(), b.dev.Stats()
	t.Logf("polled %d of %d and %d of %d datagrams; ACKs behind a reply %d and %d",
		sa.RxPolled.Load(), sa.RxPackets.Load(), sb.RxPolled.Load(), sb.RxPackets.Load(), sa.ACKsBehindReply.Load(), sb.ACKsBehindReply.Load())
	if sa.RxPolled.Load()+sb.RxPolled.Load() == 0 {
		t.Error("no datagram was received by PollLink")
	}
	if sb.ACKsBehindReply.Load() == 0 && sb.RxPolled.Load() > rounds/2 {
		t.Error("b polled most SENDs but no ACK left with its reply")
	}
	if r := sa.Retransmits.Load() + sb.Retransmits.Load(); r != 0 {
		t.Errorf("%d retransmissions: an ACK was held back", r)
	}
}

// TestPollLinkFlushesAlone checks the bound on a held-back ACK: b polls a
// SEND in with PollLink (its ACK then waits for b's reply) and then neither
// posts nor polls; the ACK must still leave within pollFlushDelay (flushSoon),
// long before a's retransmit timer (~1 s) would resend the SEND.
func TestPollLinkFlushesAlone(t *testing.T) {
	a, b := udpPair(t, pairOpts{timeout: 18})
	for try := 0; try < 50; try++ {
		postRecv(t, b, uint64(try), 0, 64)
		polled := b.dev.Stats().RxPolled.Load()
		start := time.Now()
		post(t, a.qp, SendWR{WRID: uint64(try), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 64)})
		linkPollUntil(t, b, b.rcq, 10*time.Second)
		wc := waitWC(t, a.scq, 1, 10*time.Second)[0]
		took := time.Since(start)
		if wc.Status != WCSuccess {
			t.Fatalf("a's SEND completed %v", wc.Status)
		}
		if b.dev.Stats().RxPolled.Load() == polled {
			continue // the receive loop took this one: try again
		}
		if r := a.dev.Stats().Retransmits.Load(); r != 0 || took > 500*time.Millisecond {
			t.Fatalf("the ACK of a polled SEND took %v (%d retransmissions): want it within about %v", took, r, pollFlushDelay)
		}
		t.Logf("try %d: polled SEND acknowledged in %v", try, took)
		return
	}
	t.Skip("the receive loop took every SEND before PollLink")
}

// TestPollLinkAllocs pins PollLink's empty call (what a program's spinning
// poller does most) and a polled SEND round trip at no allocation.
func TestPollLinkAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts need a run without -race or -short")
	}
	a, b := udpPair(t, pairOpts{})
	b.dev.PollLink()
	if n := allocsPerRun(1000, func() { b.dev.PollLink() }); n != 0 {
		t.Errorf("%.2f allocations per empty PollLink, want 0", n)
	}
	wr := []SendWR{{Opcode: WRSend, SGList: sge(a, 0, 64)}}
	rwr := []RecvWR{{SGList: sge(b, 0, 64)}}
	var wc [1]WC
	round := func() {
		b.qp.PostRecv(rwr)
		a.qp.PostSend(wr)
		for b.rcq.Poll(wc[:]) == 0 {
			b.dev.PollLink()
		}
	}
	for i := 0; i < 50; i++ {
		round()
	}
	if n := allocsPerRun(200, round); n != 0 {
		t.Errorf("%.2f allocations per polled SEND, want 0", n)
	}
}

// TestWaitLinkUnsupported: a device on a link that cannot be waited on
// (the in-memory pipe) fails WaitLink at once with EOPNOTSUPP, having
// waited for nothing.
func TestWaitLinkUnsupported(t *testing.T) {
	a, _ := newPair(t, pairOpts{})
	start := time.Now()
	if _, _, err := a.dev.WaitLink(-1, time.Minute); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("WaitLink on a pipe link = %v, want EOPNOTSUPP", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("WaitLink on a pipe link waited %v", d)
	}
}

// TestPreparePollLink checks that PreparePollLink allocates what PollLink's
// first call would (the C library calls it when it opens a device), that a
// link whose reads are views of its own GRO buffers gets packets without
// buffers of their own (64 of them, 4.3 KB each, cleared for nothing), and
// that PollLink then works as before.
func TestPreparePollLink(t *testing.T) {
	a, b := udpPair(t, pairOpts{})
	b.dev.PreparePollLink()
	r := &b.dev.rxp
	if r.pkts == nil || r.handle == nil {
		t.Fatal("PreparePollLink left PollLink's packets unallocated")
	}
	g, ok := r.lp.(groLink)
	views := ok && g.GRO()
	for i, p := range r.pkts {
		if views && p.Buf != nil {
			t.Fatalf("packet %d has a %d-byte buffer on a GRO link, whose reads are views", i, cap(p.Buf))
		}
		if !views && cap(p.Buf) < maxDatagram {
			t.Fatalf("packet %d has a %d-byte buffer on a link that copies, want %d", i, cap(p.Buf), maxDatagram)
		}
	}
	t.Logf("GRO views: %v", views)
	fill(a.buf[:64], 3)
	for i := 0; i < 20; i++ {
		postRecv(t, b, uint64(i), 1024, 64)
		post(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSend, SGList: sge(a, 0, 64)})
		if wc := linkPollUntil(t, b, b.rcq, 10*time.Second); wc.Status != WCSuccess || wc.ByteLen != 64 {
			t.Fatalf("round %d: b received %+v", i, wc)
		}
	}
	mustEqual(t, b.buf[1024:1024+64], a.buf[:64])
}
