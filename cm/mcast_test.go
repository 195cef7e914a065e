package cm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

func getEvent(t *testing.T, ch *EventChannel) *Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := ch.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// udQP gives id a UD QP (CreateQP) with its own CQ.
func udQP(t *testing.T, id *ID) (*verbs.QP, *verbs.CQ) {
	t.Helper()
	cq, err := id.Device().CreateCQ(16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { id.DestroyQP(); cq.Destroy() })
	return qp, cq
}

// TestMulticast: over loopback UDP, a receiver binds and joins a group
// with its QP, a sender resolves the group and joins send-only; the join
// events carry what the kernel's rdma_cm gives on RoCE (the IPv4-mapped
// MGID, QPN 0xFFFFFF, RDMA_UDP_QKEY, hop limit 64, the context), the
// sender reaches the receiver through them, and leaving detaches.
func TestMulticast(t *testing.T) {
	n := rand.IntN(200) + 20
	a1 := fmt.Sprintf("127.%d.%d.1", n, rand.IntN(250)+1)
	a2 := a1[:len(a1)-1] + "2"
	var devs [2]*verbs.Device
	for i, a := range []string{a1, a2} {
		d, err := verbs.OpenUDP(a+":4791", &verbs.Config{Name: "m" + fmt.Sprint(i)})
		if err != nil {
			t.Skipf("cannot open a UDP device on %s: %v", a, err)
		}
		defer d.Close()
		ag, err := Attach(d, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer ag.Close()
		devs[i] = d
	}
	group := netip.MustParseAddr("239.7.9.1")
	ch := NewEventChannel()
	defer ch.Close()

	// The receiver: bound, with a QP, full member.
	rid, err := ch.CreateID(nil, mad.PortSpaceUDP)
	if err != nil {
		t.Fatal(err)
	}
	defer rid.Destroy()
	if err := rid.JoinMulticast(group, JoinFullMember, nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("join on an unbound ID: %v, want EINVAL", err)
	}
	if err := rid.BindAddr(netip.MustParseAddrPort(a1 + ":0")); err != nil {
		t.Fatal(err)
	}
	rqp, rcq := udQP(t, rid)
	rbuf := newBuf(t, rid.PD(), 256)
	if _, err := rqp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: rbuf.sge()}}); err != nil {
		t.Fatal(err)
	}
	if err := rid.JoinMulticast(group, JoinFullMember, "receiver"); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, ch)
	want := verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(group),
		SGIDIndex: rid.Agent().sgid, HopLimit: 64}}
	if ev.Type != EventMulticastJoin || ev.ID != rid || ev.Status != 0 || ev.UD == nil || ev.Multicast == nil ||
		ev.UD.QPNum != 0xFFFFFF || ev.UD.QKey != 0x01234567 || ev.UD.AHAttr != want ||
		ev.Multicast.Context != "receiver" || ev.Multicast.Addr != group || !ev.Multicast.Attached {
		t.Fatalf("join event %+v (UD %+v, multicast %+v)", ev, ev.UD, ev.Multicast)
	}
	if ev.UD.AHAttr.GRH.DGID.String() != "::ffff:239.7.9.1" {
		t.Errorf("MGID %v", ev.UD.AHAttr.GRH.DGID)
	}
	if g := devs[0].Groups(); len(g) != 1 || g[0] != group {
		t.Errorf("the receiver's link joined %v", g)
	}

	// The sender: resolves the group, joins send-only.
	sid, err := ch.CreateID(nil, mad.PortSpaceUDP)
	if err != nil {
		t.Fatal(err)
	}
	if err := sid.ResolveAddr(netip.MustParseAddrPort(a2+":0"), netip.AddrPortFrom(group, 0), time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := getEvent(t, ch); ev.Type != EventAddrResolved {
		t.Fatalf("resolving the group: %v %d", ev.Type, ev.Status)
	}
	sqp, scq := udQP(t, sid)
	if err := sid.JoinMulticast(group, JoinSendOnlyFullMember, nil); err != nil {
		t.Fatal(err)
	}
	ev = getEvent(t, ch)
	if ev.Type != EventMulticastJoin || ev.ID != sid || ev.Multicast.Attached {
		t.Fatalf("send-only join event %+v %+v", ev, ev.Multicast)
	}
	if g := devs[1].Groups(); len(g) != 0 {
		t.Errorf("a send-only join made the link join %v", g)
	}
	ah, err := sid.PD().CreateAH(&ev.UD.AHAttr)
	if err != nil {
		t.Fatal(err)
	}
	sbuf := newBuf(t, sid.PD(), 64)
	copy(sbuf.b, "hello, group")
	if _, err := sqp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: sbuf.mr.Addr(), Length: 12, LKey: sbuf.mr.LKey()}},
		AH:     ah, RemoteQPN: ev.UD.QPNum, RemoteQKey: ev.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollWC(t, scq, 5*time.Second); wc.Status != verbs.WCSuccess {
		t.Fatalf("send: %v", wc.Status)
	}
	if wc := pollWC(t, rcq, 5*time.Second); wc.Status != verbs.WCSuccess || wc.ByteLen != 40+12 ||
		string(rbuf.b[40:52]) != "hello, group" || wc.SrcQP != sqp.QPN() {
		t.Fatalf("received %+v %q", wc, rbuf.b[40:52])
	}

	// Leaving detaches the QP and the link leaves; a second leave fails.
	if err := rid.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	if g := devs[0].Groups(); len(g) != 0 {
		t.Errorf("after leaving, the receiver's link is in %v", g)
	}
	if err := rid.LeaveMulticast(group); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("second leave: %v, want EADDRNOTAVAIL", err)
	}
	sid.Destroy()
	if l := sid.Multicasts(); len(l) != 0 {
		t.Errorf("a destroyed ID keeps %d memberships", len(l))
	}
}

