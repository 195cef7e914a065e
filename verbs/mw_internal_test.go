package verbs

import (
	"encoding/binary"
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Memory window tests, modelled on rdma-core's pyverbs test_mr.py MW cases
// (bind type 1 and 2, invalidate local and remote, deallocate, traffic).

const mwAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessMWBind

// mwPair is a connected pair whose responder b has an MR allowing binds.
func mwPair(t *testing.T) (a, b *side, mr *MR) {
	t.Helper()
	a, b = newPair(t, pairOpts{bufSize: 1 << 16})
	buf := make([]byte, 1<<16)
	mr, err := b.pd.RegMR(buf, mwAccess)
	if err != nil {
		t.Fatal(err)
	}
	return a, b, mr
}

func oneWC(t *testing.T, cq *CQ) WC {
	t.Helper()
	return waitWC(t, cq, 1, 5*time.Second)[0]
}

func wantWC(t *testing.T, cq *CQ, st WCStatus, op WCOpcode) WC {
	t.Helper()
	wc := oneWC(t, cq)
	if wc.Status != st || wc.Opcode != op {
		t.Fatalf("completion %+v, want status %v opcode %d", wc, st, op)
	}
	return wc
}

// bind2 binds a type 2 window with a BIND_MW work request on qp.
func bind2(t *testing.T, s *side, mw *MW, bi MWBindInfo) uint32 {
	t.Helper()
	key := IncRKey(mw.RKey())
	post(t, s.qp, SendWR{WRID: 77, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, RKey: key, BindInfo: bi})
	wantWC(t, s.scq, WCSuccess, WCBindMW)
	if mw.RKey() != key {
		t.Fatalf("window key %#x after bind, want %#x", mw.RKey(), key)
	}
	return key
}

func TestMWType1BindAndTraffic(t *testing.T) {
	a, b, mr := mwPair(t)
	mw, err := b.pd.AllocMW(MWType1)
	if err != nil {
		t.Fatal(err)
	}
	if idx := mw.RKey() >> 8; idx <= maxMRIndex {
		t.Fatalf("MW index %#x inside the MR range", idx)
	}
	base := mr.Addr() + 4096
	key, err := b.qp.BindMW(mw, MWBind{WRID: 5, Flags: SendSignaled,
		BindInfo: MWBindInfo{MR: mr, Addr: base, Length: 8192, Access: AccessRemoteWrite | AccessRemoteRead}})
	if err != nil {
		t.Fatal(err)
	}
	if wc := wantWC(t, b.scq, WCSuccess, WCBindMW); wc.WRID != 5 {
		t.Fatalf("%+v", wc)
	}
	if key != mw.RKey() || !mw.Bound() {
		t.Fatalf("BindMW returned %#x, window key %#x bound %v", key, mw.RKey(), mw.Bound())
	}
	fill(a.buf[:3000], 9)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 3000), RemoteAddr: base + 100, RKey: key})
	wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
	mustEqual(t, mr.Bytes()[4096+100:4096+3100], a.buf[:3000])
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 8000, 3000), RemoteAddr: base + 100, RKey: key})
	wantWC(t, a.scq, WCSuccess, WCRDMARead)
	mustEqual(t, a.buf[8000:11000], a.buf[:3000])
	// Beyond the window (inside the MR): remote access error.
	post(t, a.qp, SendWR{WRID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 16), RemoteAddr: base + 8190, RKey: key})
	wantWC(t, a.scq, WCRemAccessErr, WCRDMAWrite)
}

func TestMWType1Rebind(t *testing.T) {
	a, b, mr := mwPair(t)
	mw, _ := b.pd.AllocMW(MWType1)
	bi := MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite}
	k1, err := b.qp.BindMW(mw, MWBind{BindInfo: bi})
	if err != nil {
		t.Fatal(err)
	}
	k2, err := b.qp.BindMW(mw, MWBind{BindInfo: bi, Flags: SendSignaled})
	if err != nil {
		t.Fatal(err)
	}
	wantWC(t, b.scq, WCSuccess, WCBindMW)
	if k1 == k2 || k1>>8 != k2>>8 {
		t.Fatalf("keys %#x then %#x: want same index, new key8", k1, k2)
	}
	// The old key no longer works.
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 8), RemoteAddr: mr.Addr(), RKey: k1})
	wantWC(t, a.scq, WCRemAccessErr, WCRDMAWrite)
}

