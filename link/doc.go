// Package link defines how RoCEv2 datagrams enter and leave a softroce device:
// an Endpoint moves batches of caller-owned packet buffers (in the spirit of
// wireguard-go's conn.Bind). Implementations live in link/udp (real UDP
// sockets) and link/pipe (an in-memory pair with fault injection for tests).
//
// A GatherWriter (link/udp) also sends a packet whose payload is elsewhere
// (Packet.Data, at Packet.DataAt in the datagram) without copying it into
// Buf: the device uses it for zero-copy sends straight from registered memory.
package link