// TestMulticastErrors: what JoinMulticast refuses, with the kernel's
// rdma_cm errno.
func TestMulticastErrors(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	ch := NewEventChannel()
	defer ch.Close()
	group := netip.MustParseAddr("239.7.9.2")
	id := func(ps mad.PortSpace) *ID {
		id, err := ch.CreateID(nil, ps)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { id.Destroy() })
		return id
	}
	tcp := id(mad.PortSpaceTCP)
	tcp.BindAddr(netip.AddrPortFrom(p.addrA(), 0))
	wild := id(mad.PortSpaceUDP)
	wild.BindAddr(netip.MustParseAddrPort("0.0.0.0:0"))
	routed := id(mad.PortSpaceUDP)
	routed.ResolveAddr(netip.AddrPortFrom(p.addrA(), 0), netip.AddrPortFrom(group, 0), time.Second)
	getEvent(t, ch)
	routed.ResolveRoute(time.Second)
	getEvent(t, ch)
	ud := id(mad.PortSpaceUDP)
	ud.BindAddr(netip.AddrPortFrom(p.addrA(), 0))
	for _, c := range []struct {
		name  string
		id    *ID
		addr  string
		flags JoinFlags
		want  syscall.Errno
	}{
		{"TCP port space", tcp, "239.7.9.2", 0, syscall.EINVAL},
		{"wildcard bind", wild, "239.7.9.2", 0, syscall.EINVAL},
		{"route resolved", routed, "239.7.9.2", 0, syscall.EINVAL},
		{"unicast group", ud, "10.9.9.9", 0, syscall.EINVAL},
		{"no group", ud, "0.0.0.0", 0, syscall.EINVAL},
		{"IPv6 group on IPv4", ud, "ff0e::1", 0, syscall.EINVAL},
		{"bad flags", ud, "239.7.9.2", 2, syscall.EINVAL},
	} {
		if err := c.id.JoinMulticast(netip.MustParseAddr(c.addr), c.flags, nil); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := ud.LeaveMulticast(group); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("leaving a group not joined: %v, want EADDRNOTAVAIL", err)
	}
	if ch.Len() != 0 {
		t.Errorf("%d events after refused joins", ch.Len())
	}
	// Over a pipe (no group to join on the link) a join still succeeds.
	if err := ud.JoinMulticast(group, JoinFullMember, nil); err != nil {
		t.Fatal(err)
	}
	if ev := getEvent(t, ch); ev.Type != EventMulticastJoin {
		t.Errorf("event %v", ev.Type)
	}
}
