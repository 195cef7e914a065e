package verbs

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/wire"
)

// manyQPs is n connected RC QP pairs between two devices: a[i] talks to
// b[i]. The QPs of one device share a PD, an MR and one CQ (with a
// completion channel) for sends and receives.
type manyQPs struct {
	da, db   *Device
	a, b     []*QP
	cqa, cqb *CQ
	ch       *CompChannel
	mra, mrb *MR
	setup    time.Duration // creating and connecting all 2n QPs
}

// scaleLink opens two endpoints joined by kind: "udp" (127.0.0.1 and
// 127.0.0.2 on kernel-chosen ports) or "pipe". The pipe's queues hold
// 32768 datagrams, like the UDP sockets' 32 MiB buffers a few 10,000s: a
// window of 10,000 WRITEs and their ACKs fits, as it does over UDP.
func scaleLink(tb testing.TB, kind string) (link.Endpoint, link.Endpoint) {
	tb.Helper()
	if kind == "pipe" {
		a, b, err := pipe.New(pipe.Config{MTU: 65536, QueueLen: 1 << 15}, pipe.Config{MTU: 65536, QueueLen: 1 << 15})
		if err != nil {
			tb.Fatal(err)
		}
		return a, b
	}
	ea, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.WithAnyPort())
	if err != nil {
		tb.Skip("UDP loopback unavailable:", err)
	}
	eb, err := udp.Listen(netip.MustParseAddrPort("127.0.0.2:0"), udp.WithAnyPort())
	if err != nil {
		ea.Close()
		tb.Skip("UDP loopback unavailable:", err)
	}
	return ea, eb
}

// newManyQPs opens two devices on ea, eb and connects n RC QP pairs with
// ACK timeout code timeout and retry_cnt 7 (seven retries, not for ever:
// a QP whose peer stops answering fails within RetryBudget(timeout, 7)).
func newManyQPs(tb testing.TB, ea, eb link.Endpoint, n int, timeout uint8) *manyQPs {
	tb.Helper()
	return newManyQPsConfig(tb, ea, eb, n, timeout, nil)
}

// newManyQPsConfig is newManyQPs with both devices opened with cfg.
func newManyQPsConfig(tb testing.TB, ea, eb link.Endpoint, n int, timeout uint8, cfg *Config) *manyQPs {
	tb.Helper()
	m := &manyQPs{}
	var err error
	if m.da, err = Open(ea, cfg); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.da.Close() })
	if m.db, err = Open(eb, cfg); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.db.Close() })
	access := AccessLocalWrite | AccessRemoteWrite
	mk := func(d *Device, ch *CompChannel) (*PD, *CQ, *MR) {
		pd, err := d.AllocPD()
		if err != nil {
			tb.Fatal(err)
		}
		cq, err := d.CreateCQ(min(2*n+64, maxCQE), nil, ch)
		if err != nil {
			tb.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 64*n+64), access)
		if err != nil {
			tb.Fatal(err)
		}
		return pd, cq, mr
	}
	m.ch = m.da.CreateCompChannel()
	pda, cqa, mra := mk(m.da, m.ch)
	pdb, cqb, mrb := mk(m.db, nil)
	m.cqa, m.cqb, m.mra, m.mrb = cqa, cqb, mra, mrb
	m.a, m.b = make([]*QP, n), make([]*QP, n)
	start := time.Now()
	for i := range n {
		init := func(cq *CQ) *QPInitAttr {
			return &QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: QPTypeRC,
				Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
		}
		if m.a[i], err = pda.CreateQP(init(cqa)); err != nil {
			tb.Fatalf("QP %d: %v", i, err)
		}
		if m.b[i], err = pdb.CreateQP(init(cqb)); err != nil {
			tb.Fatalf("QP %d: %v", i, err)
		}
	}
	for i := range n {
		scaleConnect(tb, m.a[i], m.b[i], m.db, eb.LocalAddr().Port(), access, timeout)
		scaleConnect(tb, m.b[i], m.a[i], m.da, ea.LocalAddr().Port(), access, timeout)
	}
	m.setup = time.Since(start)
	return m
}

