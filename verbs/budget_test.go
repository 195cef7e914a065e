package verbs

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softroce/softroce/clock/clocktest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// budgetWriter registers a source and a target buffer of size bytes on
// m's two devices and returns a function that posts one signaled WRITE of
// the whole source to the whole target on qp.
func budgetWriter(t *testing.T, m *manyQPs, size int) func(qp *QP, id uint64) {
	t.Helper()
	src, err := m.a[0].pd.RegMR(make([]byte, size), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := m.b[0].pd.RegMR(make([]byte, size), AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	return func(qp *QP, id uint64) {
		t.Helper()
		wr := []SendWR{{WRID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, RKey: dst.RKey(), RemoteAddr: dst.Addr(),
			SGList: []SGE{{Addr: src.Addr(), Length: uint32(size), LKey: src.LKey()}}}}
		if _, err := qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
}

// budgetWRITEs posts k signaled WRITEs, round-robin, of size bytes on each
// pair in qps (WRID = pair<<8 | message) from one source buffer to one
// target buffer.
func budgetWRITEs(t *testing.T, m *manyQPs, qps []int, k, size int) {
	t.Helper()
	write := budgetWriter(t, m, size)
	for j := range k { // round-robin: message j on every QP, then j+1
		for _, i := range qps {
			write(m.a[i], uint64(i<<8|j))
		}
	}
}

// silentQP adds an RC QP on m's first device, connected with ACK timeout
// code timeout to a QP on the second that is then destroyed: what it
// sends is never answered.
func silentQP(t *testing.T, m *manyQPs, ea, eb link.Endpoint, timeout uint8) *QP {
	t.Helper()
	access := AccessLocalWrite | AccessRemoteWrite
	init := &QPInitAttr{SendCQ: m.cqa, RecvCQ: m.cqa, QPType: QPTypeRC,
		Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, err := m.a[0].pd.CreateQP(init)
	if err != nil {
		t.Fatal(err)
	}
	peerInit := *init
	peerInit.SendCQ, peerInit.RecvCQ = m.cqb, m.cqb
	b, err := m.b[0].pd.CreateQP(&peerInit)
	if err != nil {
		t.Fatal(err)
	}
	scaleConnect(t, a, b, m.db, eb.LocalAddr().Port(), access, timeout)
	scaleConnect(t, b, a, m.da, ea.LocalAddr().Port(), access, timeout)
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
	return a
}

// pollUntil polls cq until want completions arrived (each handed to fn),
// failing the test after d.
func pollUntil(t *testing.T, cq *CQ, want int, d time.Duration, fn func(WC)) {
	t.Helper()
	wcs := make([]WC, 64)
	deadline := time.Now().Add(d)
	for got := 0; got < want; {
		n := cq.Poll(wcs)
		for _, wc := range wcs[:n] {
			fn(wc)
		}
		got += n
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions after %v", got, want, d)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
}

// TestSendBudget streams 256 KiB WRITEs on 32 QPs of one device whose send
// budget is a fraction of the QPs' windows: the packets in flight stay
// within the budget, QPs take turns (when the first QP has all its
// messages done, every QP has had a turn), and no QP stalls into a
// retransmit timeout waiting for a turn (the last packet before a wait
// asks for an ACK).
func TestSendBudget(t *testing.T) {
	for _, kind := range []string{"pipe", "udp"} {
		// Over the pipe, in a bubble: a loaded machine cannot stretch the
		// turns past the QPs' retransmit timeouts.
		run := t.Run
		if kind == "pipe" {
			run = func(name string, f func(t *testing.T)) bool { return runBubble(t, name, f) }
		}
		run(kind, func(t *testing.T) {
			const (
				nqp    = 32
				budget = 256
				msgs   = 3
				size   = 256 << 10 // 256 packets at MTU 1024: a message is a window, and the whole budget
			)
			// A QP that starts waiting has nothing in flight that did
			// not ask for an ACK: it hears back, and its retransmit
			// timer stops, however long it waits for its turn.
			var silentWaits atomic.Int64
			hooks := &testHooks{budgetWait: func(qp *QP) {
				if qp.req.counted > 0 && !qp.req.tailAckReq {
					silentWaits.Add(1)
				}
			}}
			ea, eb := scaleLink(t, kind)
			m := newManyQPsConfig(t, ea, eb, nqp, 14, &Config{InflightBudget: budget, hooks: hooks})
			qps := make([]int, nqp)
			for i := range qps {
				qps[i] = i
			}
			budgetWRITEs(t, m, qps, msgs, size)
			done := make([]int, nqp)
			minAtFirst := -1
			var order []int // pairs in completion order, for the failure message
			pollUntil(t, m.cqa, nqp*msgs, 20*time.Second, func(wc WC) {
				if wc.Status != WCSuccess {
					t.Fatalf("WRITE %#x: %v", wc.WRID, wc.Status)
				}
				i := int(wc.WRID >> 8)
				order = append(order, i)
				done[i]++
				if done[i] == msgs && minAtFirst < 0 {
					minAtFirst = msgs
					for _, d := range done {
						minAtFirst = min(minAtFirst, d)
					}
				}
			})
			st := m.da.Stats()
			if got := st.BudgetWaits.Load(); got == 0 {
				t.Errorf("BudgetWaits = 0: the budget of %d never held a QP back", budget)
			}
			// Over the budget: each QP's one packet with nothing in flight
			// (budgetFloor), and one that asks for an ACK before a wait.
			if got, most := st.InflightMax.Load(), uint64(budget+2*nqp); got > most {
				t.Errorf("InflightMax = %d, want at most %d (budget %d, %d QPs)", got, most, budget, nqp)
			}
			if n := silentWaits.Load(); n != 0 {
				t.Errorf("%d times a QP started waiting for a turn with packets in flight and no ACK asked for", n)
			}
			if got := st.RetryTimeouts.Load(); got != 0 {
				t.Errorf("RetryTimeouts = %d: a QP waited for a turn without asking for an ACK", got)
			}
			if minAtFirst < 1 {
				t.Errorf("when the first QP had its %d WRITEs done, some QP had none: QPs did not take turns (completions by QP, in order: %v)", msgs, order)
			}
			if got := m.da.budget.inflight.Load(); got != 0 {
				t.Errorf("budget in flight after all completed = %d, want 0", got)
			}
		})
	}
}

// TestSendBudgetDeadPeer: QPs whose peer went silent hold the whole budget;
// after their first retransmit timeout it no longer counts, and a live QP's
// WRITE completes while they are still retrying (not only once they give
// up and their QPs fail).
func TestSendBudgetDeadPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			nqp    = 9 // pair 0 live, 1..8 with a silent peer
			budget = 128
			size   = 64 << 10
		)
		ea, eb := scaleLink(t, "pipe")
		m := newManyQPsConfig(t, ea, eb, nqp, 14, &Config{InflightBudget: budget})
		dead := []int{1, 2, 3, 4, 5, 6, 7, 8}
		for _, i := range dead {
			if err := m.b[i].Destroy(); err != nil { // packets to it are dropped unanswered
				t.Fatal(err)
			}
		}
		budgetWRITEs(t, m, dead, 1, size)
		budgetWRITEs(t, m, []int{0}, 1, size)
		var order []WC
		pollUntil(t, m.cqa, nqp, 30*time.Second, func(wc WC) { order = append(order, wc) })
		if order[0].WRID != 0 || order[0].Status != WCSuccess {
			t.Errorf("first completion %#x (%v), want the live QP's WRITE (0) to succeed before the silent QPs fail", order[0].WRID, order[0].Status)
		}
		for _, wc := range order[1:] {
			if wc.Status != WCRetryExcErr {
				t.Errorf("silent peer's WRITE %#x: %v, want %v", wc.WRID, wc.Status, WCRetryExcErr)
			}
		}
		if got := m.da.budget.inflight.Load(); got != 0 {
			t.Errorf("budget in flight after all completed = %d, want 0", got)
		}
	})
}

// TestSendBudgetSmallMessage: a one-packet message on a QP with nothing in
// flight does not wait for a turn: silent peers' QPs hold the budget until
// their first retransmit timeout, and the message completes before it.
func TestSendBudgetSmallMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ea, eb := scaleLink(t, "pipe")
		m := newManyQPsConfig(t, ea, eb, 5, 14, &Config{InflightBudget: 64})
		silent := []int{1, 2, 3, 4}
		for _, i := range silent {
			if err := m.b[i].Destroy(); err != nil {
				t.Fatal(err)
			}
		}
		budgetWRITEs(t, m, silent, 1, 64<<10)
		wr := []SendWR{{SGList: make([]SGE, 1)}}
		if err := m.write(wr, 0); err != nil { // 64 bytes, WRID 0
			t.Fatal(err)
		}
		first := true
		pollUntil(t, m.cqa, 5, 30*time.Second, func(wc WC) {
			if !first {
				return
			}
			first = false
			if wc.WRID != 0 || wc.Status != WCSuccess {
				t.Errorf("first completion %#x (%v), want the 64-byte WRITE (0)", wc.WRID, wc.Status)
			}
			if n := m.da.Stats().RetryTimeouts.Load(); n != 0 {
				t.Errorf("the 64-byte WRITE completed after %d retransmit timeouts: it waited for the budget", n)
			}
		})
	})
}

