package verbs_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/softroce/softroce/verbs"
)

// TestObjectIdentity checks that the objects verbs hands back (from
// accessors, queries, CQ events and async events) are the very pointers the
// caller holds, and that %T names them as package verbs' own types.
func TestObjectIdentity(t *testing.T) {
	da, db := pipeDevs(t)
	a, b := connected(t, da, db, verbs.QPTypeRC)
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"PD.Device", a.pd.Device(), da},
		{"QP.Device", a.qp.Device(), da},
		{"MR.PD", a.mr.PD(), a.pd},
	} {
		if c.got != c.want {
			t.Errorf("%s = %p, want %p", c.what, c.got, c.want)
		}
	}
	if _, ia := a.qp.Query(); ia.SendCQ != a.cq || ia.RecvCQ != a.cq || ia.SRQ != nil {
		t.Errorf("QP.Query init attrs: SendCQ %p RecvCQ %p SRQ %p, want %p %p nil", ia.SendCQ, ia.RecvCQ, ia.SRQ, a.cq, a.cq)
	}
	for _, c := range []struct{ got, want string }{
		{fmt.Sprintf("%T", a.qp), "*verbs.QP"},
		{fmt.Sprintf("%T", da), "*verbs.Device"},
		{fmt.Sprintf("%T", a.mr), "*verbs.MR"},
	} {
		if c.got != c.want {
			t.Errorf("%%T = %s, want %s", c.got, c.want)
		}
	}

	// An async event names the QP the caller holds, through AsyncEvents and
	// GetAsyncEvent.
	for i, get := range []func(context.Context) (verbs.AsyncEvent, error){
		func(ctx context.Context) (verbs.AsyncEvent, error) {
			select {
			case ev := <-da.AsyncEvents():
				return ev, nil
			case <-ctx.Done():
				return verbs.AsyncEvent{}, ctx.Err()
			}
		},
		da.GetAsyncEvent,
	} {
		qp := a.qp
		if i == 1 {
			qp = newEnd(t, da, verbs.QPTypeRC, nil, a.pd).qp
			toRTS(t, &end{dev: da, qp: qp}, b)
		}
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateSQD}, verbs.QPAttrState|verbs.QPAttrEnSQDAsyncNotify); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for {
			ev, err := get(ctx)
			if err != nil {
				t.Fatalf("no SQ drained event: %v", err)
			}
			if ev.Type == verbs.EventSQDrained {
				if ev.QP != qp {
					t.Errorf("event %d: SQ drained QP %p, want %p", i, ev.QP, qp)
				}
				break
			}
		}
		cancel()
	}

	// A CQ event names the CQ the caller armed, through C and GetCQEvent.
	ch := db.CreateCompChannel()
	cq := must[*verbs.CQ](t)(db.CreateCQ(16, "ctx", ch))
	if cq.Context() != "ctx" {
		t.Errorf("CQ.Context = %v, want ctx", cq.Context())
	}
	qp := must[*verbs.QP](t)(b.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}))
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QKey: 1},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
		t.Fatal(err)
	}
	// Moving the QP to ERR with a posted receive flushes it: a completion.
	if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: b.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	cq.ReqNotify(false)
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ch.C():
		if got != cq {
			t.Errorf("CompChannel.C gave %p, want %p", got, cq)
		}
		got.AckEvents(1)
	case <-time.After(10 * time.Second):
		t.Fatal("no CQ event")
	}
	if wc := poll(t, cq, 1); wc[0].WRID != 7 || wc[0].Status != verbs.WCWRFlushErr {
		t.Errorf("flushed receive: %+v", wc[0])
	}
	cq.ReqNotify(false)
	if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: 8, SGList: b.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := ch.GetCQEvent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != cq {
		t.Errorf("GetCQEvent gave %p, want %p", got, cq)
	}
	got.AckEvents(1)
}

// TestPostPollAllocs pins the hot path as a program outside the package
// sees it: a SEND round trip (PostRecv, PostSend, Poll on both sides)
// through the exported API, over OpenPipe's devices, allocates nothing.
func TestPostPollAllocs(t *testing.T) {
	if testing.Short() || verbs.RaceEnabled {
		t.Skip("allocation counts need a run without -race or -short")
	}
	da, db := pipeDevs(t)
	a, b := connected(t, da, db, verbs.QPTypeRC)
	wr := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 64)}}
	rwr := []verbs.RecvWR{{SGList: b.sge(0, 64)}}
	wcs := make([]verbs.WC, 2)
	deadline := time.Now().Add(time.Minute)
	loop := func() {
		if _, err := b.qp.PostRecv(rwr); err != nil {
			t.Fatal(err)
		}
		if _, err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 2; {
			na := a.cq.Poll(wcs[:1])
			nb := b.cq.Poll(wcs[1:2])
			if na == 1 && wcs[0].Status != verbs.WCSuccess || nb == 1 && wcs[1].Status != verbs.WCSuccess {
				t.Fatalf("completions %+v", wcs)
			}
			n := na + nb
			got += n
			if n == 0 {
				if time.Now().After(deadline) {
					t.Fatal("round trip did not complete")
				}
				runtime.Gosched()
			}
		}
	}
	for range 100 {
		loop()
	}
	// The least of three runs: the count is process-wide, and an
	// allocation on the measured path shows in every run.
	allocs := testing.AllocsPerRun(200, loop)
	for i := 0; i < 2 && allocs != 0; i++ {
		allocs = min(allocs, testing.AllocsPerRun(200, loop))
	}
	t.Logf("%.2f allocations per SEND round trip through verbs", allocs)
	if allocs != 0 {
		t.Errorf("%.2f allocations per SEND round trip through verbs, want 0", allocs)
	}
}
