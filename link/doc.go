// Package link defines how RoCEv2 datagrams enter and leave a softroce device:
// an Endpoint moves batches of caller-owned packet buffers (in the spirit of
// wireguard-go's conn.Bind). Implementations live in link/udp (real UDP
// sockets) and link/pipe (an in-memory pair with fault injection for tests).
//
// What an endpoint can do beyond the Endpoint interface is its
// Capabilities, which it returns from one optional method (Capable) and a
// wrapper (link/tee, capture.Tee) passes on, so that a device behind a tap
// runs as it would without it; CapabilitiesOf reads them. An endpoint that
// gathers (Capabilities.GatherWrite: link/udp) sends a packet whose payload
// is elsewhere (Packet.Data, at Packet.DataAt in the datagram) without
// copying it into Buf: the device uses it for zero-copy sends straight from
// registered memory. Capabilities.ReceiveBuffer sizes the device's send
// budget.
//
// Packet.Src on write is the source the device asks for (its address and
// the QP's UDP source port); a link may send from another (a socket sends
// from its own port). Capabilities.SendAddr says which address it sends
// from, and an endpoint with Capabilities.ReportsSource sets each sent
// packet's Src to the address it really left from, so that taps record
// what the wire carries.
package link
