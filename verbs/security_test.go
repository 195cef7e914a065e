package verbs

import (
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// TestRemoteAccessErrors checks the responder's access checks (docs/protocol.md §5.7, §7.1), one
// check per case: every operation is inside the target region (the
// "control" case shows it succeeds there), so the case fails only through
// the check it names. The requester sees REM_ACCESS_ERR, both QPs end in
// ERR, and no byte of either buffer changes.
func TestRemoteAccessErrors(t *testing.T) {
	// The target: b.buf[1024:2048], registered by the case; the operation
	// covers its bytes 64..127 (atomics: 64..71).
	const base, off, n = 1024, 64, 64
	reg := func(t *testing.T, pd *PD, b *side, access Access) *MR {
		t.Helper()
		mr, err := pd.RegMR(b.buf[base:base+1024], access)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	type tc struct {
		name  string
		setup func(t *testing.T, b *side, need Access) (addr uint64, rkey uint32)
		ok    bool
	}
	cases := []tc{
		{"control", func(t *testing.T, b *side, need Access) (uint64, uint32) {
			mr := reg(t, b.pd, b, allRemote)
			return mr.Addr() + off, mr.RKey()
		}, true},
		{"wrong key8", func(t *testing.T, b *side, need Access) (uint64, uint32) {
			mr := reg(t, b.pd, b, allRemote)
			return mr.Addr() + off, IncRKey(mr.RKey())
		}, false},
		{"other PD", func(t *testing.T, b *side, need Access) (uint64, uint32) {
			pd, err := b.dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			mr := reg(t, pd, b, allRemote)
			return mr.Addr() + off, mr.RKey()
		}, false},
		{"moved to other PD", func(t *testing.T, b *side, need Access) (uint64, uint32) {
			pd, err := b.dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			mr := reg(t, b.pd, b, allRemote)
			if err := mr.Rereg(ReregChangePD, pd, nil, 0); err != nil {
				t.Fatal(err)
			}
			return mr.Addr() + off, mr.RKey()
		}, false},
		{"missing access bit", func(t *testing.T, b *side, need Access) (uint64, uint32) {
			mr := reg(t, b.pd, b, allRemote&^need)
			return mr.Addr() + off, mr.RKey()
		}, false},
		{"access bit removed by rereg", func(t *testing.T, b *side, need Access) (uint64, uint32) {
			mr := reg(t, b.pd, b, allRemote)
			if err := mr.Rereg(ReregChangeAccess, nil, nil, allRemote&^need); err != nil {
				t.Fatal(err)
			}
			return mr.Addr() + off, mr.RKey()
		}, false},
		{"deregistered", func(t *testing.T, b *side, need Access) (uint64, uint32) {
			mr := reg(t, b.pd, b, allRemote)
			addr, key := mr.Addr()+off, mr.RKey()
			if err := mr.Deregister(); err != nil {
				t.Fatal(err)
			}
			return addr, key
		}, false},
		{"invalidated", func(t *testing.T, b *side, need Access) (uint64, uint32) {
			mr := reg(t, b.pd, b, allRemote)
			mr.Invalidate()
			return mr.Addr() + off, mr.RKey()
		}, false},
		{"old key after revalidation", func(t *testing.T, b *side, need Access) (uint64, uint32) {
			mr := reg(t, b.pd, b, allRemote)
			key := mr.RKey()
			mr.Invalidate()
			mr.Revalidate()
			return mr.Addr() + off, key
		}, false},
	}
	for _, op := range remoteOps {
		for _, c := range cases {
			t.Run(op.op.String()+"/"+c.name, func(t *testing.T) {
				a, b := remotePair(t)
				addr, key := c.setup(t, b, op.need)
				want := WCRemAccessErr
				if c.ok {
					want = WCSuccess
				}
				checkRemote(t, a, b, op.op, addr, key, n, base+off, want)
			})
		}
	}
}

// TestRemoteAccessErrorsMW checks the window's own access checks the same
// way: each case is inside the window and fails only through its check.
func TestRemoteAccessErrorsMW(t *testing.T) {
	const base, off, n = 1024, 64, 64
	const winAccess = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	// bindOn binds a window of pd over b.buf[base:base+1024] through qp.
	bind1 := func(t *testing.T, qp *QP, b *side, pd *PD, access Access) (*MW, *MR, uint64, uint32) {
		t.Helper()
		mr, err := pd.RegMR(b.buf[base:base+1024], allRemote)
		if err != nil {
			t.Fatal(err)
		}
		mw, err := pd.AllocMW(MWType1)
		if err != nil {
			t.Fatal(err)
		}
		key, err := qp.BindMW(mw, MWBind{WRID: 3, Flags: SendSignaled, BindInfo: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 1024, Access: access}})
		if err != nil {
			t.Fatal(err)
		}
		wantWC(t, b.scq, WCSuccess, WCBindMW)
		return mw, mr, mr.Addr() + off, key
	}
	type tc struct {
		name  string
		setup func(t *testing.T, a, b *side, need Access) (addr uint64, rkey uint32)
		ok    bool
	}
	cases := []tc{
		{"control", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			_, _, addr, key := bind1(t, b.qp, b, b.pd, winAccess)
			return addr, key
		}, true},
		{"type 2 control", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			mr, err := b.pd.RegMR(b.buf[base:base+1024], allRemote)
			if err != nil {
				t.Fatal(err)
			}
			mw, _ := b.pd.AllocMW(MWType2)
			key := bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 1024, Access: winAccess})
			return mr.Addr() + off, key
		}, true},
		{"wrong key8", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			_, _, addr, key := bind1(t, b.qp, b, b.pd, winAccess)
			return addr, IncRKey(key)
		}, false},
		{"old key after rebind", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			mw, mr, addr, key := bind1(t, b.qp, b, b.pd, winAccess)
			if _, err := b.qp.BindMW(mw, MWBind{Flags: SendSignaled, BindInfo: MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 1024, Access: winAccess}}); err != nil {
				t.Fatal(err)
			}
			wantWC(t, b.scq, WCSuccess, WCBindMW)
			return addr, key
		}, false},
		{"missing window access bit", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			_, _, addr, key := bind1(t, b.qp, b, b.pd, winAccess&^need)
			return addr, key
		}, false},
		{"window of other PD", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			pd, err := b.dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			other := extraQP(t, a, b, pd)
			_, _, addr, key := bind1(t, other.qp, b, pd, winAccess)
			return addr, key
		}, false},
		{"type 2 bound on other QP", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			other := extraQP(t, a, b, b.pd)
			mr, err := b.pd.RegMR(b.buf[base:base+1024], allRemote)
			if err != nil {
				t.Fatal(err)
			}
			mw, _ := b.pd.AllocMW(MWType2)
			key := bind2(t, other, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 1024, Access: winAccess})
			return mr.Addr() + off, key
		}, false},
		{"type 2 invalidated", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			mr, err := b.pd.RegMR(b.buf[base:base+1024], allRemote)
			if err != nil {
				t.Fatal(err)
			}
			mw, _ := b.pd.AllocMW(MWType2)
			key := bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 1024, Access: winAccess})
			post(t, b.qp, SendWR{WRID: 8, Opcode: WRLocalInv, Flags: SendSignaled, ImmData: key})
			wantWC(t, b.scq, WCSuccess, WCLocalInv)
			return mr.Addr() + off, key
		}, false},
		{"type 1 unbound", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			mw, _, addr, _ := bind1(t, b.qp, b, b.pd, winAccess)
			key, err := b.qp.BindMW(mw, MWBind{Flags: SendSignaled})
			if err != nil {
				t.Fatal(err)
			}
			wantWC(t, b.scq, WCSuccess, WCBindMW)
			return addr, key
		}, false},
		{"deallocated", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			mw, _, addr, key := bind1(t, b.qp, b, b.pd, winAccess)
			if err := mw.Dealloc(); err != nil {
				t.Fatal(err)
			}
			return addr, key
		}, false},
		{"MR under the window invalidated", func(t *testing.T, a, b *side, need Access) (uint64, uint32) {
			_, mr, addr, key := bind1(t, b.qp, b, b.pd, winAccess)
			mr.Invalidate()
			return addr, key
		}, false},
	}
	for _, op := range remoteOps {
		if op.op == WRFlush {
			continue // FLUSH names MRs only
		}
		for _, c := range cases {
			t.Run(op.op.String()+"/"+c.name, func(t *testing.T) {
				a, b := remotePair(t)
				addr, key := c.setup(t, a, b, op.need)
				want := WCRemAccessErr
				if c.ok {
					want = WCSuccess
				}
				checkRemote(t, a, b, op.op, addr, key, n, base+off, want)
			})
		}
	}
}

