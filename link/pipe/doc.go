// Package pipe is an in-memory link for tests: New returns two connected
// link.Endpoints, like two hosts on a cable, with deterministic fault
// injection per direction.
//
// Each endpoint's Config.Faults apply to the datagrams it sends: loss,
// duplication, reordering (a datagram is held back until up to ReorderMax
// later datagrams have passed it, or until ReorderTimeout), delay with
// jitter, and corruption (one bit flipped, so the ICRC no longer verifies).
// All random decisions come from a PCG generator seeded with Config.Seed,
// drawn in a fixed order per datagram: the same seed and the same sequence
// of written datagrams give the same decisions. Delays use the runtime
// clock, so tests that need exact timing run inside testing/synctest, where
// time is virtual and the outcome fully deterministic. Config.Filter sees
// (and may modify or drop) every datagram in flight, for taps and targeted
// faults.
//
// WriteBatch fills in the ICRC as the UDP link does (IPv4 Identification 0,
// DF), and ReadBatch reports the IP header the datagram would have carried
// in Packet.IPHdr, so receivers can run the full wire.VerifyICRC check as
// well as wire.VerifyICRCAddrs.
//
// Like a network, a pipe never blocks a writer: a datagram that finds the
// peer's receive queue full (Config.QueueLen), the peer closed, or a
// destination other than the peer's address is dropped and counted. Close
// on one end makes that end's ReadBatch and WriteBatch return an error
// wrapping net.ErrClosed; the other end keeps working (its datagrams to the
// closed end are dropped) until it is closed too. A pipe starts no
// goroutines, and in steady state it does not allocate: datagrams are copied
// into pooled buffers.
package pipe