func TestMWType2ZeroBasedTraffic(t *testing.T) {
	a, b, _ := mwPair(t)
	mw, err := b.pd.AllocMW(MWType2)
	if err != nil {
		t.Fatal(err)
	}
	// A free type 2 window gives remote access errors.
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 8), RemoteAddr: 0, RKey: mw.RKey()})
	wantWC(t, a.scq, WCRemAccessErr, WCRDMAWrite)

	a, b, mr := mwPair(t)
	mw, _ = b.pd.AllocMW(MWType2)
	key := bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr() + 1000, Length: 5000,
		Access: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessZeroBased})
	fill(a.buf[:4000], 3)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 4000), RemoteAddr: 8, RKey: key})
	wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
	mustEqual(t, mr.Bytes()[1008:5008], a.buf[:4000])
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 10000, 4000), RemoteAddr: 8, RKey: key})
	wantWC(t, a.scq, WCSuccess, WCRDMARead)
	mustEqual(t, a.buf[10000:14000], a.buf[:4000])
	// Atomic through the window at window offset 4096 (MR offset 5096).
	binary.NativeEndian.PutUint64(mr.Bytes()[5096:], 40)
	post(t, a.qp, SendWR{WRID: 3, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGList: sge(a, 20000, 8), RemoteAddr: 4096, RKey: key, CompareAdd: 2})
	wantWC(t, a.scq, WCSuccess, WCFetchAdd)
	if got, old := binary.NativeEndian.Uint64(mr.Bytes()[5096:]), binary.NativeEndian.Uint64(a.buf[20000:]); got != 42 || old != 40 {
		t.Fatalf("fetch-add through window: memory %d old %d, want 42 40", got, old)
	}
	// The window ends at 5000.
	post(t, a.qp, SendWR{WRID: 4, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 16), RemoteAddr: 4990, RKey: key})
	wantWC(t, a.scq, WCRemAccessErr, WCRDMARead)
}

func TestMWType2LocalInvalidate(t *testing.T) {
	a, b, mr := mwPair(t)
	mw, _ := b.pd.AllocMW(MWType2)
	bi := MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite}
	key := bind2(t, b, mw, bi)
	if err := mr.Deregister(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("deregistering an MR with a bound window: %v, want EBUSY", err)
	}
	post(t, b.qp, SendWR{WRID: 9, Opcode: WRLocalInv, Flags: SendSignaled, ImmData: key})
	wantWC(t, b.scq, WCSuccess, WCLocalInv)
	if mw.Bound() {
		t.Fatal("window still bound after LOCAL_INV")
	}
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 8), RemoteAddr: mr.Addr(), RKey: key})
	wantWC(t, a.scq, WCRemAccessErr, WCRDMAWrite)
	// The window is free again: it can be bound anew, and the MR deregistered once it is not.
	a, b, mr = mwPair(t)
	mw, _ = b.pd.AllocMW(MWType2)
	key = bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite})
	post(t, b.qp, SendWR{WRID: 9, Opcode: WRLocalInv, Flags: SendSignaled, ImmData: key})
	wantWC(t, b.scq, WCSuccess, WCLocalInv)
	key = bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 8), RemoteAddr: mr.Addr(), RKey: key})
	wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
}

