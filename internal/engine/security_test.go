package engine

import (
	"bytes"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
)

// TestRemoteAccessErrors checks the responder error table (§5, §7): the
// requester sees the specified status, both QPs end in ERR, and no byte
// outside the target MR changes.
func TestRemoteAccessErrors(t *testing.T) {
	type tc struct {
		name   string
		op     WROpcode
		setup  func(a, b *side) (addr uint64, rkey uint32)
		status WCStatus
	}
	cases := []tc{
		{"wrong rkey", WRRDMAWrite, func(a, b *side) (uint64, uint32) { return b.mr.Addr(), b.mr.RKey() ^ 0x55 }, WCRemAccessErr},
		{"out of bounds", WRRDMAWrite, func(a, b *side) (uint64, uint32) { return b.mr.Addr() + uint64(b.mr.Len()) - 10, b.mr.RKey() }, WCRemAccessErr},
		{"below start", WRRDMARead, func(a, b *side) (uint64, uint32) { return b.mr.Addr() - 1, b.mr.RKey() }, WCRemAccessErr},
		{"missing access bit", WRRDMARead, func(a, b *side) (uint64, uint32) {
			mr, _ := b.pd.RegMR(b.buf[1024:2048], AccessLocalWrite|AccessRemoteWrite)
			return mr.Addr(), mr.RKey()
		}, WCRemAccessErr},
		{"other PD", WRRDMAWrite, func(a, b *side) (uint64, uint32) {
			pd, _ := b.dev.AllocPD()
			mr, _ := pd.RegMR(b.buf[1024:2048], AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
			return mr.Addr(), mr.RKey()
		}, WCRemAccessErr},
		{"deregistered", WRRDMAWrite, func(a, b *side) (uint64, uint32) {
			mr, _ := b.pd.RegMR(b.buf[1024:2048], AccessLocalWrite|AccessRemoteWrite)
			addr, key := mr.Addr(), mr.RKey()
			mr.Deregister()
			return addr, key
		}, WCRemAccessErr},
		{"invalidated", WRRDMAWrite, func(a, b *side) (uint64, uint32) {
			mr, _ := b.pd.RegMR(b.buf[1024:2048], AccessLocalWrite|AccessRemoteWrite)
			mr.Invalidate()
			return mr.Addr(), mr.RKey()
		}, WCRemAccessErr},
		{"atomic no access", WRAtomicFetchAndAdd, func(a, b *side) (uint64, uint32) {
			mr, _ := b.pd.RegMR(b.buf[1024:2048], AccessLocalWrite|AccessRemoteWrite)
			return mr.Addr(), mr.RKey()
		}, WCRemAccessErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newPair(t, pairOpts{bufSize: 64 << 10})
			// Canary: b's whole buffer holds a pattern; the target MRs live inside it.
			canary := make([]byte, len(b.buf))
			fill(canary, 0xA5)
			copy(b.buf, canary)
			addr, key := c.setup(a, b)
			postRecv(t, b, 1, 0, 16)
			wr := SendWR{WRID: 9, Opcode: c.op, Flags: SendSignaled, SGList: sge(a, 0, 3000), RemoteAddr: addr, RKey: key}
			if c.op == WRAtomicFetchAndAdd {
				wr.SGList = sge(a, 0, 8)
			}
			post(t, a.qp, wr)
			wc := waitWC(t, a.scq, 1, 5*time.Second)
			if wc[0].Status != c.status {
				t.Fatalf("status %v, want %v", wc[0].Status, c.status)
			}
			waitState(t, a.qp, QPStateErr)
			waitState(t, b.qp, QPStateErr)
			rwc := waitWC(t, b.rcq, 1, 5*time.Second)
			if rwc[0].Status != WCWRFlushErr {
				t.Fatalf("receive WQE: %v, want flushed", rwc[0].Status)
			}
			if !bytes.Equal(b.buf, canary) {
				t.Fatal("bytes changed in the target buffer")
			}
		})
	}
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
	// The responder's QP lacks REMOTE_WRITE: NAK 0x61 -> REM_INV_REQ_ERR (§7).
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
// receive WQE, both QPs in ERR (§5).
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
// receive completes with REM_INV_REQ_ERR and the responder QP errors (§5).
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