// budgetEP is a link endpoint that reports a receive buffer.
type budgetEP struct {
	link.Endpoint
	rcvbuf int
}

func (e budgetEP) Capabilities() link.Capabilities {
	return link.Capabilities{ReceiveBuffer: e.rcvbuf}
}

func TestBudgetLimit(t *testing.T) {
	a, _, err := pipe.New(pipe.Config{}, pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tests := []struct {
		name   string
		cfg    int
		ep     link.Endpoint
		mtu    wire.MTU
		want   int64
		wantQ  int64
		reason string
	}{
		{"set", 100, a, wire.MTU4096, 100, 25, "Config.InflightBudget as given"},
		{"off", -1, a, wire.MTU4096, 0, 1, "negative: no budget"},
		{"unknown buffer", 0, a, wire.MTU4096, maxBudget, budgetQuantum, "a link that does not tell: the cap"},
		{"from buffer", 0, budgetEP{a, 4608 * 300}, wire.MTU4096, 300, budgetQuantum, "the buffer over MTU plus overhead"},
		{"smaller MTU", 0, budgetEP{a, 1536 * 300}, wire.MTU1024, 300, budgetQuantum, "packets of the active MTU"},
		{"huge buffer", 0, budgetEP{a, 64 << 20}, wire.MTU4096, maxBudget, budgetQuantum, "capped"},
		{"tiny buffer", 0, budgetEP{a, 1000}, wire.MTU4096, budgetFloor, 1, "at least one packet"},
	}
	for _, tt := range tests {
		var b sendBudget
		b.init(tt.cfg, tt.ep, tt.mtu)
		if b.limit != tt.want || b.quantum != tt.wantQ {
			t.Errorf("%s: limit, quantum = %d, %d; want %d, %d (%s)", tt.name, b.limit, b.quantum, tt.want, tt.wantQ, tt.reason)
		}
	}
}

// TestSendBudgetLossy: QPs taking turns in a small budget over a path that
// loses and reorders packets both ways (retransmissions, timeouts, what a
// timeout stops counting) all complete with their data in place, and the
// budget is all given back.
func TestSendBudgetLossy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			nqp    = 16
			budget = 128
			size   = 64 << 10
			msgs   = 3
		)
		f := pipe.Faults{Loss: 0.02, Reorder: 0.05}
		ea, eb, err := pipe.New(pipe.Config{MTU: 65536, QueueLen: 1 << 15, Faults: f, Seed: 1},
			pipe.Config{MTU: 65536, QueueLen: 1 << 15, Faults: f, Seed: 2})
		if err != nil {
			t.Fatal(err)
		}
		// ~17 ms timeouts: with ~4 ms, a run under the race detector on a loaded
		// 2-core machine once stalled a QP past its 7 retries (about 60 ms).
		m := newManyQPsConfig(t, ea, eb, nqp, 12, &Config{InflightBudget: budget})
		srcBuf := make([]byte, nqp*size)
		for i := range srcBuf {
			srcBuf[i] = byte(i*7 + i/size)
		}
		src, err := m.a[0].pd.RegMR(srcBuf, AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		dstBuf := make([]byte, nqp*size)
		dst, err := m.b[0].pd.RegMR(dstBuf, AccessLocalWrite|AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		for j := range msgs {
			for i := range nqp {
				off := uint64(i * size)
				wr := []SendWR{{WRID: uint64(i<<8 | j), Opcode: WRRDMAWrite, Flags: SendSignaled,
					RKey: dst.RKey(), RemoteAddr: dst.Addr() + off,
					SGList: []SGE{{Addr: src.Addr() + off, Length: size, LKey: src.LKey()}}}}
				if _, err := m.a[i].PostSend(wr); err != nil {
					t.Fatal(err)
				}
			}
		}
		pollUntil(t, m.cqa, nqp*msgs, 60*time.Second, func(wc WC) {
			if wc.Status != WCSuccess {
				t.Fatalf("WRITE %#x: %v", wc.WRID, wc.Status)
			}
		})
		if !bytes.Equal(dstBuf, srcBuf) {
			t.Error("the target buffer differs from the source after all WRITEs completed")
		}
		st := m.da.Stats()
		if st.Retransmits.Load() == 0 || st.BudgetWaits.Load() == 0 {
			t.Errorf("retransmits %d, budget waits %d: the test should exercise both", st.Retransmits.Load(), st.BudgetWaits.Load())
		}
		if got := m.da.budget.inflight.Load(); got != 0 {
			t.Errorf("budget in flight after all completed = %d, want 0", got)
		}
		t.Logf("retransmits %d, timeouts %d, budget waits %d, most in flight %d",
			st.Retransmits.Load(), st.RetryTimeouts.Load(), st.BudgetWaits.Load(), st.InflightMax.Load())
	})
}