func TestMWType2RemoteInvalidate(t *testing.T) {
	a, b, mr := mwPair(t)
	mw, _ := b.pd.AllocMW(MWType2)
	key := bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite})
	postRecv(t, b, 1, 0, 64)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSendWithInv, Flags: SendSignaled, SGList: sge(a, 0, 16), ImmData: key})
	wantWC(t, a.scq, WCSuccess, WCSend)
	wc := wantWC(t, b.rcq, WCSuccess, WCRecv)
	if wc.Flags&WCWithInv == 0 || wc.ImmData != key {
		t.Fatalf("receive completion %+v, want WITH_INV of %#x", wc, key)
	}
	if mw.Bound() {
		t.Fatal("window still bound after SEND_WITH_INV")
	}
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 8), RemoteAddr: mr.Addr(), RKey: key})
	wantWC(t, a.scq, WCRemAccessErr, WCRDMAWrite)
}

// TestMWType1RemoteInvalidateFails: type 1 windows cannot be invalidated;
// a SEND_WITH_INV naming one is ACKed normally but the receive completes
// with REM_INV_REQ_ERR and the responder QP enters ERR (docs/protocol.md §5.7, §7.3).
func TestMWType1RemoteInvalidateFails(t *testing.T) {
	a, b, mr := mwPair(t)
	mw, _ := b.pd.AllocMW(MWType1)
	key, err := b.qp.BindMW(mw, MWBind{Flags: SendSignaled, BindInfo: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteRead}})
	if err != nil {
		t.Fatal(err)
	}
	wantWC(t, b.scq, WCSuccess, WCBindMW)
	postRecv(t, b, 1, 0, 64)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSendWithInv, Flags: SendSignaled, SGList: sge(a, 0, 16), ImmData: key})
	wantWC(t, a.scq, WCSuccess, WCSend)
	wantWC(t, b.rcq, WCRemInvReqErr, WCRecv)
	if st := b.qp.State(); st != QPStateErr {
		t.Fatalf("responder QP in %v, want ERR", st)
	}
	if !mw.Bound() {
		t.Fatal("type 1 window was invalidated")
	}
	// LOCAL_INV of a type 1 window fails too.
	_, b, _ = mwPair(t)
	mw, _ = b.pd.AllocMW(MWType1)
	post(t, b.qp, SendWR{WRID: 9, Opcode: WRLocalInv, Flags: SendSignaled, ImmData: mw.RKey()})
	wantWC(t, b.scq, WCLocQPOpErr, WCLocalInv)
}

