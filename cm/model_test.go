package cm

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

func expect(t *testing.T, ch *EventChannel, want EventType) *Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := ch.Get(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.Type != want {
		t.Fatalf("got %v (status %d), want %v", ev.Type, ev.Status, want)
	}
	return ev
}

func rcQP(t *testing.T, id *ID) *verbs.QP {
	t.Helper()
	cq, err := id.Device().CreateCQ(16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { id.DestroyQP(); cq.Destroy() })
	return qp
}

// TestModel drives the rdma_cm API directly: the event sequence of both
// sides, negotiated values, the PSN rule, an MRA for a slow accept, a
// disconnect from the passive side and TIMEWAIT_EXIT.
func TestModel(t *testing.T) {
	// A 400 ms MAD timeout against a 20 ms MRA delay: the MRA reaches the
	// client long before its REQ timer even on a loaded machine.
	cfg := testConfig()
	cfg.Timeout = 400 * time.Millisecond
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	sch, cch := NewEventChannel(), NewEventChannel()
	defer sch.Close()
	defer cch.Close()
	lid, _ := sch.CreateID("listener", mad.PortSpaceTCP)
	if err := lid.BindAddr(netip.AddrPortFrom(p.addrB(), 18515)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(4); err != nil {
		t.Fatal(err)
	}
	defer lid.Destroy()
	// A second listener on the same address and port is refused.
	if x, _ := sch.CreateID(nil, mad.PortSpaceTCP); x.BindAddr(netip.AddrPortFrom(p.addrB(), 18515)) != ErrAddrInUse {
		t.Error("double bind allowed")
	}
	cid, _ := cch.CreateID("client", mad.PortSpaceTCP)
	defer cid.Destroy()
	if err := cid.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.addrB(), 18515), time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, cch, EventAddrResolved)
	if cid.Device() != p.da {
		t.Fatalf("resolved to %v", cid.Device().Name())
	}
	cid.ResolveRoute(time.Second)
	expect(t, cch, EventRouteResolved)
	cqp := rcQP(t, cid)
	if err := cid.Connect(&ConnParam{PrivateData: []byte("req"), ResponderResources: 3, InitiatorDepth: 2, RetryCount: 6, RNRRetryCount: 5}); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, sch, EventConnectRequest)
	sid := ev.ID
	defer sid.Destroy()
	if ev.Listen != lid || sid.Listener() != lid || sid.RemoteAddr() != cid.LocalAddr() || sid.LocalAddr() != netip.AddrPortFrom(p.addrB(), 18515) {
		t.Errorf("request: listen %v, addrs %v %v", ev.Listen == lid, sid.RemoteAddr(), sid.LocalAddr())
	}
	want := ConnParam{ResponderResources: 2, InitiatorDepth: 3, RetryCount: 6, RNRRetryCount: 5, QPNum: cqp.QPN()}
	got := ev.Param
	got.PrivateData = nil
	if diff := cmp.Diff(want, got); diff != "" || !bytes.HasPrefix(ev.Param.PrivateData, []byte("req")) || len(ev.Param.PrivateData) != mad.MaxREQUserData {
		t.Errorf("CONNECT_REQUEST param (-want +got):\n%s", diff)
	}
	// Slow accept: the CM sends an MRA, the client waits.
	waitFor(t, 2*time.Second, "MRA", func() bool { return p.ab.Stats().MRAsSent.Load() == 1 })
	time.Sleep(500 * time.Millisecond) // > Timeout: the client would have retransmitted without the MRA (service timeout 17 ≈ 537 ms)
	sqp := rcQP(t, sid)
	if err := sid.Accept(&ConnParam{PrivateData: []byte("rep"), ResponderResources: 2, InitiatorDepth: 3, RNRRetryCount: 4}); err != nil {
		t.Fatal(err)
	}
	ev = expect(t, cch, EventEstablished)
	if !bytes.HasPrefix(ev.Param.PrivateData, []byte("rep")) || ev.Param.QPNum != sqp.QPN() || ev.Param.ResponderResources != 3 || ev.Param.InitiatorDepth != 2 {
		t.Errorf("ESTABLISHED param %+v", ev.Param)
	}
	expect(t, sch, EventEstablished)
	ca, _ := cqp.Query()
	sa, _ := sqp.Query()
	if ca.DestQPNum != sqp.QPN() || sa.DestQPNum != cqp.QPN() || ca.SQPSN != sa.RQPSN || sa.SQPSN != ca.RQPSN {
		t.Errorf("QP attrs: client %+v server %+v", ca, sa)
	}
	if ca.MaxRdAtomic != 2 || ca.MaxDestRdAtomic != 3 || sa.MaxRdAtomic != 3 || sa.MaxDestRdAtomic != 2 || ca.RNRRetry != 4 || sa.RNRRetry != 5 || ca.RetryCnt != 6 {
		t.Errorf("negotiated: client rd %d/%d rnr %d retry %d; server rd %d/%d rnr %d", ca.MaxRdAtomic, ca.MaxDestRdAtomic, ca.RNRRetry, ca.RetryCnt, sa.MaxRdAtomic, sa.MaxDestRdAtomic, sa.RNRRetry)
	}
	if p.aa.Stats().Retransmits.Load() != 0 {
		t.Errorf("client retransmitted %d times despite the MRA", p.aa.Stats().Retransmits.Load())
	}
	if err := sid.Disconnect(); err != nil {
		t.Fatal(err)
	}
	expect(t, cch, EventDisconnected)
	expect(t, sch, EventDisconnected)
	if cqp.State() != verbs.QPStateErr || sqp.State() != verbs.QPStateErr {
		t.Errorf("QPs after disconnect: %v %v", cqp.State(), sqp.State())
	}
	expect(t, cch, EventTimewaitExit)
	expect(t, sch, EventTimewaitExit)
}

