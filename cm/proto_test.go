package cm

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
	"github.com/softroce/softroce/wire"
)

// dropAttr returns a filter dropping the CM MADs with attribute a (all of
// them while *on is set).
func dropAttr(a mad.AttrID, on *atomic.Bool) pipe.Filter {
	return func(p *link.Packet) pipe.Verdict {
		var w wire.Packet
		if on.Load() && w.Parse(p.Bytes()) == nil && w.BTH.DestQP == 1 {
			if h, err := mad.ParseHeader(w.Payload); err == nil && h.AttrID == a {
				return pipe.Drop
			}
		}
		return pipe.Pass
	}
}

// TestLostRTU: the RTU is lost; the passive side resends its REP, the
// active side answers the duplicate with the same RTU, and the connection
// is established on both sides.
func TestLostRTU(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	var on atomic.Bool
	on.Store(true)
	p.pa.SetFilter(dropAttr(mad.AttrRTU, &on))
	sch, cch, cid := listenDial(t, p, 5000)
	cid.Connect(nil)
	sid := expect(t, sch, EventConnectRequest).ID
	defer sid.Destroy()
	rcQP(t, sid)
	sid.Accept(nil)
	expect(t, cch, EventEstablished)
	waitFor(t, 2*time.Second, "a REP retransmission", func() bool { return p.ab.Stats().Retransmits.Load() >= 1 })
	on.Store(false)
	expect(t, sch, EventEstablished)
	if p.aa.Stats().Duplicates.Load() == 0 {
		t.Error("the duplicate REP was not counted")
	}
}

// TestRTUNeverArrives: the passive side gives up, rejects with reason
// Timeout, and both sides learn it.
func TestRTUNeverArrives(t *testing.T) {
	cfg := testConfig()
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	var on atomic.Bool
	on.Store(true)
	p.pa.SetFilter(dropAttr(mad.AttrRTU, &on))
	sch, cch := NewEventChannel(), NewEventChannel()
	defer sch.Close()
	defer cch.Close()
	lid, _ := sch.CreateID(nil, mad.PortSpaceTCP)
	lid.BindAddr(netip.AddrPortFrom(p.addrB(), 5001))
	lid.Listen(0)
	defer lid.Destroy()
	cid, _ := cch.CreateID(nil, mad.PortSpaceTCP)
	defer cid.Destroy()
	cid.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.addrB(), 5001), 0)
	expect(t, cch, EventAddrResolved)
	cid.ResolveRoute(0)
	expect(t, cch, EventRouteResolved)
	cqp := rcQP(t, cid)
	cid.Connect(nil)
	sid := expect(t, sch, EventConnectRequest).ID
	defer sid.Destroy()
	sqp := rcQP(t, sid)
	sid.Accept(nil)
	expect(t, cch, EventEstablished)
	ev := expect(t, sch, EventUnreachable)
	if ev.Status != -int(syscall.ETIMEDOUT) || sqp.State() != verbs.QPStateErr {
		t.Errorf("passive: status %d, QP %v", ev.Status, sqp.State())
	}
	// The active side gets the REJ (Timeout) while established: the
	// connection is torn down.
	expect(t, cch, EventDisconnected)
	if cqp.State() != verbs.QPStateErr {
		t.Errorf("active QP %v", cqp.State())
	}
}

// backlogListener listens with a backlog of 1 on p's passive side, its
// channel counting requests until taken if onTake (SetBacklogOnTake).
func backlogListener(t *testing.T, p *pair, port uint16, onTake bool) (*EventChannel, *ID) {
	t.Helper()
	sch := NewEventChannel()
	sch.SetBacklogOnTake(onTake)
	t.Cleanup(func() { sch.Close() })
	lid, _ := sch.CreateID(nil, mad.PortSpaceTCP)
	lid.BindAddr(netip.AddrPortFrom(p.addrB(), port))
	lid.Listen(1)
	t.Cleanup(func() { lid.Destroy() })
	return sch, lid
}