func TestMWBindErrors(t *testing.T) {
	_, b, mr := mwPair(t)
	mw1, _ := b.pd.AllocMW(MWType1)
	mw2, _ := b.pd.AllocMW(MWType2)
	bi := MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite}
	if _, err := b.qp.BindMW(mw2, MWBind{BindInfo: bi}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("BindMW of a type 2 window: %v", err)
	}
	zb := bi
	zb.Access |= AccessZeroBased
	if _, err := b.qp.BindMW(mw1, MWBind{BindInfo: zb}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("zero-based type 1 bind: %v", err)
	}
	if _, err := b.qp.PostSend([]SendWR{{Opcode: WRBindMW, MW: mw2, RKey: IncRKey(mw1.RKey()), BindInfo: bi}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("bind with another window's index: %v", err)
	}
	bad := bi
	bad.Access |= AccessLocalWrite
	if _, err := b.qp.PostSend([]SendWR{{Opcode: WRBindMW, MW: mw2, RKey: IncRKey(mw2.RKey()), BindInfo: bad}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("bind with LOCAL_WRITE access: %v", err)
	}

	cases := []struct {
		name string
		mod  func(*MWBindInfo, *testing.T, *side)
	}{
		{"MR without MW_BIND", func(bi *MWBindInfo, t *testing.T, s *side) {
			mr, err := s.pd.RegMR(make([]byte, 8192), AccessLocalWrite|AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			bi.MR, bi.Addr = mr, mr.Addr()
		}},
		{"range beyond the MR", func(bi *MWBindInfo, t *testing.T, s *side) { bi.Length = 1 << 20 }},
		{"remote write, MR without local write", func(bi *MWBindInfo, t *testing.T, s *side) {
			mr, err := s.pd.RegMR(make([]byte, 8192), AccessRemoteRead|AccessMWBind)
			if err != nil {
				t.Fatal(err)
			}
			bi.MR, bi.Addr = mr, mr.Addr()
		}},
		{"zero-based MR", func(bi *MWBindInfo, t *testing.T, s *side) {
			mr, err := s.pd.RegMR(make([]byte, 8192), mwAccess|AccessZeroBased)
			if err != nil {
				t.Fatal(err)
			}
			bi.MR, bi.Addr = mr, 0
		}},
		{"zero length", func(bi *MWBindInfo, t *testing.T, s *side) { bi.Length = 0 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, b, mr := mwPair(t)
			mw, _ := b.pd.AllocMW(MWType2)
			bi := MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite}
			c.mod(&bi, t, b)
			post(t, b.qp, SendWR{WRID: 1, Opcode: WRBindMW, MW: mw, RKey: IncRKey(mw.RKey()), BindInfo: bi})
			wantWC(t, b.scq, WCMWBindErr, WCBindMW)
			if st := b.qp.State(); st != QPStateErr {
				t.Fatalf("QP in %v after a failed bind, want ERR", st)
			}
		})
	}
	// Binding a bound type 2 window again fails (it must be invalidated first).
	t.Run("type 2 already bound", func(t *testing.T) {
		_, b, mr := mwPair(t)
		mw, _ := b.pd.AllocMW(MWType2)
		bi := MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite}
		bind2(t, b, mw, bi)
		post(t, b.qp, SendWR{WRID: 1, Opcode: WRBindMW, MW: mw, RKey: IncRKey(mw.RKey()), BindInfo: bi})
		wantWC(t, b.scq, WCMWBindErr, WCBindMW)
	})
}

func TestMWDeallocWhileBound(t *testing.T) {
	a, b, mr := mwPair(t)
	mw, _ := b.pd.AllocMW(MWType2)
	key := bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite})
	if err := b.pd.Dealloc(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("dealloc PD with a window: %v", err)
	}
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := mw.Dealloc(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("second dealloc: %v", err)
	}
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 8), RemoteAddr: mr.Addr(), RKey: key})
	wantWC(t, a.scq, WCRemAccessErr, WCRDMAWrite)
	if err := mr.Deregister(); err != nil {
		t.Fatalf("deregister after the window's dealloc: %v", err)
	}
	if n := b.dev.Stats().MWs.Load(); n != 0 {
		t.Fatalf("%d windows counted after dealloc", n)
	}
}

// TestMWType2OtherQP: a type 2 window is QP-scoped: access through another
// QP of the same PD gets a remote access error.
func TestMWType2OtherQP(t *testing.T) {
	a, b, mr := mwPair(t)
	mw, _ := b.pd.AllocMW(MWType2)
	// Bind through a second QP of b's PD (never connected: binds are local).
	qp2, err := b.pd.CreateQP(&QPInitAttr{SendCQ: b.scq, RecvCQ: b.rcq, QPType: QPTypeRC, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	other := &side{dev: b.dev, pd: b.pd, scq: b.scq, rcq: b.rcq, qp: qp2, port: b.port}
	peer := &side{dev: a.dev, qp: a.qp, port: a.port}
	connect(t, other, peer, pairOpts{typ: QPTypeRC, pmtu: 3, timeout: 10, retry: 7, rnrRetry: 7, minRNR: 1, access: mwAccess &^ AccessMWBind})
	key := bind2(t, other, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 8), RemoteAddr: mr.Addr(), RKey: key})
	wantWC(t, a.scq, WCRemAccessErr, WCRDMAWrite)
}

func TestQueryDeviceMaxMW(t *testing.T) {
	_, b := newPair(t, pairOpts{bufSize: 64})
	at := b.dev.QueryDevice()
	if at.MaxMW != MaxMW || at.DeviceCapFlags&(deviceMemWindow|deviceMemWindow2B) != deviceMemWindow|deviceMemWindow2B {
		t.Fatalf("MaxMW %d caps %#x", at.MaxMW, at.DeviceCapFlags)
	}
}

