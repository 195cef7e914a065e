package verbs

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/clock/clocktest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// TestRetryCnt7IsFinite: retry_cnt 7 means seven retries, not "forever"
// (rxe's reading): against a dead peer, with perftest's defaults (timeout
// 14, 67.1 ms per try, retry_cnt 7), the WQE completes with RETRY_EXC_ERR
// after eight timeouts, well under 2 s of (fake) time, and the rest of the
// send queue is flushed.
func TestRetryCnt7IsFinite(t *testing.T) {
	for _, retry := range []uint8{0, 1, 3, 7} {
		clk := clocktest.NewFake(time.Unix(0, 0))
		drop := func(p *link.Packet) pipe.Verdict { return pipe.Drop }
		a, _ := newPair(t, pairOpts{filterA: drop, timeout: 14, retry: retry, rnrRetry: 7, exact: true, clock: clk})
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
		post(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, SGList: sge(a, 0, 100)})
		const step = time.Millisecond
		var elapsed time.Duration
		for a.scq.Len() == 0 && elapsed < 10*time.Second {
			clk.Advance(step)
			elapsed += step
		}
		wc := waitWC(t, a.scq, 2, time.Second)
		if wc[0].Status != WCRetryExcErr || wc[0].WRID != 1 || wc[1].Status != WCWRFlushErr || wc[1].WRID != 2 {
			t.Fatalf("retry_cnt %d: %+v", retry, wc)
		}
		if got := a.dev.Stats().RetryTimeouts.Load(); got != uint64(retry)+1 {
			t.Errorf("retry_cnt %d: %d timeouts, want %d", retry, got, retry+1)
		}
		if a.qp.State() != QPStateErr {
			t.Errorf("retry_cnt %d: QP in %v, want ERR", retry, a.qp.State())
		}
		if min := time.Duration(retry+1) * ackTimeout(14); elapsed < min || elapsed > 2*time.Second {
			t.Errorf("retry_cnt %d: error completion after %v of clock time, want %v..2s", retry, elapsed, min)
		}
	}
}