// sendREQ connects a new ID of p's active side to port (its REQ goes out).
func sendREQ(t *testing.T, p *pair, port uint16) {
	t.Helper()
	ch := NewEventChannel()
	t.Cleanup(func() { ch.Close() })
	id, _ := ch.CreateID(nil, mad.PortSpaceTCP)
	t.Cleanup(func() { id.Destroy() })
	id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.addrB(), port), 0)
	expect(t, ch, EventAddrResolved)
	id.ResolveRoute(0)
	expect(t, ch, EventRouteResolved)
	if err := id.Connect(&ConnParam{QPNum: 0x100}); err != nil {
		t.Fatal(err)
	}
}

// TestBacklog: with a backlog of 1, a second REQ is dropped until the
// first request is answered; the peer's retransmission then gets through.
func TestBacklog(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	sch, _ := backlogListener(t, p, 5002, false)
	for range 2 {
		sendREQ(t, p, 5002)
	}
	first := expect(t, sch, EventConnectRequest).ID
	waitFor(t, 2*time.Second, "a backlog drop", func() bool { return p.ab.Stats().DropBacklog.Load() >= 1 })
	if sch.Len() != 0 {
		t.Fatal("second request delivered beyond the backlog")
	}
	first.Reject([]byte("full"))
	second := expect(t, sch, EventConnectRequest).ID
	second.Reject(nil)
	first.Destroy()
	second.Destroy()
}

// TestBacklogOnTake: on a channel with SetBacklogOnTake (the C library's),
// a request stops counting against the backlog once its CONNECT_REQUEST is
// taken, as with the kernel's rdma_cm file: with a backlog of 1, a second
// request is delivered while the first, taken, is neither accepted nor
// rejected (TestBacklog: without it, it is dropped).
func TestBacklogOnTake(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	sch, lid := backlogListener(t, p, 5003, true)
	var reqs []*ID
	for range 2 {
		sendREQ(t, p, 5003)
		// Taken, not answered.
		ev, err := sch.Get(ctxT(t, 2*time.Second))
		if err != nil {
			t.Fatalf("connection request %d: %v (DropBacklog %d)", len(reqs)+1, err, p.ab.Stats().DropBacklog.Load())
		}
		if ev.Type != EventConnectRequest {
			t.Fatalf("event %v, want CONNECT_REQUEST", ev.Type)
		}
		reqs = append(reqs, ev.ID)
	}
	first, second := reqs[0], reqs[1]
	if n := p.ab.Stats().DropBacklog.Load(); n != 0 {
		t.Errorf("DropBacklog %d, want 0", n)
	}
	first.Reject(nil)
	second.Reject(nil)
	first.Destroy()
	second.Destroy()
	if n := lid.listen.pending.Load(); n != 0 {
		t.Errorf("%d requests still counted against the backlog", n)
	}
}

// TestStatelessAnswers: a DREQ for an unknown connection gets a DREP, a REQ
// for a service nobody listens on a REJ (8), a SIDR_REQ a SIDR_REP
// UNSUPPORTED; answers go to the sender with its transaction ID.
func TestStatelessAnswers(t *testing.T) {
	var got atomic.Value
	ca := pipe.Config{Addr: netip.MustParseAddrPort("10.99.0.1:4791")}
	cb := pipe.Config{Addr: netip.MustParseAddrPort("10.99.0.2:4791"), Filter: func(p *link.Packet) pipe.Verdict {
		var w wire.Packet
		if w.Parse(p.Bytes()) == nil && w.BTH.DestQP == 1 {
			got.Store(append([]byte(nil), w.Payload...))
		}
		return pipe.Pass
	}}
	p := newPairWith(t, ca, cb, verbs.Config{Name: "a"}, verbs.Config{Name: "b"}, nil)
	hdr := mad.CMAHeader{SrcPort: 1234, Src: p.addrA(), Dst: p.addrB()}
	pd, _ := hdr.Append(nil)
	for _, tc := range []struct {
		in   mad.Message
		want func(m mad.Message) bool
	}{
		{&mad.DREQ{Header: mad.NewHeader(77), LocalCommID: 5, RemoteCommID: 6}, func(m mad.Message) bool {
			r, ok := m.(*mad.DREP)
			return ok && r.TID == 77 && r.LocalCommID == 6 && r.RemoteCommID == 5
		}},
		{&mad.REQ{Header: mad.NewHeader(78), LocalCommID: 9, ServiceID: mad.ServiceID(mad.PortSpaceTCP, 1), PrivateData: pd}, func(m mad.Message) bool {
			r, ok := m.(*mad.REJ)
			return ok && r.TID == 78 && r.RemoteCommID == 9 && r.Reason == mad.RejInvalidServiceID && r.MessageRejected == mad.MsgREQ
		}},
		{&mad.SIDRREQ{Header: mad.NewHeader(79), RequestID: 3, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 1), PrivateData: pd}, func(m mad.Message) bool {
			r, ok := m.(*mad.SIDRREP)
			return ok && r.TID == 79 && r.RequestID == 3 && r.Status == mad.SIDRUnsupported
		}},
	} {
		got.Store([]byte(nil))
		b, _ := tc.in.Append(nil)
		p.ab.input(p.addrA(), b)
		var m mad.Message
		waitFor(t, 2*time.Second, "an answer to "+tc.in.Attr().String(), func() bool {
			b, _ := got.Load().([]byte)
			if b == nil {
				return false
			}
			var err error
			m, err = mad.ParseMessage(b)
			return err == nil
		})
		if !tc.want(m) {
			t.Errorf("%v answered with %+v", tc.in.Attr(), m)
		}
	}
}