// TestSendBudgetNoTimer: QPs with the retransmit timer off (timeout 0),
// whose peer went silent, would hold their share of the budget for ever;
// they stay outside it, and a QP with a timer is not held back by them.
func TestSendBudgetNoTimer(t *testing.T) {
	const nsilent = 8
	ea, eb := scaleLink(t, "pipe")
	m := newManyQPsConfig(t, ea, eb, 1, 14, &Config{InflightBudget: 64})
	write := budgetWriter(t, m, 64<<10)
	for i := range nsilent {
		write(silentQP(t, m, ea, eb, 0), uint64(100+i)) // no retransmit timer
	}
	write(m.a[0], 0) // 64 packets, over the budget if the silent QPs held it
	pollUntil(t, m.cqa, 1, 10*time.Second, func(wc WC) {
		if wc.WRID != 0 || wc.Status != WCSuccess {
			t.Errorf("completion %d (%v), want the timed QP's WRITE (0) to succeed", wc.WRID, wc.Status)
		}
	})
}

// TestSendBudgetLongWait: a QP may wait for its turn far longer than its
// retransmit timeout allows retries. Here a QP whose peer went silent
// (timeout ~4 s) holds the whole budget, and a QP with ~1 ms timeouts
// waits with nothing unacknowledged in flight while 40 ms pass: its timer's
// expiries spend no retries (onRetryTimer), and it gets its turn once
// the silent QP's timeout gives the budget back.
func TestSendBudgetLongWait(t *testing.T) {
	fc := clocktest.NewFake(time.Unix(1e9, 0))
	ea, eb := scaleLink(t, "pipe")
	m := newManyQPsConfig(t, ea, eb, 1, 8, &Config{InflightBudget: 64, Clock: fc}) // m.a[0]: timeout ~1 ms
	write := budgetWriter(t, m, 64<<10)
	silent := silentQP(t, m, ea, eb, 20) // ~4.3 s
	write(silent, 100)                   // 64 packets at MTU 1024: the whole budget, never acknowledged
	write(m.a[0], 0)                     // one packet (the floor), then a wait
	st := m.da.Stats()
	for deadline := time.Now().Add(10 * time.Second); st.BudgetWaits.Load() == 0 || m.a[0].budgetInFlight() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the timed QP never started waiting with nothing in flight")
		}
		time.Sleep(time.Millisecond)
	}
	for range 20 {
		fc.Advance(2 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if wcs := make([]WC, 4); m.cqa.Poll(wcs) != 0 {
		t.Fatalf("while waiting for its turn: completion %d (%v), want none", wcs[0].WRID, wcs[0].Status)
	}
	// On to the silent QP's first timeout (~4.3 s and jitter), and no
	// further: it gives the budget back, and the waiting QP's turn then
	// runs in real time. Timers fire inside Advance, so the steps stay
	// shorter than the waiting QP's own timeout (1 ms): a longer step
	// would go on, past the silent QP's expiry, to expire the timer the
	// turn arms, again and again, before the peer could answer.
	for tmo := st.RetryTimeouts.Load(); st.RetryTimeouts.Load() == tmo; {
		fc.Advance(500 * time.Microsecond)
	}
	pollUntil(t, m.cqa, 1, 10*time.Second, func(wc WC) {
		if wc.WRID != 0 || wc.Status != WCSuccess {
			t.Errorf("completion %d (%v), want the waiting QP's WRITE (0) to succeed", wc.WRID, wc.Status)
		}
	})
}

// TestBudgetWarnsWhenSmall: a device whose budget, computed from the link's
// receive buffer, is smaller than one send window says so once through its
// logger, with the numbers; a budget the user set, or one a window fits
// in, is not warned about.
func TestBudgetWarnsWhenSmall(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rcvbuf int
		cfg    int
		warn   bool
	}{
		{"default rmem_max", 4608 * 92, 0, true},
		{"a window fits", 4608 * maxUnackedPSNs, 0, false},
		{"set by the user", 4608 * 92, 50, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, err := pipe.New(pipe.Config{MTU: 9000}, pipe.Config{MTU: 9000}) // active MTU 4096
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var out strings.Builder
			log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
			d, err := Open(budgetEP{a, tc.rcvbuf}, &Config{Logger: log, InflightBudget: tc.cfg})
			if err != nil {
				t.Fatal(err)
			}
			d.Close()
			got := out.String()
			if n := strings.Count(got, "send budget is smaller than one QP's send window"); n != map[bool]int{true: 1}[tc.warn] {
				t.Fatalf("%d warnings, want %v:\n%s", n, tc.warn, got)
			}
			if tc.warn && !strings.Contains(got, "budget_packets=92 window_packets=512 receive_buffer_bytes=423936") {
				t.Errorf("warning without the numbers:\n%s", got)
			}
		})
	}
}
