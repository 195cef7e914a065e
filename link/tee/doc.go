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
package tee
