// Package engine is softroce's RoCEv2 transport engine: devices, protection
// domains, the memory-region table, completion queues, shared receive queues
// and RC/UC/UD queue pairs with their requester, responder and completer.
//
// It behaves on the wire as Linux's Soft-RoCE driver (rdma_rxe) does, rule by
// rule as written in docs/protocol.md (cited in comments as
// "docs/protocol.md §5.7" and the like), so that softroce interoperates with the
// kernel and with hardware RoCE NICs.
//
// Concurrency: one goroutine per device reads batches from its link.Endpoint
// and dispatches each packet by destination QPN. Every QP's requester,
// responder and completer run under that QP's mutex, so per-QP processing is
// strictly ordered; posting work runs the requester in the caller's
// goroutine, ACKs arriving on the receive loop resume it, and the retransmit
// and RNR timers (from an injectable Clock) resume it too. Remote memory is
// reached only through the MR table: key -> region -> PD -> access bits ->
// bounds, then copy, under a per-region read lock that Deregister and
// Invalidate take exclusively, so that after they return no engine goroutine
// touches that memory again.
//
// Memory windows (docs/protocol.md §7.3) live in the same key space, with indices above the
// MRs': a remote key naming a window is checked against the window (state,
// key, PD, access, QP for type 2, range) and then resolved to its MR, whose
// own checks follow. Invalidating or deallocating a window waits for
// accesses in progress through it. MRs over provider memory (package mem)
// also enter the provider region's guard for every access, so a provider's
// revocation is synchronous too; it is reported as EventMRInvalidated.
//
// The public API is package verbs, which re-exports these types.
package engine