// TestAPIErrors: calls in the wrong state fail with errors that say why.
func TestAPIErrors(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	ch := NewEventChannel()
	defer ch.Close()
	if _, err := ch.CreateID(nil, 0x999); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("bad port space: %v", err)
	}
	id, _ := ch.CreateID(nil, mad.PortSpaceTCP)
	defer id.Destroy()
	if err := id.Connect(nil); !errors.Is(err, ErrState) {
		t.Errorf("connect before resolve: %v", err)
	}
	if err := id.Accept(nil); err == nil {
		t.Error("accept without request")
	}
	if _, err := id.CreateQP(nil, &verbs.QPInitAttr{}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("create qp without device: %v", err)
	}
	if err := id.BindAddr(netip.MustParseAddrPort("192.0.2.1:1")); !errors.Is(err, ErrNoDevice) {
		t.Errorf("bind to a foreign address: %v", err)
	}
	id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.addrB(), 1), 0)
	expect(t, ch, EventAddrResolved)
	id.ResolveRoute(0)
	expect(t, ch, EventRouteResolved)
	if err := id.Connect(&ConnParam{QPNum: 1, PrivateData: make([]byte, mad.MaxREQUserData+1)}); !errors.Is(err, ErrPrivateData) {
		t.Errorf("57 bytes of REQ private data: %v", err)
	}
	if err := id.Disconnect(); err == nil {
		t.Error("disconnect while not connected")
	}
	// IPv6 destination from an IPv4 device: ADDR_ERROR.
	id6, _ := ch.CreateID(nil, mad.PortSpaceTCP)
	defer id6.Destroy()
	id6.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("[2001:db8::1]:1"), 0)
	expect(t, ch, EventAddrError)
	if _, err := Dial(ctxT(t, time.Second), "nonsense", nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Dial(nonsense): %v", err)
	}
	if _, err := Attach(p.da, nil); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("second agent: %v", err)
	}
}

// TestLostDREP: the first DREP is lost; the DREQ is resent and answered
// with the same DREP from time-wait.
func TestLostDREP(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 300 * time.Millisecond   // one retransmission of the DREQ, not two, even under load
	cfg.TimeWait = 1500 * time.Millisecond // longer than the DREQ retransmission
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	c, s := connect(t, p, "7600", nil, nil)
	var on atomic.Bool
	on.Store(true)
	drop := dropAttr(mad.AttrDREP, &on)
	p.pb.SetFilter(func(pk *link.Packet) pipe.Verdict {
		if drop(pk) == pipe.Drop {
			on.Store(false) // only the first
			return pipe.Drop
		}
		return pipe.Pass
	})
	c.Disconnect()
	<-s.Disconnected()
	select {
	case <-c.Disconnected():
	case <-time.After(5 * time.Second):
		t.Fatal("no DISCONNECTED after the lost DREP")
	}
	if p.aa.Stats().Retransmits.Load() != 1 || p.ab.Stats().Duplicates.Load() != 1 {
		t.Errorf("retransmits %d, duplicates %d", p.aa.Stats().Retransmits.Load(), p.ab.Stats().Duplicates.Load())
	}
}