// TestMWAllocs: RDMA WRITE and READ through a window, and bind/invalidate
// work requests, do not allocate in steady state.
func TestMWAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts need a run without -race or -short")
	}
	a, b, mr := mwPair(t)
	mw, _ := b.pd.AllocMW(MWType2)
	bi := MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 1 << 16, Access: AccessRemoteWrite | AccessRemoteRead | AccessZeroBased}
	key := bind2(t, b, mw, bi)
	wcs := make([]WC, 1)
	run := func(qp *QP, cq *CQ, wr []SendWR) {
		if _, err := qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		for cq.Poll(wcs) == 0 {
			runtime.Gosched()
		}
		if wcs[0].Status != WCSuccess {
			t.Fatalf("%+v", wcs[0])
		}
	}
	wr := []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 16384), RemoteAddr: 0, RKey: key}}
	rd := []SendWR{{Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 16384), RemoteAddr: 0, RKey: key}}
	for range 10 {
		run(a.qp, a.scq, wr)
		run(a.qp, a.scq, rd)
	}
	if n := allocsPerRun(50, func() { run(a.qp, a.scq, wr); run(a.qp, a.scq, rd) }); n != 0 {
		t.Errorf("%.2f allocations per WRITE+READ through a window, want 0", n)
	}
	inv := []SendWR{{Opcode: WRLocalInv, Flags: SendSignaled}}
	bind := []SendWR{{Opcode: WRBindMW, Flags: SendSignaled, MW: mw, BindInfo: bi}}
	cycle := func() {
		inv[0].ImmData = mw.RKey()
		run(b.qp, b.scq, inv)
		bind[0].RKey = IncRKey(mw.RKey())
		run(b.qp, b.scq, bind)
	}
	for range 10 {
		cycle()
	}
	if n := allocsPerRun(50, cycle); n != 0 {
		t.Errorf("%.2f allocations per LOCAL_INV+BIND_MW, want 0", n)
	}
}

// TestMWType1FailedBindKeepsKey: ibv_bind_mw updates the key at post time;
// a bind that fails leaves the old key (and binding) in force.
func TestMWType1FailedBindKeepsKey(t *testing.T) {
	a, b, mr := mwPair(t)
	mw, _ := b.pd.AllocMW(MWType1)
	k1, err := b.qp.BindMW(mw, MWBind{BindInfo: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite}})
	if err != nil || mw.RKey() != k1 {
		t.Fatalf("bind: key %#x, RKey %#x, %v", k1, mw.RKey(), err)
	}
	k2, err := b.qp.BindMW(mw, MWBind{Flags: SendSignaled, BindInfo: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 1 << 20, Access: AccessRemoteWrite}})
	if err != nil {
		t.Fatal(err)
	}
	wantWC(t, b.scq, WCMWBindErr, WCBindMW)
	if k2 == k1 || mw.RKey() != k1 || !mw.Bound() {
		t.Fatalf("after a failed bind: RKey %#x (old %#x, failed %#x), bound %v", mw.RKey(), k1, k2, mw.Bound())
	}
	// (The failed bind moved b's QP to ERR, so no traffic checks here.)
	_ = a
}

// TestMWAccessBits: the window's access, not the MR's, governs remote
// operations through it.
func TestMWAccessBits(t *testing.T) {
	a, b, mr := mwPair(t)
	mw, _ := b.pd.AllocMW(MWType1)
	key, err := b.qp.BindMW(mw, MWBind{BindInfo: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteRead}})
	if err != nil {
		t.Fatal(err)
	}
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 64), RemoteAddr: mr.Addr(), RKey: key})
	wantWC(t, a.scq, WCSuccess, WCRDMARead)
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 64), RemoteAddr: mr.Addr(), RKey: key})
	wantWC(t, a.scq, WCRemAccessErr, WCRDMAWrite)
}

