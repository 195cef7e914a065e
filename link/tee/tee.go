package tee

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// Direction says whether a datagram was received or sent.
type Direction uint8

// Directions.
const (
	// In is a datagram read from the network (ReadBatch).
	In Direction = iota
	// Out is a datagram written to the network (WriteBatch).
	Out
)

// String returns "in" or "out".
func (d Direction) String() string {
	if d == Out {
		return "out"
	}
	return "in"
}

// Func receives one datagram: its addresses, its IPv4 TOS / IPv6 traffic
// class (DSCP and ECN, link.Packet.TOS: as asked for on send, as received
// when the link reports it) and its UDP payload, which is only valid during
// the call.
type Func func(dir Direction, src, dst netip.AddrPort, tos uint8, udpPayload []byte)

// Stats counts the datagrams the tee has passed to its callback.
type Stats struct {
	In, Out atomic.Uint64
}

// Endpoint is a link.Endpoint that reports its traffic to a Func. It is safe
// to change the callback with SetFunc while traffic flows.
type Endpoint struct {
	inner link.Endpoint
	fn    atomic.Pointer[Func]
	local netip.AddrPort
	caps  link.Capabilities // link.CapabilitiesOf(inner)
	stats Stats
	whole []byte // a gathered datagram put together for fn (WriteBatch's)
	rcopy []byte // a read datagram with its ICRC filled in (ReadBatch's)
}

var (
	_ link.Endpoint      = (*Endpoint)(nil)
	_ link.Capable       = (*Endpoint)(nil)
	_ link.GroupJoiner   = (*Endpoint)(nil)
	_ link.StateWatcher  = (*Endpoint)(nil)
	_ link.SpeedReporter = (*Endpoint)(nil)
)

// New wraps ep. fn may be nil (nothing is reported until SetFunc).
func New(ep link.Endpoint, fn Func) *Endpoint {
	e := &Endpoint{inner: ep, local: ep.LocalAddr(), caps: link.CapabilitiesOf(ep)}
	e.SetFunc(fn)
	return e
}

// SetFunc replaces the callback; nil stops reporting.
func (e *Endpoint) SetFunc(fn Func) {
	if fn == nil {
		e.fn.Store(nil)
		return
	}
	e.fn.Store(&fn)
}

// Inner returns the wrapped endpoint.
func (e *Endpoint) Inner() link.Endpoint { return e.inner }

// Stats returns the live counters of reported datagrams.
func (e *Endpoint) Stats() *Stats { return &e.stats }

// ReadBatch reads from the inner endpoint and reports each datagram read.
// A datagram whose destination the link does not know is reported with the
// endpoint's local address.
func (e *Endpoint) ReadBatch(pkts []link.Packet) (int, error) {
	n, err := e.inner.ReadBatch(pkts)
	if fp := e.fn.Load(); fp != nil && n > 0 {
		fn := *fp
		for i := range pkts[:n] {
			p := &pkts[i]
			dst := p.Dst
			if !dst.IsValid() || dst.Addr().IsUnspecified() {
				dst = e.local
			}
			b := p.Buf[:p.N]
			if p.Local && len(b) >= wire.ICRCLen {
				// From a same-host lane, whose writer leaves the ICRC
				// out (nothing checks it): filled in as the wire has it.
				e.rcopy = append(e.rcopy[:0], b...)
				b = e.rcopy
				wire.FillICRC(b, p.Src, dst, 0)
			}
			fn(In, p.Src, dst, p.TOS, b)
		}
		e.stats.In.Add(uint64(n))
	}
	return n, err
}

// WriteBatch writes to the inner endpoint and reports each datagram it
// sent, whole (a gathered one, link.Packet.Data, put together from its
// three pieces), from the address it left from: Packet.Src as the inner
// endpoint set it (link.Capabilities.ReportsSource: link/udp, whose source
// port may be the QP's), else the address the inner endpoint sends from
// (link.Capabilities.SendAddr), with Packet.Src's IP address when that one
// is a wildcard.
func (e *Endpoint) WriteBatch(pkts []link.Packet) (int, error) {
	n, err := e.inner.WriteBatch(pkts)
	if fp := e.fn.Load(); fp != nil && n > 0 {
		fn := *fp
		for i := range pkts[:n] {
			p := &pkts[i]
			src := p.Src
			if !e.caps.ReportsSource || !src.IsValid() || src.Addr().IsUnspecified() {
				src = e.sentFrom(src)
			}
			fn(Out, src, p.Dst, p.TOS, e.datagram(p, src))
		}
		e.stats.Out.Add(uint64(n))
	}
	return n, err
}

