// Package tee wraps a link.Endpoint so that every RoCEv2 datagram read from
// or written to it is also handed to a callback, as a packet capture tool
// would see it: direction, source and destination IP address and UDP port,
// and the UDP payload (BTH through ICRC).
//
// The softroce tools connect the callback to a capture.Writer to implement
// their --pcap flag; package link does not depend on capture, hence the
// callback. The callback runs on the goroutine calling ReadBatch or
// WriteBatch, after the inner endpoint returned, for the packets it really
// moved; it must not retain the payload slice. With no callback set the
// wrapper adds no work beyond one atomic load per batch and never allocates.
//
// The wrapper has its inner endpoint's link.Capabilities (a receive buffer,
// gather writes, the send address), so that a device behind it sizes its
// send budget and sends zero-copy as it would without it: a traced run is
// the run that would have happened. A datagram the inner endpoint gathered
// (link.Packet.Data) is reported whole, copied into one buffer the wrapper
// keeps for the next.
package tee
