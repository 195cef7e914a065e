package rping

import (
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// liveQP opens a pipe device with a CQ and an RC QP in INIT for the
// keepalive tests.
func liveQP(t *testing.T) (*verbs.CQ, *verbs.QP, *verbs.PD) {
	t.Helper()
	da, db, err := verbs.OpenPipe(pipe.Config{}, pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	pd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := da.CreateCQ(16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	return cq, qp, pd
}

// TestProbeReadsPeerUnderLock: the keepalive probe (main goroutine) reads
// the peer's advertisement while the CQ goroutine's onRecv rewrites it;
// under -race an unlocked read is reported.
func TestProbeReadsPeerUnderLock(t *testing.T) {
	_, qp, _ := liveQP(t)
	cb := newRCB(&options{server: 1, size: 64}, io.Discard, io.Discard, &sync.Mutex{})
	cb.qp = qp // INIT: the probe's post fails, which clears probing
	info := oob.RDMAInfo{Addr: 0x1000, RKey: 0x42, Size: 64}
	cb.recvBuf = info.Append(nil)
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			cb.onRecv()
			runtime.Gosched()
		}
	}()
	for range 20000 {
		cb.probe()
		runtime.Gosched()
	}
	stop.Store(true)
	wg.Wait()
}

// TestPollProbeHandsBack: in krping's polling modes the keepalive polls
// the CQ for its probe; a test completion it finds there is the test's,
// returned by the test's next poll, not dropped.
func TestPollProbeHandsBack(t *testing.T) {
	cq, qp, pd := liveQP(t)
	buf := make([]byte, 16)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: []verbs.SGE{{Addr: mr.Addr(), Length: 16, LKey: mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err) // flushes the receive: a completion the test owns
	}
	cb := newRCB(&options{server: 1, size: 64}, io.Discard, io.Discard, &sync.Mutex{})
	cb.qp, cb.cq, cb.polling = qp, cq, true
	var wc [1]verbs.WC
	for end := time.Now().Add(10 * time.Second); ; {
		cb.pollProbe()
		if len(cb.held) > 0 || time.Now().After(end) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if n := cb.pollCQ(wc[:]); n != 1 || wc[0].WRID != 7 || wc[0].Status != verbs.WCWRFlushErr {
		t.Fatalf("the test's poll after the keepalive's: n=%d wc=%+v, want the flushed receive 7", n, wc[0])
	}
	if n := cb.pollCQ(wc[:]); n != 0 {
		t.Errorf("a second poll found %d completions: %+v", n, wc[0])
	}
}
