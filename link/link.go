package link

import (
	"errors"
	"net/netip"
)

// MaxDatagram is the largest UDP payload a link delivers (65535 minus the
// IPv4 and UDP headers). RoCE packets are far smaller (at most 4096 bytes of
// payload plus headers), so buffers of MTU()-28 bytes suffice in practice.
const MaxDatagram = 65507

// MaxIPHeader is the size of the largest IP header a link reports (IPv6, no extensions).
const MaxIPHeader = 40

// Packet is one datagram in a caller-owned batch. On read, the link fills Buf[:N]
// with the UDP payload (BTH through ICRC) and the address fields; on write, the
// caller sets Buf[:N] and the addresses. Buf is never retained by the link after
// the call returns.
type Packet struct {
	// Buf holds the UDP payload. Readers size it (cap) for the largest datagram.
	Buf []byte
	// N is the number of valid bytes in Buf.
	N int
	// Src is the sender's IP address and UDP port. On write the link ignores it
	// (the socket's address is used) unless the link can set it.
	Src netip.AddrPort
	// Dst is the destination IP address and UDP port. On read it is the local
	// address the datagram arrived on (as far as the link knows it).
	Dst netip.AddrPort
	// IPHdr[:IPHdrLen] is the IP header exactly as received, when the link can
	// see it (IPHdrLen > 0); the ICRC can then be checked in full. UDP sockets
	// cannot, so IPHdrLen is 0 there. Ignored on write.
	IPHdr    [MaxIPHeader]byte
	IPHdrLen int
	// TOS is the IPv4 TOS / IPv6 traffic class to send with (write), or that
	// arrived (read, when known).
	TOS uint8
	// TTL is the IPv4 TTL / IPv6 hop limit to send with (0: the link's default).
	TTL uint8
	// Data, on write to an endpoint that gathers (Capabilities.GatherWrite),
	// is payload sent in place, without being copied into Buf first: the
	// datagram is Buf[:DataAt], then Data, then Buf[DataAt:N] (the pad and
	// the ICRC placeholder), N+len(Data) bytes in all. The caller keeps
	// Data's memory valid and unchanged until WriteBatch returns. Links that
	// do not gather never get it set; reads never set it.
	Data   []byte
	DataAt int
	// Local, on read, says the datagram came through shared memory of the
	// same user on this host, not a wire (link/udp's same-host lanes): no
	// bit on it can have flipped in transit, its ICRC was not computed,
	// and a device does not check it. On write the link sets it for a
	// datagram it sent that way, without filling in its ICRC (a tap,
	// link/tee, computes it for what it reports); callers need not clear it.
	Local bool
}

// Len returns the datagram's length: N, plus len(Data) on a gather write.
func (p *Packet) Len() int { return p.N + len(p.Data) }

// Bytes returns Buf[:N].
func (p *Packet) Bytes() []byte { return p.Buf[:p.N] }

// Capabilities is what an Endpoint can do or tells beyond the Endpoint
// interface. An endpoint that has any says so with a Capabilities method
// (Capable); one that wraps another (link/tee) returns its inner endpoint's,
// so that a device behind the wrapper runs as it would without it. The zero
// value is a plain endpoint: no known receive buffer, no gather writes,
// datagrams sent from LocalAddr, Packet.Src left alone on write.
type Capabilities struct {
	// ReceiveBuffer is how many bytes of datagrams the endpoint's kernel
	// holds for it before dropping (SO_RCVBUF as the kernel granted it, in
	// the kernel's accounting: payload plus per-datagram overhead); 0:
	// unknown. A device sizes its send budget from it
	// (verbs.Config.InflightBudget): the peer, built the same way, holds
	// about as much.
	ReceiveBuffer int
	// GatherWrite says WriteBatch honours Packet.Data: it sends the payload
	// in place (zero-copy send: one iovec for the headers, one for the
	// payload straight from registered memory, one for the pad and the
	// ICRC).
	GatherWrite bool
	// SendAddr is the IP address and UDP port datagrams leave from when it
	// is not LocalAddr (link/udp sends from a second socket on the same
	// address and a port of its own, udp.Config.SendFromBound); the zero
	// value means LocalAddr. CapabilitiesOf fills it in.
	SendAddr netip.AddrPort
	// ReportsSource says WriteBatch sets each packet it sends to its Src:
	// the address and UDP port the datagram left from, which may differ
	// per packet (link/udp with per-QP source ports).
	ReportsSource bool
}

