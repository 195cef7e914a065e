package verbs

import (
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestCloseReleasesGoroutines(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	func() {
		o := pairOpts{}
		ea, eb := newPipePair(t, &o)
		defaults(&o)
		a, b := newSide(t, ea, o), newSide(t, eb, o)
		connect(t, a, b, o)
		connect(t, b, a, o)
		postRecv(t, b, 1, 0, 100)
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
		waitWC(t, a.scq, 1, 5*time.Second)
		// Leave work outstanding (RNR-waiting send) to check timers are stopped.
		post(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
		time.Sleep(5 * time.Millisecond)
		a.dev.Close()
		b.dev.Close()
	}()
	goleak.VerifyNone(t, opt)
}

// steadyLoop does one SEND + receive round trip and polls both CQs.
func steadyLoop(t testing.TB, a, b *side, wr []SendWR, rwr []RecvWR, wcs []WC) {
	if _, err := b.qp.PostRecv(rwr); err != nil {
		t.Fatal(err)
	}
	if _, err := a.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	for got := 0; got < 2; {
		n := a.scq.Poll(wcs[:1])
		n += b.rcq.Poll(wcs[1:2])
		got += n
		if n == 0 {
			runtime.Gosched()
		}
	}
}

// allocsPerRun is testing.AllocsPerRun pinned against noise: the count is
// process-wide (a straggling goroutine of an earlier test, a retransmission
// under heavy load), so it takes the least of three measurements. An
// allocation on the measured path shows in every one of them.
func allocsPerRun(runs int, f func()) float64 {
	n := testing.AllocsPerRun(runs, f)
	for i := 0; i < 2 && n != 0; i++ {
		n = min(n, testing.AllocsPerRun(runs, f))
	}
	return n
}

func TestSteadyStateAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts need a run without -race or -short")
	}
	a, b := newPair(t, pairOpts{})
	wr := []SendWR{{Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 64)}}
	rwr := []RecvWR{{SGList: sge(b, 0, 64)}}
	wcs := make([]WC, 2)
	for i := 0; i < 100; i++ {
		steadyLoop(t, a, b, wr, rwr, wcs)
	}
	allocs := allocsPerRun(200, func() { steadyLoop(t, a, b, wr, rwr, wcs) })
	t.Logf("%.2f allocations per SEND round trip (both devices, link included)", allocs)
	if allocs != 0 {
		t.Errorf("%.2f allocations per SEND round trip, want 0", allocs)
	}
	wr = []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 65536), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
	for i := 0; i < 10; i++ {
		a.qp.PostSend(wr)
		for a.scq.Poll(wcs[:1]) == 0 {
			runtime.Gosched()
		}
	}
	allocs = allocsPerRun(50, func() {
		a.qp.PostSend(wr)
		for a.scq.Poll(wcs[:1]) == 0 {
			runtime.Gosched()
		}
	})
	t.Logf("%.2f allocations per 64 KiB RDMA WRITE", allocs)
	if allocs != 0 {
		t.Errorf("%.2f allocations per 64 KiB WRITE, want 0", allocs)
	}
}

func TestSteadyStateAllocsUCUD(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts need a run without -race or -short")
	}
	for _, typ := range []QPType{QPTypeUC, QPTypeUD} {
		var a, b *side
		var ah *AH
		if typ == QPTypeUD {
			a, b, ah = udPair(t, false)
		} else {
			a, b = newPair(t, pairOpts{typ: typ})
		}
		wr := []SendWR{{Opcode: WRSendWithImm, Flags: SendSignaled, SGList: sge(a, 0, 512), AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111}}
		rwr := []RecvWR{{SGList: sge(b, 0, 1024)}}
		wcs := make([]WC, 2)
		for i := 0; i < 100; i++ {
			steadyLoop(t, a, b, wr, rwr, wcs)
		}
		allocs := allocsPerRun(200, func() { steadyLoop(t, a, b, wr, rwr, wcs) })
		t.Logf("%v: %.2f allocations per SEND", typ, allocs)
		if allocs != 0 {
			t.Errorf("%v: %.2f allocations per SEND, want 0", typ, allocs)
		}
	}
}

// TestCompChannelQueueOnUse: a completion channel makes its event queue
// (1024 slots) only when first used: creating one is its struct alone.
// Events still arrive once the queue exists.
func TestCompChannelQueueOnUse(t *testing.T) {
	o := pairOpts{}
	ea, _ := newPipePair(t, &o)
	defaults(&o)
	a := newSide(t, ea, o)
	var ch *CompChannel
	if n := testing.AllocsPerRun(100, func() { ch = a.dev.CreateCompChannel() }); n != 1 {
		t.Errorf("CreateCompChannel: %v allocations, want 1 (the struct)", n)
	}
	if ch.ch != nil {
		t.Fatal("an unused channel has its queue")
	}
	cq, err := a.dev.CreateCQ(4, nil, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	cq.push(&WC{WRID: 7}, false, false)
	select {
	case got := <-ch.C():
		if got != cq {
			t.Fatalf("event for %p, want %p", got, cq)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no completion event")
	}
}

// TestQPStagingOnUse: a QP makes its transmit staging batch (a link.Packet
// and a zcRef per slot, 6 KiB on a 32-datagram link) at its first packet,
// so that the QPs a connection manager sets up and tears down, and QPs
// that only receive, do not carry it. It sends once made.
func TestQPStagingOnUse(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	if a.qp.txb != nil || a.qp.txref != nil || b.qp.txb != nil {
		t.Fatal("a QP that never sent has its staging batch")
	}
	postRecv(t, b, 1, 0, 64)
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 64)})
	if wc := waitWC(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("send: %v", wc.Status)
	}
	if wc := waitWC(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.ByteLen != 64 {
		t.Fatalf("receive: %v, %d bytes", wc.Status, wc.ByteLen)
	}
	a.qp.mu.Lock()
	made := a.qp.txb != nil
	a.qp.mu.Unlock()
	if !made {
		t.Fatal("a QP that sent has no staging batch")
	}
}