// extraQP creates a second RC QP on b's device in pd, connected toward a's
// QP (a does not answer it: it is used only to bind windows).
func extraQP(t *testing.T, a, b *side, pd *PD) *side {
	t.Helper()
	qp, err := pd.CreateQP(&QPInitAttr{SendCQ: b.scq, RecvCQ: b.rcq, QPType: QPTypeRC, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	other := &side{dev: b.dev, pd: pd, scq: b.scq, rcq: b.rcq, qp: qp, port: b.port}
	peer := &side{dev: a.dev, qp: a.qp, port: a.port}
	connect(t, other, peer, pairOpts{typ: QPTypeRC, pmtu: wire.MTU1024, timeout: 10, retry: 7, rnrRetry: 7, minRNR: 1, access: mwAccess &^ AccessMWBind})
	return other
}

func waitState(t testing.TB, qp *QP, s QPState) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for qp.State() != s {
		if time.Now().After(deadline) {
			t.Fatalf("QP %d in %v, want %v", qp.QPN(), qp.State(), s)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestQPAccessFlagNAK(t *testing.T) {
	// The responder's QP lacks REMOTE_WRITE: NAK 0x61 -> REM_INV_REQ_ERR (docs/protocol.md §7.2).
	o := pairOpts{access: AccessLocalWrite | AccessRemoteRead}
	a, b := newPair(t, o)
	// Give the MR remote write so only the QP flag is missing.
	mr, err := b.pd.RegMR(b.buf, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 10), RemoteAddr: mr.Addr(), RKey: mr.RKey()})
	wc := waitWC(t, a.scq, 1, 5*time.Second)
	if wc[0].Status != WCRemInvReqErr {
		t.Fatalf("status %v", wc[0].Status)
	}
	waitState(t, b.qp, QPStateErr)
}

func TestRecvTooSmall(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	postRecv(t, b, 5, 0, 10)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
	wc := waitWC(t, a.scq, 1, 5*time.Second)
	if wc[0].Status != WCRemInvReqErr {
		t.Fatalf("sender %v", wc[0].Status)
	}
	wc = waitWC(t, b.rcq, 1, 5*time.Second)
	if wc[0].Status != WCRemInvReqErr || wc[0].WRID != 5 {
		t.Fatalf("receiver %+v", wc[0])
	}
}

func TestRetryExceeded(t *testing.T) {
	drop := func(p *link.Packet) pipe.Verdict { return pipe.Drop }
	a, _ := newPair(t, pairOpts{filterA: drop, timeout: 8, retry: 2, exact: true, rnrRetry: 7})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, SGList: sge(a, 0, 100)})
	wc := waitWC(t, a.scq, 2, 5*time.Second)
	if wc[0].Status != WCRetryExcErr || wc[1].Status != WCWRFlushErr || wc[1].WRID != 2 {
		t.Fatalf("%+v", wc)
	}
	if got := a.dev.Stats().RetryTimeouts.Load(); got != 3 {
		t.Errorf("%d timeouts, want 3 (retry_cnt 2)", got)
	}
	if a.qp.State() != QPStateErr {
		t.Fatal("QP not in ERR")
	}
}