// TestRetryBackoff: against a dead peer, the first retransmit waits the
// ACK timeout T (plus at most T/4 jitter), each later one 2T (plus at most
// T/2); two QPs that lose their peer at the same moment do not retransmit
// in step.
func TestRetryBackoff(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	drop := func(p *link.Packet) pipe.Verdict { return pipe.Drop }
	o := pairOpts{filterA: drop, timeout: 14, retry: 7, rnrRetry: 7, exact: true, clock: clk}
	a, b := newPair(t, o)
	// A second QP on a's device, connected to a second QP on b's.
	a2, b2 := *a, *b
	for _, s := range []*side{&a2, &b2} {
		qp, err := s.pd.CreateQP(&QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq, QPType: QPTypeRC, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		s.qp = qp
	}
	defaults(&o)
	connect(t, &a2, &b2, o)
	connect(t, &b2, &a2, o)
	T := ackTimeout(14)
	const step = 100 * time.Microsecond
	var times [2][]time.Duration
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
	post(t, a2.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
	var now time.Duration
	last := [2]uint64{}
	for now < 3*time.Second && (a.qp.State() == QPStateRTS || a2.qp.State() == QPStateRTS) {
		clk.Advance(step)
		now += step
		for i, qp := range []*QP{a.qp, a2.qp} {
			qp.mu.Lock()
			b := qp.comp.backoff
			st := qp.state
			qp.mu.Unlock()
			// backoff counts this QP's timeouts (reset only by progress).
			if uint64(b) != last[i] && st == QPStateRTS {
				last[i] = uint64(b)
				times[i] = append(times[i], now)
			}
		}
	}
	for i := range times {
		if len(times[i]) != 7 {
			t.Fatalf("QP %d: %d timeouts seen before ERR, want 7 (then the 8th fails it)", i, len(times[i]))
		}
		prev := time.Duration(0)
		for k, at := range times[i] {
			gap := at - prev
			lo, hi := T, T+T/4
			if k > 0 {
				lo, hi = 2*T, 2*T+2*T/4
			}
			if gap < lo-step || gap > hi+step {
				t.Errorf("QP %d: wait %d was %v, want %v..%v", i, k, gap, lo, hi)
			}
			prev = at
		}
	}
	same := 0
	for k := range times[0] {
		if times[0][k] == times[1][k] {
			same++
		}
	}
	if same == len(times[0]) {
		t.Errorf("two QPs retransmitted in step: %v", times[0])
	}
}

// TestResponsesRearmRetryTimer: responses that are no progress (a gap in
// a READ's responses, which the completer drops) still show the peer
// alive and restart the retransmit timer, as rxe's completer does after
// every response: no spurious retry while the peer is still answering.
func TestResponsesRearmRetryTimer(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	var block atomic.Bool
	block.Store(true)
	filter := func(p *link.Packet) pipe.Verdict {
		if block.Load() {
			return pipe.Drop
		}
		return pipe.Pass
	}
	a, b := newPair(t, pairOpts{filterA: filter, clock: clk, timeout: 14})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 4096), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	T := ackTimeout(14)
	mid := forged{"read-resp-middle", wire.RCReadResponseMiddle, wire.SyndromeACK}
	for i := 0; i < 40; i++ { // 40 x T/4 = 10 T
		n := drops(a)
		h := wire.Packet{}
		h.BTH = wire.BTH{Opcode: mid.op, DestQP: a.qp.QPN(), PSN: 102, PKey: wire.DefaultPKey}
		h.Payload = make([]byte, 1024)
		buf := h.Append(nil)
		b.dev.write([]link.Packet{{Buf: buf, N: len(buf), Dst: a.dev.LocalAddr(), Src: b.dev.LocalAddr()}})
		deadline := time.Now().Add(5 * time.Second)
		for drops(a) == n && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
		clk.Advance(T / 4)
	}
	if n := a.dev.Stats().RetryTimeouts.Load(); n != 0 {
		t.Fatalf("%d retransmit timeouts while the peer kept answering", n)
	}
	block.Store(false)
	for i := 0; a.scq.Len() == 0 && i < 1000; i++ {
		clk.Advance(10 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	mustEqual(t, a.buf[:4096], b.buf[:4096])
}

// TestSlowPeerKeepsBudget: timer expiries while the peer keeps answering
// (here with responses that are no progress: a READ's responses after a
// gap, as from a peer seconds behind, replaying) are deferred or retried
// without spending retry_cnt; once the peer falls silent, retry_cnt
// timeouts later the WQE fails.
func TestSlowPeerKeepsBudget(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	drop := func(p *link.Packet) pipe.Verdict { return pipe.Drop }
	a, b := newPair(t, pairOpts{filterA: drop, clock: clk, timeout: 14, retry: 2, rnrRetry: 7, exact: true})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 4096), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	T := ackTimeout(14)
	for i := 0; i < 30; i++ { // 30 x 3T: a timeout in each
		n := drops(a)
		h := wire.Packet{}
		h.BTH = wire.BTH{Opcode: wire.RCReadResponseMiddle, DestQP: a.qp.QPN(), PSN: 102, PKey: wire.DefaultPKey}
		h.Payload = make([]byte, 1024)
		buf := h.Append(nil)
		b.dev.write([]link.Packet{{Buf: buf, N: len(buf), Dst: a.dev.LocalAddr(), Src: b.dev.LocalAddr()}})
		deadline := time.Now().Add(5 * time.Second)
		for drops(a) == n && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
		clk.Advance(3 * T)
	}
	if n := a.dev.Stats().RetryTimeouts.Load() + a.dev.Stats().RetryDeferred.Load(); n < 20 {
		t.Fatalf("only %d timer expiries in 90 T", n)
	}
	if a.scq.Len() != 0 || a.qp.State() != QPStateRTS {
		t.Fatalf("retry_cnt 2 spent while the peer answered: QP %v", a.qp.State())
	}
	for i := 0; a.scq.Len() == 0 && i < 100; i++ {
		clk.Advance(T)
	}
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCRetryExcErr {
		t.Fatalf("%+v", wc[0])
	}
}

// TestAckTimeoutTable pins the local ACK timeout codes (4.096 us x
// 2^timeout, 0 = none, codes above 31 as 31).
func TestAckTimeoutTable(t *testing.T) {
	for _, c := range []struct {
		code uint8
		want time.Duration
	}{
		{0, 0}, {1, 8192 * time.Nanosecond}, {14, 67108864 * time.Nanosecond},
		{31, 4096 << 31 * time.Nanosecond}, {32, 4096 << 31 * time.Nanosecond}, {255, 4096 << 31 * time.Nanosecond},
	} {
		if got := ackTimeout(c.code); got != c.want {
			t.Errorf("ackTimeout(%d) = %v, want %v", c.code, got, c.want)
		}
	}
}
