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
// The package uses only the standard library. On amd64 the ICRC's CRC over
// payloads of 2 KiB and more folds 256 bytes at a time with AVX-512
// carry-less multiplication (crc_amd64.s) when the processor and operating
// system allow it, about 1.3 times hash/crc32's rate on a 4 KiB packet; the
// purego build tag, or a processor without it, uses hash/crc32.
package wire