func TestRNR(t *testing.T) {
	a, b := newPair(t, pairOpts{minRNR: 1})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
	deadline := time.Now().Add(5 * time.Second)
	for a.dev.Stats().RNRNAKsRcvd.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAKs")
		}
		time.Sleep(time.Millisecond)
	}
	postRecv(t, b, 1, 0, 100)
	wc := waitWC(t, a.scq, 1, 5*time.Second)
	if wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	waitWC(t, b.rcq, 1, time.Second)
}

func TestRNRRetryExceeded(t *testing.T) {
	a, _ := newPair(t, pairOpts{minRNR: 1, rnrRetry: 3, retry: 7, timeout: 10, exact: true})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
	wc := waitWC(t, a.scq, 1, 5*time.Second)
	if wc[0].Status != WCRNRRetryExcErr {
		t.Fatalf("%+v", wc[0])
	}
	if n := a.dev.Stats().RNRNAKsRcvd.Load(); n != 4 {
		t.Errorf("%d RNR NAKs, want 4 (rnr_retry 3)", n)
	}
}

// TestMalformedRecvWQE: the receive buffer's MR is gone when the SEND
// lands: NAK 0x63 -> REM_OP_ERR at the requester, LOC_QP_OP_ERR for the
// receive WQE, both QPs in ERR (docs/protocol.md §5.7).
func TestMalformedRecvWQE(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	mr, err := b.pd.RegMR(make([]byte, 4096), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.qp.PostRecv([]RecvWR{{WRID: 4, SGList: []SGE{{Addr: mr.Addr(), Length: 4096, LKey: mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	mr.Deregister()
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
	if wc := waitWC(t, a.scq, 1, 5*time.Second); wc[0].Status != WCRemOpErr {
		t.Fatalf("requester %+v", wc[0])
	}
	if wc := waitWC(t, b.rcq, 1, 5*time.Second); wc[0].Status != WCLocQPOpErr || wc[0].WRID != 4 {
		t.Fatalf("responder %+v", wc[0])
	}
	waitState(t, b.qp, QPStateErr)
	waitState(t, a.qp, QPStateErr)
}

// TestSendWithInvBadKey: SEND_WITH_INV naming a bad R_Key is ACKed, but the
// receive completes with REM_INV_REQ_ERR and the responder QP errors (docs/protocol.md §5.7, §7.3).
func TestSendWithInvBadKey(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	postRecv(t, b, 3, 0, 100)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSendWithInv, ImmData: 0xbad00, Flags: SendSignaled, SGList: sge(a, 0, 10)})
	if wc := waitWC(t, a.scq, 1, 5*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("requester %+v", wc[0])
	}
	if wc := waitWC(t, b.rcq, 1, 5*time.Second); wc[0].Status != WCRemInvReqErr {
		t.Fatalf("responder %+v", wc[0])
	}
	waitState(t, b.qp, QPStateErr)
}