// TestConnectResponse: an ID without a QP gets CONNECT_RESPONSE and
// completes with Establish; duplicates are answered with the same MAD.
func TestConnectResponse(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	sch, cch := NewEventChannel(), NewEventChannel()
	defer sch.Close()
	defer cch.Close()
	lid, _ := sch.CreateID(nil, mad.PortSpaceTCP)
	lid.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 4000))
	lid.Listen(0)
	defer lid.Destroy()
	cid, _ := cch.CreateID(nil, mad.PortSpaceTCP)
	defer cid.Destroy()
	cid.ResolveAddr(netip.AddrPortFrom(p.addrA(), 0), netip.AddrPortFrom(p.addrB(), 4000), time.Second)
	expect(t, cch, EventAddrResolved)
	cid.ResolveRoute(time.Second)
	expect(t, cch, EventRouteResolved)
	if err := cid.Connect(nil); err == nil {
		t.Fatal("Connect without QP or QPNum succeeded")
	}
	if err := cid.Connect(&ConnParam{QPNum: 0x1234}); err != nil {
		t.Fatal(err)
	}
	sid := expect(t, sch, EventConnectRequest).ID
	defer sid.Destroy()
	if err := sid.Accept(&ConnParam{QPNum: 0x4321}); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, cch, EventConnectResponse)
	if ev.Param.QPNum != 0x4321 {
		t.Errorf("REP QPN %#x", ev.Param.QPNum)
	}
	if err := cid.Establish(); err != nil {
		t.Fatal(err)
	}
	expect(t, sch, EventEstablished)
	// A duplicate REP is answered with the RTU again.
	before := p.aa.Stats().MADsSent.Load()
	p.ab.mu.Lock()
	rep := sid.xchg.answer
	p.ab.mu.Unlock()
	p.aa.input(p.addrB(), rep)
	if p.aa.Stats().MADsSent.Load() != before+1 || p.aa.Stats().Duplicates.Load() != 1 {
		t.Errorf("duplicate REP: sent %d, duplicates %d", p.aa.Stats().MADsSent.Load()-before, p.aa.Stats().Duplicates.Load())
	}
	cid.Disconnect()
	expect(t, cch, EventDisconnected)
	expect(t, sch, EventDisconnected)
}

// TestMalformedMADs: garbage is counted, never fatal.
func TestMalformedMADs(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	a := p.aa
	a.input(p.addrB(), nil)
	a.input(p.addrB(), make([]byte, 256))
	lap, _ := (&mad.LAP{}).Append(nil)
	a.input(p.addrB(), lap)
	rtu, _ := (&mad.RTU{LocalCommID: 1, RemoteCommID: 2}).Append(nil)
	a.input(p.addrB(), rtu)
	s := a.Stats()
	if s.DropMalformed.Load() != 2 || s.DropUnknown.Load() != 1 || s.DropUnexpected.Load() != 1 {
		t.Errorf("malformed %d unknown %d unexpected %d", s.DropMalformed.Load(), s.DropUnknown.Load(), s.DropUnexpected.Load())
	}
}
