// Package link defines how RoCEv2 datagrams enter and leave a softroce device:
// an Endpoint moves batches of caller-owned packet buffers (in the spirit of
// wireguard-go's conn.Bind). Implementations live in link/udp (real UDP
// sockets) and link/pipe (an in-memory pair with fault injection for tests).
//
// A GatherWriter (link/udp) also sends a packet whose payload is elsewhere
// (Packet.Data, at Packet.DataAt in the datagram) without copying it into
// Buf: the device uses it for zero-copy sends straight from registered memory.
//
// Packet.Src on write is the source the device asks for (its address and
// the QP's UDP source port); a link may send from another (a socket sends
// from its own port). A SendAddrer says which address it sends from, and a
// SourceReporter sets each sent packet's Src to the address it really left
// from, so that taps (link/tee, capture.Tee) record what the wire carries.
package link