// datagram returns the datagram p carried: Buf[:N], or for a gathered
// one (the inner endpoint sent Data in place) its three pieces copied
// into one buffer, valid until the next call.
// A datagram the inner endpoint sent through a same-host lane
// (link.Packet.Local), whose ICRC it leaves out, is copied too, and its
// ICRC filled in for src and its destination.
func (e *Endpoint) datagram(p *link.Packet, src netip.AddrPort) []byte {
	gathered := len(p.Data) > 0 && e.caps.GatherWrite
	if !gathered && !p.Local {
		return p.Buf[:p.N]
	}
	if gathered {
		at := p.DataAt
		e.whole = append(append(append(e.whole[:0], p.Buf[:at]...), p.Data...), p.Buf[at:p.N]...)
	} else {
		e.whole = append(e.whole[:0], p.Buf[:p.N]...)
	}
	if p.Local && len(e.whole) >= wire.ICRCLen {
		wire.FillICRC(e.whole, src, p.Dst, 0)
	}
	return e.whole
}

// sentFrom is the address a datagram with source src left from when the
// inner endpoint does not say: its send address, with src's IP address if
// that one is a wildcard.
func (e *Endpoint) sentFrom(src netip.AddrPort) netip.AddrPort {
	send := e.caps.SendAddr
	if a := send.Addr(); (!a.IsValid() || a.IsUnspecified()) && src.Addr().IsValid() && !src.Addr().IsUnspecified() {
		return netip.AddrPortFrom(src.Addr(), send.Port())
	}
	return send
}

// Capabilities returns the inner endpoint's (link.CapabilitiesOf), so that
// a device behind the tee sizes its send budget and sends zero-copy as it
// would without it; the tee reports gathered datagrams whole, and with the
// source the inner endpoint sets (ReportsSource) or sends from (SendAddr).
func (e *Endpoint) Capabilities() link.Capabilities { return e.caps }

// LocalAddr returns the inner endpoint's local address.
func (e *Endpoint) LocalAddr() netip.AddrPort { return e.inner.LocalAddr() }

// MTU returns the inner endpoint's MTU.
func (e *Endpoint) MTU() int { return e.inner.MTU() }

// BatchSize returns the inner endpoint's batch size.
func (e *Endpoint) BatchSize() int { return e.inner.BatchSize() }

// Close closes the inner endpoint.
func (e *Endpoint) Close() error { return e.inner.Close() }

// WatchState watches the inner endpoint's interface (link.StateWatcher);
// an inner endpoint that cannot gives link.ErrNoState.
func (e *Endpoint) WatchState(f func(up bool)) error {
	if w, ok := e.inner.(link.StateWatcher); ok {
		return w.WatchState(f)
	}
	return link.ErrNoState
}

// LinkSpeed is the inner endpoint's (link.SpeedReporter), 0 if it has none.
func (e *Endpoint) LinkSpeed() int {
	if r, ok := e.inner.(link.SpeedReporter); ok {
		return r.LinkSpeed()
	}
	return 0
}

// Pending is the inner endpoint's (link.Pender), false if it cannot tell.
func (e *Endpoint) Pending() bool {
	if p, ok := e.inner.(link.Pender); ok {
		return p.Pending()
	}
	return false
}

// JoinGroup joins group through the inner endpoint (link.GroupJoiner) and
// returns its group endpoint wrapped in a tee with this one's callback (as
// set now), so that what the group receives is reported too. An inner
// endpoint that cannot join gives an error wrapping errors.ErrUnsupported.
func (e *Endpoint) JoinGroup(group netip.Addr) (link.Endpoint, error) {
	gj, ok := e.inner.(link.GroupJoiner)
	if !ok {
		return nil, fmt.Errorf("tee: the wrapped link joins no multicast group: %w", errors.ErrUnsupported)
	}
	g, err := gj.JoinGroup(group)
	if err != nil {
		return nil, err
	}
	t := New(g, nil)
	t.fn.Store(e.fn.Load())
	return t, nil
}