// scaleConnect moves qp to RTS towards peer on device pd at UDP port port.
func scaleConnect(tb testing.TB, qp, peer *QP, pd *Device, port uint16, access Access, timeout uint8) {
	tb.Helper()
	steps := []struct {
		a *QPAttr
		m AttrMask
	}{
		{&QPAttr{QPState: QPStateInit, PortNum: 1, QPAccessFlags: access},
			QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		{&QPAttr{QPState: QPStateRTR, PathMTU: wire.MTU1024, DestQPNum: peer.QPN(), RQPSN: 100, MaxDestRdAtomic: 1,
			MinRNRTimer: 1, AHAttr: AHAttr{IsGlobal: true, PortNum: 1, DstPort: port,
				GRH: GlobalRoute{DGID: pd.gids[1], SGIDIndex: 1, HopLimit: 64}}},
			QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer},
		{&QPAttr{QPState: QPStateRTS, SQPSN: 100, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(s.a, s.m); err != nil {
			tb.Fatal(err)
		}
	}
}

// write posts one signaled 64-byte RDMA WRITE on pair i (WRID i); wr
// has room for one WR with one SGE (PostSend copies them, so they are
// reused and the loop allocates nothing).
func (m *manyQPs) write(wr []SendWR, i int) error {
	sg := wr[0].SGList[:1]
	sg[0] = SGE{Addr: m.mra.Addr() + uint64(64*i), Length: 64, LKey: m.mra.LKey()}
	wr[0] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sg,
		RemoteAddr: m.mrb.Addr() + uint64(64*i), RKey: m.mrb.RKey()}
	_, err := m.a[i].PostSend(wr)
	return err
}

// BenchmarkManyQPs measures the aggregate rate of 64-byte RDMA WRITEs over
// n RC QP pairs between two devices, one WRITE in flight per QP (each
// completion re-posts on its QP, so the QPs take turns). It reports ops/s,
// retransmissions and retransmit-timer expiries per 1000 ops, the largest
// goroutine count seen, and the setup cost per QP. SOFTROCE_BENCH_LINK does
// not apply: both links run, as sub-benchmarks.
//
// Compare the ops/s of qps=10000 with qps=1000 of the same run.
func BenchmarkManyQPs(b *testing.B) {
	for _, kind := range []string{"udp", "pipe"} {
		for _, n := range []int{1, 10, 100, 1000, 3000, 10000} {
			b.Run(fmt.Sprintf("link=%s/qps=%d", kind, n), func(b *testing.B) { benchManyQPs(b, kind, n) })
		}
	}
}

// manyQPsTimeout is the QPs' ACK timeout code: 14 (~67 ms, perftest's
// default), or SOFTROCE_MANYQPS_TIMEOUT. With one WRITE in flight per QP
// the round trip grows with the QP count (10,000 QPs at 50k ops/s: 200
// ms), so a short fixed timeout expires spuriously; a long one shows the
// engine's scaling without them.
var manyQPsTimeout = func() uint8 {
	if v, err := strconv.ParseUint(os.Getenv("SOFTROCE_MANYQPS_TIMEOUT"), 10, 5); err == nil {
		return uint8(v)
	}
	return 14
}()

func benchManyQPs(b *testing.B, kind string, n int) {
	ea, eb := scaleLink(b, kind)
	m := newManyQPs(b, ea, eb, n, manyQPsTimeout)
	wr := []SendWR{{SGList: make([]SGE, 1)}}
	wcs := make([]WC, 256)
	var queued []WC
	st, stb := m.da.Stats(), m.db.Stats()
	retr0, tmo0 := st.Retransmits.Load(), st.RetryTimeouts.Load()
	sent0 := st.TxPackets.Load() + stb.TxPackets.Load()
	rcvd0 := st.RxPackets.Load() + stb.RxPackets.Load()
	maxG := runtime.NumGoroutine()
	// One context for the run, cancelled by a watchdog re-armed before each
	// wait for an event (liveness only: no completion for minutes means
	// collapse). A context.WithTimeout per wait allocated 4 objects, which
	// the benchmark reported as the engine's.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchdog := time.AfterFunc(time.Hour, cancel)
	watchdog.Stop()
	defer watchdog.Stop()
	posted := 0
	for i := range n {
		if err := m.write(wr, i); err != nil {
			b.Fatal(err)
		}
		posted++
	}
	iter := 0
	for b.Loop() {
		for len(queued) == 0 {
			k := m.cqa.Poll(wcs)
			if k > 0 {
				queued = wcs[:k]
				break
			}
			m.cqa.ReqNotify(false)
			if m.cqa.Len() > 0 {
				continue
			}
			watchdog.Reset(2 * time.Minute)
			_, err := m.ch.GetCQEvent(ctx)
			watchdog.Stop()
			if err != nil {
				b.Fatalf("no completion for 2 minutes after %d: %v (retransmissions %d, timeouts %d)",
					iter, err, st.Retransmits.Load()-retr0, st.RetryTimeouts.Load()-tmo0)
			}
			m.cqa.AckEvents(1)
		}
		wc := queued[0]
		queued = queued[1:]
		if wc.Status != WCSuccess {
			b.Fatalf("WRITE on pair %d: %v", wc.WRID, wc.Status)
		}
		if err := m.write(wr, int(wc.WRID)); err != nil {
			b.Fatal(err)
		}
		if iter++; iter&255 == 0 {
			maxG = max(maxG, runtime.NumGoroutine())
		}
	}
	el := b.Elapsed()
	b.ReportAllocs()
	b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
	b.ReportMetric(float64(st.Retransmits.Load()-retr0)*1000/float64(b.N), "retrans/kop")
	b.ReportMetric(float64(st.RetryTimeouts.Load()-tmo0)*1000/float64(b.N), "timeouts/kop")
	// Packets sent but not received (still in flight at the end, or lost).
	lost := int64(st.TxPackets.Load()+stb.TxPackets.Load()-sent0) - int64(st.RxPackets.Load()+stb.RxPackets.Load()-rcvd0)
	b.ReportMetric(float64(lost)*1000/float64(b.N), "unrcvd/kop")
	b.ReportMetric(float64(maxG), "goroutines")
	b.ReportMetric(float64(m.setup.Microseconds())/float64(2*n), "setup-µs/QP")
}

// TestTenThousandQPs creates 10,000 RC QPs on one device, all sending to a
// peer that has no QPs (every packet is dropped there), so every QP's
// retransmit timer runs. While the device cannot send (its transmit lock is
// held), expiring timers must not pile up goroutines: the device's timers
// share one goroutine. Every QP must still time out and retry once the
// device can send, and destroying QPs and closing the device must release
// the timers, the QP table and the goroutines.
func TestTenThousandQPs(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 QPs: not in -short")
	}
	const n = 10000
	g0 := runtime.NumGoroutine()
	ea, eb := scaleLink(t, "pipe")
	da, err := Open(ea, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	db, err := Open(eb, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g1 := runtime.NumGoroutine() // the devices' and the link's own
	pd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := da.CreateCQ(maxCQE, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 64), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	qps := make([]*QP, n)
	for i := range qps {
		if qps[i], err = pd.CreateQP(&QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: QPTypeRC,
			Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
		// Any QPN on the peer: it has none, so it drops everything.
		scaleConnect(t, qps[i], &QP{qpn: firstQPN + uint32(i)}, db, eb.LocalAddr().Port(), AccessLocalWrite, 12)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	t.Logf("%d QPs: %d heap bytes per QP", n, (int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))/n)
	if got := da.qps.inUse; got != n {
		t.Fatalf("QP table holds %d QPs, want %d", got, n)
	}

	st := da.Stats()
	for i, qp := range qps {
		wr := []SendWR{{WRID: uint64(i), Opcode: WRRDMAWrite, RKey: 1, RemoteAddr: 0x1000,
			SGList: []SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}}}
		if _, err := qp.PostSend(wr); err != nil {
			t.Fatalf("post on QP %d: %v", i, err)
		}
	}
	// Timeout code 12 is ~17 ms: with every QP locked for 200 ms, the
	// timers expire (and, were each expiry its own goroutine, those would
	// pile up on the QPs' locks).
	for _, qp := range qps {
		qp.mu.Lock()
	}
	time.Sleep(200 * time.Millisecond)
	g := runtime.NumGoroutine()
	for _, qp := range qps {
		qp.mu.Unlock()
	}
	if g > g1+4 {
		t.Fatalf("%d goroutines with 10,000 QPs timing out, %d before the QPs: timers must share one goroutine", g, g1)
	}

	// Every QP's timer fires.
	deadline := time.Now().Add(2 * time.Minute)
	for st.RetryTimeouts.Load() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := st.RetryTimeouts.Load(); got < n {
		t.Fatalf("%d retransmit timeouts in 2 minutes, want at least one per QP (%d)", got, n)
	}
	if g := runtime.NumGoroutine(); g > g1+4 {
		t.Fatalf("%d goroutines while 10,000 QPs retransmit, %d before the QPs", g, g1)
	}

	// Destroying half the QPs releases their timers and numbers.
	for _, qp := range qps[:n/2] {
		if err := qp.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if got := da.timer.len(); got > n/2 {
		t.Fatalf("%d timers queued after destroying half of %d QPs", got, n)
	}
	da.qpMu.Lock()
	inUse := da.qps.inUse
	da.qpMu.Unlock()
	if inUse != n/2 {
		t.Fatalf("QP table holds %d QPs after destroying half of %d", inUse, n)
	}

	// Close stops the rest: no timer left, none fires, goroutines back.
	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	if got := da.timer.len(); got != 0 {
		t.Fatalf("%d timers queued after Close", got)
	}
	to := st.RetryTimeouts.Load()
	db.Close()
	for runtime.NumGoroutine() > g0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > g0 {
		t.Fatalf("%d goroutines after Close, %d before the devices opened", g, g0)
	}
	if st.RetryTimeouts.Load() != to {
		t.Fatal("a retransmit timer fired after Close")
	}
}
