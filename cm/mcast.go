package cm

// Multicast over rdma_cm, as the kernel's rdma_cm does it on RoCE: no
// subnet administrator is asked; an IPv4 group's MGID is its IPv4-mapped
// address, the Q_Key rdma_cm's (RDMA_UDP_QKEY), and the join is reported
// at once with MULTICAST_JOIN, whose UD parameters address the group (QPN
// 0xFFFFFF). As librdmacm does on that event, the ID's QP (CreateQP) is
// attached to the group unless the join is send-only, which makes the
// device's link join the IP group (verbs.QP.AttachMcast).

import (
	"net/netip"
	"sync"
	"syscall"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/verbs"
)

// Multicast events.
const (
	EventMulticastJoin  EventType = 12
	EventMulticastError EventType = 13
)

// JoinFlags say how an ID joins a group (rdma_cm_join_mc_attr_ex's
// join_flags).
type JoinFlags uint8

// Join flags.
const (
	// JoinFullMember sends to and receives from the group
	// (RDMA_MC_JOIN_FLAG_FULLMEMBER): the ID's QP is attached.
	JoinFullMember JoinFlags = 0
	// JoinSendOnlyFullMember only sends to the group
	// (RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER): no QP is attached and the
	// link does not join.
	JoinSendOnlyFullMember JoinFlags = 1
)

// Multicast is one group an ID joined: what MULTICAST_JOIN and
// MULTICAST_ERROR events are about (Event.Multicast).
type Multicast struct {
	// Addr is the group's address as given to JoinMulticast.
	Addr netip.Addr
	// MGID is the group's GID: Addr, IPv4-mapped for IPv4.
	MGID verbs.GID
	// Flags is how the ID joined.
	Flags JoinFlags
	// Context is the application's (rdma_join_multicast's context, which
	// librdmacm hands back as the event's param.ud.private_data).
	Context any
	// Attached says the ID's QP was attached to the group on the join.
	Attached bool
}

// multicasts are the IDs' group memberships, most recent first, as
// librdmacm's per-ID list.
var multicasts struct {
	mu sync.Mutex
	m  map[*ID][]*Multicast
}

// JoinMulticast joins the ID to the multicast group addr
// (rdma_join_multicast_ex): the ID must be bound to an address of a device
// (BindAddr) or have resolved one (ResolveAddr), and be a UD ID. The
// outcome comes as an event: MULTICAST_JOIN, whose UD parameters (QPN
// 0xFFFFFF, rdma_cm's Q_Key, an address vector to the group with hop limit
// 64) let the ID's QP send to the group, or MULTICAST_ERROR with a
// negative errno when the ID's QP could not be attached. The ID's QP, if
// it has one, is attached to the group unless flags is send-only.
//
// Errors as the kernel's rdma_cm: EINVAL for an ID not bound to a device
// or past address resolution, a port space other than UDP, a group
// address that is unspecified or not multicast, unknown flags.
func (id *ID) JoinMulticast(addr netip.Addr, flags JoinFlags, ctx any) error {
	g := addr.Unmap().WithZone("")
	switch {
	case flags > JoinSendOnlyFullMember:
		return newErr("join multicast", "unknown join flags", syscall.EINVAL)
	case !g.IsValid() || g.IsUnspecified():
		return newErr("join multicast", "no group address", syscall.EINVAL)
	case !g.IsMulticast():
		return newErr("join multicast", g.String()+" is not a multicast address", syscall.EINVAL)
	case id.ps != mad.PortSpaceUDP:
		return newErr("join multicast", "only IDs of port space UDP join groups (RoCE has no IPoIB broadcast group)", syscall.EINVAL)
	}
	a := id.agent
	if a == nil {
		return newErr("join multicast", "bind the ID to a device's address (or resolve one) first", syscall.EINVAL)
	}
	if g.Is4() != a.addr.Is4() {
		return newErr("join multicast", "group and the ID's address are of different IP families", syscall.EINVAL)
	}
	a.mu.Lock()
	ok := !id.destroyed && (id.st == stIdle && id.bound || id.st == stAddrResolved)
	qp := id.qp
	a.mu.Unlock()
	if !ok {
		return newErr("join multicast", "the ID must be bound or address-resolved, and not connected or listening", syscall.EINVAL)
	}
	mc := &Multicast{Addr: g, MGID: verbs.GIDFromAddr(g), Flags: flags, Context: ctx}
	ev := &Event{Type: EventMulticastJoin, Multicast: mc, UD: &UDParam{QPNum: verbs.MulticastQPN, QKey: mad.UDPQKey,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1,
			GRH: verbs.GlobalRoute{DGID: mc.MGID, SGIDIndex: a.sgid, HopLimit: defaultHopLimit}}}}
	if qp != nil && flags != JoinSendOnlyFullMember {
		if err := qp.AttachMcast(mc.MGID, 0); err != nil {
			ev = &Event{Type: EventMulticastError, Multicast: mc, Status: -int(errnoOf(err))}
		} else {
			mc.Attached = true
		}
	}
	multicasts.mu.Lock()
	if multicasts.m == nil {
		multicasts.m = map[*ID][]*Multicast{}
	}
	multicasts.m[id] = append([]*Multicast{mc}, multicasts.m[id]...)
	multicasts.mu.Unlock()
	a.mu.Lock()
	id.post(ev)
	a.mu.Unlock()
	return nil
}

// LeaveMulticast leaves the group addr the ID joined last
// (rdma_leave_multicast): the ID's QP is detached from it if the join
// attached it. It fails with EADDRNOTAVAIL when the ID has not joined addr.
func (id *ID) LeaveMulticast(addr netip.Addr) error {
	g := addr.Unmap().WithZone("")
	multicasts.mu.Lock()
	l := multicasts.m[id]
	var mc *Multicast
	for i, m := range l {
		if m.Addr == g {
			mc = m
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(multicasts.m, id)
	} else if mc != nil {
		multicasts.m[id] = l
	}
	multicasts.mu.Unlock()
	if mc == nil {
		return newErr("leave multicast", "the ID has not joined "+g.String(), syscall.EADDRNOTAVAIL)
	}
	if qp := id.QP(); qp != nil && mc.Attached {
		qp.DetachMcast(mc.MGID, 0) // as librdmacm, whatever it returns
	}
	return nil
}

// Multicasts returns the groups the ID has joined, most recent first.
func (id *ID) Multicasts() []*Multicast {
	multicasts.mu.Lock()
	defer multicasts.mu.Unlock()
	return append([]*Multicast(nil), multicasts.m[id]...)
}

// dropMulticasts forgets the ID's memberships (Destroy: the kernel's
// rdma_destroy_id leaves its groups; its QP, destroyed first or later,
// takes its attachments with it).
func dropMulticasts(id *ID) {
	multicasts.mu.Lock()
	delete(multicasts.m, id)
	multicasts.mu.Unlock()
}
