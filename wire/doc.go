// Package wire encodes and decodes everything softroce puts on the wire:
// the RoCEv2 base transport header (BTH) and its extension headers (RETH,
// AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH, FETH), the opcode table
// for RC, UC and UD, 24-bit PSN arithmetic, and the invariant CRC (ICRC),
// byte-exact with the Linux kernel's rdma_rxe.
//
// Encoders append to a caller-owned slice (Append style); Packet.Parse decodes
// a UDP payload in place without allocating. Malformed input yields a
// *ParseError (use errors.Is with the Err* sentinels), never a panic.
//
// The package uses only the standard library.
package wire
