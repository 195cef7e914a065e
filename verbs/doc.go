// Package verbs is softroce's RDMA verbs API: the objects and calls of
// libibverbs (ibv_*) in Go, over a software RoCEv2 device that speaks the
// wire protocol of Linux's rdma_rxe.
//
// A verbs programmer finds the familiar shapes:
//
//	dev, _ := verbs.OpenUDP("127.0.0.1:4791", nil)  // ibv_open_device on a UDP socket
//	pd, _ := dev.AllocPD()                            // ibv_alloc_pd
//	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//	cq, _ := dev.CreateCQ(256, nil, nil)              // ibv_create_cq
//	qp, _ := pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
//		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
//	qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, ...},
//		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
//	... INIT -> RTR -> RTS with the attributes ibv_modify_qp(3) requires ...
//	qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, ...}})
//	n := cq.Poll(wcs)                                  // ibv_poll_cq
//
// Enumerations carry rdma-core's numeric values (IBV_WC_*, IBV_WR_*,
// IBV_QP_*, IBV_ACCESS_*), errors match the errno rdma-core returns through
// errors.Is (syscall.EINVAL, syscall.ENOMEM, ...), and PostSend/PostRecv
// return the number of work requests accepted, so wrs[n] is the "bad WR".
//
// Memory ordering follows RDMA practice and the Go memory model: posting a
// work request happens before the device's accesses to the memory it names;
// any call on a QP (PostRecv, PostSend, Query, ...) happens before the
// device's handling of requests arriving on that QP later (so memory a peer
// will READ or update atomically must be written before such a call); and a
// completion returned by Poll happens after the device's accesses for that
// work request. Memory a remote peer writes (RDMA WRITE, atomics) may
// be read safely once a later completion on the local CQ says so (a
// WRITE_WITH_IMM or a SEND that followed it); reading it earlier is a data
// race, exactly as it is with a hardware NIC.
//
// Memory windows follow ibv_alloc_mw(3) and ibv_bind_mw(3): PD.AllocMW
// (MWType1 or MWType2), QP.BindMW for type 1 (it posts the bind and returns
// the new R_Key), a WRBindMW work request for type 2 (SendWR.MW,
// SendWR.BindInfo and the new key, IncRKey(mw.RKey()), in SendWR.RKey),
// WRLocalInv and an incoming WRSendWithInv invalidate type 2 windows.
//
// Memory the Go program does not own as a plain slice (mmap'ed or huge-page
// memory, SysV shared memory, file descriptors such as memfd or dma-buf,
// accelerator memory) is registered through package mem's providers:
// PD.RegMem resolves a mem.Request with the device's registry
// (Device.MemoryRegistry or Config.Memory) and PD.RegDmabufMR is
// ibv_reg_dmabuf_mr. When a provider revokes memory, the MR becomes invalid
// at once and EventMRInvalidated arrives on Device.AsyncEvents.
//
// Posting, polling and the per-packet paths do not allocate in steady state.
// The objects (Device, PD, MR, MW, CQ, CompChannel, QP, SRQ, AH), the
// structs (SendWR, RecvWR, WC, QPAttr, ...), the enumerations, Stats and the
// errors are all defined here, over the transport in this package's own
// files, shaped like rxe: recv.go (receive and demultiplexing), req.go (the
// requester), comp.go (the completer), resp.go (the responder), timer.go
// (retransmit and RNR timers), params.go (the limits). Posting and polling hand the caller's slices to the
// transport as they are, without copying.
//
// The transport behaves on the wire as Linux's Soft-RoCE driver (rdma_rxe)
// does, rule by rule as written in docs/protocol.md (cited in comments as
// "docs/protocol.md §5.7" and the like), so that softroce interoperates with
// the kernel and with hardware RoCE NICs.
//
// Concurrency: one goroutine per device reads batches from its
// link.Endpoint and dispatches each packet by destination QPN. Every QP's
// requester, responder and completer run under that QP's mutex, so per-QP
// processing is strictly ordered; posting work runs the requester in the
// caller's goroutine, ACKs arriving on the receive loop resume it, and the
// retransmit and RNR timers (on Config.Clock, a clock.Clock) resume it too.
// Packets leave through one transmit queue per device (tx.go); the RC
// requesters of a device share a send budget of packets in flight
// (budget.go, Config.InflightBudget), beyond which they take turns.
// Remote memory is reached only through the MR table: key -> region -> PD
// -> access bits -> bounds, then copy, under a per-region read lock that
// Deregister and Invalidate take exclusively, so that after they return no
// device goroutine touches that memory again.
//
// Memory windows (docs/protocol.md §7.3) live in the same key space, with
// indices above the MRs': a remote key naming a window is checked against
// the window (state, key, PD, access, QP for type 2, range) and then
// resolved to its MR, whose own checks follow. Invalidating or deallocating
// a window waits for accesses in progress through it. MRs over provider
// memory (package mem) also enter the provider region's guard for every
// access, so a provider's revocation is synchronous too; it is reported as
// EventMRInvalidated.
package verbs
