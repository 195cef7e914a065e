package verbs

// Multicast reception over the link: the first QP of the device that
// attaches to a group makes the link join the IP group (link.GroupJoiner:
// link/udp receives the group on a socket of its own) and a receive loop
// reads that group endpoint into the same dispatch as the device's own
// (recv.go: handleBatch, which serializes them); the last QP to detach, or
// to be destroyed, leaves. A link that joins no groups (link/pipe, which
// delivers every datagram to its peer) needs nothing.

import (
	"errors"
	"net/netip"
	"sync"
	"syscall"

	"github.com/softroce/softroce/link"
)

// mcastLinks are the device's joined groups on the link.
type mcastLinks struct {
	mu sync.Mutex // serializes joins and leaves (never held by the receive paths)
	m  map[netip.Addr]*mcastLink
}

// mcastLink is one group the link joined: its receive-only endpoint and
// the loop reading it.
type mcastLink struct {
	ep   link.Endpoint
	done chan struct{} // closed when its receive loop has returned
}

// linkJoin makes the link receive group g for the device, unless it does
// already or cannot join groups (then the link delivers groups itself, or
// not at all). d.mcl.mu held.
func (d *Device) linkJoin(g netip.Addr) error {
	if d.mcl.m[g] != nil {
		return nil
	}
	gj, ok := d.ep.(link.GroupJoiner)
	if !ok {
		return nil
	}
	ep, err := gj.JoinGroup(g)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil
	}
	if err != nil {
		errno := syscall.EADDRNOTAVAIL
		errors.As(err, &errno)
		e := newErr("attach mcast", "the link cannot join group "+g.String(), errno)
		e.Err = err
		return e
	}
	ml := &mcastLink{ep: ep, done: make(chan struct{})}
	if d.mcl.m == nil {
		d.mcl.m = map[netip.Addr]*mcastLink{}
	}
	d.mcl.m[g] = ml
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer close(ml.done)
		d.readLoop(ep, 0)
	}()
	return nil
}

// linkLeave makes the link leave group g if the device joined it and no
// QP is attached any more, and waits for the group's receive loop to end.
// d.mcl.mu held; no lock the receive paths take (rx.mu, qpMu, a QP's).
func (d *Device) linkLeave(g netip.Addr) {
	ml := d.mcl.m[g]
	if ml == nil {
		return
	}
	d.qpMu.RLock()
	used := len(d.mcast[g]) > 0
	d.qpMu.RUnlock()
	if used {
		return
	}
	delete(d.mcl.m, g)
	ml.ep.Close()
	<-ml.done
}

// closeGroups closes every group endpoint (Close; their loops end).
func (d *Device) closeGroups() {
	d.mcl.mu.Lock()
	defer d.mcl.mu.Unlock()
	for g, ml := range d.mcl.m {
		ml.ep.Close()
		delete(d.mcl.m, g)
	}
}

// Groups returns the multicast groups the device's link has joined for its
// attached QPs (AttachMcast).
func (d *Device) Groups() []netip.Addr {
	d.mcl.mu.Lock()
	defer d.mcl.mu.Unlock()
	l := make([]netip.Addr, 0, len(d.mcl.m))
	for g := range d.mcl.m {
		l = append(l, g)
	}
	return l
}
