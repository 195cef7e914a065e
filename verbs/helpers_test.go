package verbs

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// side is one device with a PD, CQs and a QP.
type side struct {
	dev  *Device
	pd   *PD
	scq  *CQ
	rcq  *CQ
	cc   *CompChannel // both CQs' channel (pairOpts.channel)
	qp   *QP
	buf  []byte
	mr   *MR
	port uint16
}

type pairOpts struct {
	typ      QPType
	faults   pipe.Faults
	mtu      int // link MTU
	pmtu     wire.MTU
	timeout  uint8
	hopLimit uint8 // AV hop_limit (default 64)
	retry    uint8
	rnrRetry uint8
	minRNR   uint8
	access   Access
	bufSize  int
	wr       uint32
	srq      bool
	filterA  pipe.Filter
	filterB  pipe.Filter // sees what B sends
	seed     uint64
	exact    bool // use timeout/retry/rnrRetry as given, even 0
	clock    clock.Clock
	noZC     bool // Config.NoZeroCopySend
	busyPoll time.Duration
	lateSGE  bool // Config.LateSGECheck
	hooks    *testHooks
	channel  bool // both CQs of each side on one completion channel (side.cc)
}

func newPipePair(t testing.TB, o *pairOpts) (link.Endpoint, link.Endpoint) {
	mtu := o.mtu
	if mtu == 0 {
		mtu = 65536
	}
	a, b, err := pipe.New(pipe.Config{MTU: mtu, Faults: o.faults, Seed: o.seed + 1, Filter: o.filterA},
		pipe.Config{MTU: mtu, Faults: o.faults, Seed: o.seed + 2, Filter: o.filterB})
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

func defaults(o *pairOpts) {
	if o.typ == 0 {
		o.typ = QPTypeRC
	}
	if o.pmtu == 0 {
		o.pmtu = wire.MTU1024
	}
	if !o.exact {
		if o.timeout == 0 {
			o.timeout = 10 // ~4 ms
		}
		if o.retry == 0 {
			o.retry = 7
		}
		if o.rnrRetry == 0 {
			o.rnrRetry = 7
		}
	}
	if o.minRNR == 0 {
		o.minRNR = 1
	}
	if o.hopLimit == 0 {
		o.hopLimit = 64
	}
	if o.access == 0 {
		o.access = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessFlushGlobal
	}
	if o.bufSize == 0 {
		o.bufSize = 1 << 20
	}
	if o.wr == 0 {
		o.wr = 256
	}
}

// runBubble runs f as the subtest name inside a testing/synctest bubble:
// the devices' timers, the pipe's delays and the test's waits then run on
// the bubble's clock, which jumps to the next deadline whenever every
// goroutine of the test waits. A test bounded by retransmit timeouts takes
// its CPU time, not its timeouts, and the same decisions every run.
// Everything f waits on must be opened inside it (newPair, not a link
// shared with other tests, and no sockets).
func runBubble(t *testing.T, name string, f func(t *testing.T)) bool {
	t.Helper()
	return t.Run(name, func(t *testing.T) { synctest.Test(t, f) })
}

// newPair opens two devices on ea/eb with one connected QP each.
func newPairOn(t testing.TB, ea, eb link.Endpoint, o pairOpts) (*side, *side) {
	t.Helper()
	defaults(&o)
	a, b := newSide(t, ea, o), newSide(t, eb, o)
	connect(t, a, b, o)
	connect(t, b, a, o)
	return a, b
}

func newPair(t testing.TB, o pairOpts) (*side, *side) {
	ea, eb := newPipePair(t, &o)
	return newPairOn(t, ea, eb, o)
}

func newSide(t testing.TB, ep link.Endpoint, o pairOpts) *side {
	t.Helper()
	d, err := Open(ep, &Config{Clock: o.clock, NoZeroCopySend: o.noZC, BusyPoll: o.busyPoll, LateSGECheck: o.lateSGE, hooks: o.hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	s := &side{dev: d, port: ep.LocalAddr().Port()}
	if s.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if o.channel {
		s.cc = d.CreateCompChannel()
	}
	if s.scq, err = d.CreateCQ(4096, nil, s.cc); err != nil {
		t.Fatal(err)
	}
	if s.rcq, err = d.CreateCQ(4096, nil, s.cc); err != nil {
		t.Fatal(err)
	}
	init := &QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq, QPType: o.typ,
		Cap: QPCap{MaxSendWR: o.wr, MaxRecvWR: o.wr, MaxSendSGE: 4, MaxRecvSGE: 4}}
	if o.srq {
		srq, err := s.pd.CreateSRQ(SRQAttr{MaxWR: o.wr, MaxSGE: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		init.SRQ = srq
	}
	if s.qp, err = s.pd.CreateQP(init); err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, o.bufSize)
	if s.mr, err = s.pd.RegMR(s.buf, o.access&^AccessFlushGlobal|AccessLocalWrite|AccessFlushGlobal); err != nil {
		t.Fatal(err)
	}
	return s
}

func connect(t testing.TB, s, peer *side, o pairOpts) {
	t.Helper()
	qp := s.qp
	a := &QPAttr{QPState: QPStateInit, PortNum: 1, QPAccessFlags: o.access, QKey: 0x11111111}
	m := QPAttrState | QPAttrPKeyIndex | QPAttrPort
	if o.typ == QPTypeUD {
		m |= QPAttrQKey
	} else {
		m |= QPAttrAccessFlags
	}
	if err := qp.Modify(a, m); err != nil {
		t.Fatal(err)
	}
	a = &QPAttr{QPState: QPStateRTR, PathMTU: o.pmtu, DestQPNum: peer.qp.QPN(), RQPSN: 100,
		MaxDestRdAtomic: 16, MinRNRTimer: o.minRNR,
		AHAttr: AHAttr{IsGlobal: true, PortNum: 1, DstPort: peer.port,
			GRH: GlobalRoute{DGID: peer.dev.gids[1], SGIDIndex: 1, HopLimit: o.hopLimit}}}
	m = QPAttrState
	switch o.typ {
	case QPTypeRC:
		m |= QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	case QPTypeUC:
		m |= QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
	}
	if err := qp.Modify(a, m); err != nil {
		t.Fatal(err)
	}
	a = &QPAttr{QPState: QPStateRTS, SQPSN: 100, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: 16}
	m = QPAttrState | QPAttrSQPSN
	if o.typ == QPTypeRC {
		m |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
	}
	if err := qp.Modify(a, m); err != nil {
		t.Fatal(err)
	}
}

// waitWC polls cq until n completions arrived or the deadline passes.
func waitWC(t testing.TB, cq *CQ, n int, d time.Duration) []WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := make([]WC, 0, n)
	buf := make([]WC, 64)
	for len(out) < n {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out with %d of %d completions: %+v", len(out), n, out)
			case <-time.After(50 * time.Microsecond):
			}
		}
	}
	return out
}

func sge(s *side, off, n int) []SGE {
	return []SGE{{Addr: s.mr.Addr() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7+i>>8)
	}
}

func mustEqual(t testing.TB, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("data differs at byte %d of %d", i, len(want))
	}
}

func post(t testing.TB, qp *QP, wr SendWR) {
	t.Helper()
	if _, err := qp.PostSend([]SendWR{wr}); err != nil {
		t.Fatal(err)
	}
}

func postRecv(t testing.TB, s *side, id uint64, off, n int) {
	t.Helper()
	wr := []RecvWR{{WRID: id, SGList: sge(s, off, n)}}
	var err error
	if s.qp.srq != nil {
		_, err = s.qp.srq.PostRecv(wr)
	} else {
		_, err = s.qp.PostRecv(wr)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