// TestMWOnUC: a type 2 window bound on a UC QP takes RDMA WRITEs.
func TestMWOnUC(t *testing.T) {
	a, b := newPair(t, pairOpts{typ: QPTypeUC, bufSize: 1 << 14})
	buf := make([]byte, 1<<14)
	mr, err := b.pd.RegMR(buf, mwAccess)
	if err != nil {
		t.Fatal(err)
	}
	mw, _ := b.pd.AllocMW(MWType2)
	key := bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr() + 100, Length: 4000, Access: AccessRemoteWrite | AccessZeroBased})
	fill(a.buf[:3000], 4)
	postRecv(t, b, 1, 0, 16)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGList: sge(a, 0, 3000), RemoteAddr: 0, RKey: key})
	wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
	wantWC(t, b.rcq, WCSuccess, WCRecvRDMAWithImm)
	mustEqual(t, buf[100:3100], a.buf[:3000])
}

// TestMWBindRangeAtMREnd: a window may end exactly at its MR's end, and
// the last bytes are readable through it; one byte more and the bind
// fails with MW_BIND_ERR (C10-75), the QP in ERR. Type 1 (ibv_bind_mw,
// VA-based only: o10-36.2.2) and type 2 (IBV_WR_BIND_MW), VA-based and
// zero-based. Remote access checks the MR's range again behind the
// window's.
func TestMWBindRangeAtMREnd(t *testing.T) {
	for _, c := range []struct {
		name      string
		typ       MWType
		zeroBased bool
	}{
		{"type 1", MWType1, false},
		{"type 2", MWType2, false},
		{"type 2 zero-based", MWType2, true},
	} {
		for _, past := range []uint64{0, 1} {
			name := c.name + "/ends at the MR's end"
			if past > 0 {
				name = c.name + "/one byte past the MR's end"
			}
			t.Run(name, func(t *testing.T) {
				a, b, mr := mwPair(t)
				fill(mr.Bytes(), 11)
				const off = 4096
				bi := MWBindInfo{MR: mr, Addr: mr.Addr() + off, Length: uint64(mr.Len()) - off + past, Access: AccessRemoteRead}
				if c.zeroBased {
					bi.Access |= AccessZeroBased
				}
				mw, err := b.pd.AllocMW(c.typ)
				if err != nil {
					t.Fatal(err)
				}
				key := IncRKey(mw.RKey())
				if c.typ == MWType1 {
					if key, err = b.qp.BindMW(mw, MWBind{WRID: 7, Flags: SendSignaled, BindInfo: bi}); err != nil {
						t.Fatal(err)
					}
				} else {
					post(t, b.qp, SendWR{WRID: 7, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, RKey: key, BindInfo: bi})
				}
				if past > 0 {
					wantWC(t, b.scq, WCMWBindErr, WCBindMW)
					if st := b.qp.State(); st != QPStateErr || mw.Bound() {
						t.Fatalf("after a bind past the MR: QP in %v, window bound %v; want ERR, unbound", st, mw.Bound())
					}
					return
				}
				wantWC(t, b.scq, WCSuccess, WCBindMW)
				// The window's last 8 bytes.
				ra := bi.Addr + bi.Length - 8
				if c.zeroBased {
					ra = bi.Length - 8
				}
				post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 8), RemoteAddr: ra, RKey: key})
				wantWC(t, a.scq, WCSuccess, WCRDMARead)
				mustEqual(t, a.buf[:8], mr.Bytes()[mr.Len()-8:])
				// Behind the window's range check, acquire checks the
				// MR's: a window one byte longer (only a faulty bind makes
				// one) has its new last 8 bytes refused.
				mw.mu.Lock()
				mw.length++
				mw.mu.Unlock()
				if m, _ := mw.acquire(b.qp, key, ra+1, 8, AccessRemoteRead); m != nil {
					m.release()
					t.Fatal("acquire took 8 bytes ending one byte past the MR")
				}
			})
		}
	}
}