// Capable is an Endpoint with Capabilities. A wrapper that is one must
// return its inner endpoint's (CapabilitiesOf(inner)), less what it cannot
// pass on.
type Capable interface {
	Capabilities() Capabilities
}

// CapabilitiesOf returns ep's Capabilities (the zero value if ep is not
// Capable), with SendAddr set to LocalAddr when ep does not name one.
func CapabilitiesOf(ep Endpoint) Capabilities {
	var c Capabilities
	if x, ok := ep.(Capable); ok {
		c = x.Capabilities()
	}
	if !c.SendAddr.IsValid() {
		c.SendAddr = ep.LocalAddr()
	}
	return c
}

// Endpoint moves batches of RoCEv2 datagrams (UDP payloads) in and out of a device.
// ReadBatch and WriteBatch may be called concurrently with each other, but each
// only from one goroutine at a time. After Close both return an error wrapping
// net.ErrClosed.
type Endpoint interface {
	// ReadBatch blocks until at least one datagram is available, fills
	// pkts[0:n] and returns n. A datagram larger than its buffer is dropped,
	// counted, and reported with N = 0; size buffers for MTU()-28 bytes (or
	// MaxDatagram to be safe).
	ReadBatch(pkts []Packet) (n int, err error)
	// WriteBatch sends pkts in order and returns how many were sent; on a
	// short count err says why. Each packet's last 4 bytes are its ICRC: the
	// link computes and writes them for the IP header the packet will really
	// carry (only the link knows e.g. the IPv4 ID its kernel writes), so
	// callers leave them as placeholders. Dst must be set; Src is ignored.
	WriteBatch(pkts []Packet) (n int, err error)
	// LocalAddr is the IP address and UDP port the endpoint receives on.
	LocalAddr() netip.AddrPort
	// MTU is the IP MTU of the underlying network (e.g. 1500, 65536 on loopback).
	MTU() int
	// BatchSize is the largest batch the endpoint handles per call.
	BatchSize() int
	// Close releases the endpoint; blocked reads return net.ErrClosed.
	Close() error
}

// GroupJoiner is an Endpoint that can receive the datagrams sent to an IP
// multicast group (RoCE UD multicast, docs/protocol.md §6.3). An endpoint
// that is one says so by this method; a wrapper (link/tee) passes it on.
type GroupJoiner interface {
	// JoinGroup joins group on the endpoint's interface and returns a
	// receive-only endpoint on which the group's datagrams to the
	// endpoint's UDP port arrive, with Packet.Dst the group's address and
	// that port. Closing it leaves the group. Datagrams to the group do not
	// arrive on the joining endpoint itself. Each call joins anew: two
	// group endpoints of one group each get every datagram.
	JoinGroup(group netip.Addr) (Endpoint, error)
}

// StateWatcher is an Endpoint that can report the state of the network
// interface it is bound on, as the kernel's rxe follows its netdev: a device
// reports its port DOWN, with a port error event, while the interface is
// down or has no carrier, and ACTIVE again when it comes back.
type StateWatcher interface {
	// WatchState calls f with the interface's state (true: up with carrier)
	// once it is known, then at every change, from a goroutine of the
	// endpoint, until the endpoint closes. It returns ErrNoState when the
	// endpoint's address has no interface of its own to watch (a
	// wildcard or loopback address, or a link with no interfaces).
	WatchState(f func(up bool)) error
}

// ErrNoState is WatchState's answer for an endpoint with no interface
// state to report.
var ErrNoState = errors.New("link: no interface state to watch for this address")

// Pender is an Endpoint that can tell, without reading them, whether
// datagrams wait to be read. A transport's timers use it to tell a silent
// peer from a receive path of their own that has not run yet (verbs: a
// loss probe waits while answers wait unread).
type Pender interface {
	// Pending reports datagrams waiting to be read. It may be called with
	// the caller's locks held: it never waits for datagrams, and takes no
	// lock that is held while received datagrams are handled.
	Pending() bool
}

// SpeedReporter is an Endpoint that knows the link speed of the network
// interface it is bound on: a device reports the InfiniBand speed and width
// rxe derives from it (verbs.Device.QueryPort).
type SpeedReporter interface {
	// LinkSpeed returns the interface's speed in Mb/s, 0 when it is not
	// known (loopback, a link down, a driver that does not say).
	LinkSpeed() int
}
