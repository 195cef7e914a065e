package verbs

import "time"

// The device's limits and the protocol's field ranges, named in one place.
// Most are rxe's defaults (drivers/infiniband/sw/rxe/rxe_param.h, reported
// by ibv_devinfo -v; docs/protocol.md §10.1); error messages are built from
// these constants so a limit and the text naming it cannot drift apart.

// Device limits reported by QueryDevice and enforced at create/modify time.
const (
	// maxQPWR is the largest send or receive queue (max_qp_wr, also
	// max_srq_wr). Rings are preallocated: memory grows with the size asked.
	maxQPWR = 1 << 20
	// maxCQE is the largest completion queue (max_cqe).
	maxCQE = 1<<15 - 1
	// maxRdAtom bounds max_rd_atomic and max_dest_rd_atomic (max_qp_rd_atom,
	// max_qp_init_rd_atom).
	maxRdAtom = 128
	// maxSRQSGE is the most scatter entries of a shared receive queue's WQE
	// (max_srq_sge).
	maxSRQSGE = 27
	// maxMsgSize is the largest message (max_msg_sz, 2 GiB): a longer send
	// is refused at post time, a longer RDMA READ or WRITE from the network
	// is NAKed as an invalid request.
	maxMsgSize = 1 << 31
	// maxMRIndex is the largest MR index (max_mr: rxe's 2^19 - 1; the index
	// is the key's upper 24 bits, docs/protocol.md §7.1).
	maxMRIndex = 1<<19 - 1
	// maxMcastQPs is how many QPs one multicast group may hold
	// (max_mcast_qp_attach, docs/protocol.md §6.3).
	maxMcastQPs = 56
)

// QP numbers.
const (
	// firstQPN is the first QPN handed out for ordinary QPs (rxe: 0x11; 0
	// and 1 are the SMI and GSI QPs).
	firstQPN = 0x11
	// maxQPN is the last QPN handed out (the 24-bit field minus the
	// multicast QPN 0xFFFFFF).
	maxQPN = 1<<24 - 2
	// maxQPNField is the largest value of the 24-bit QPN field
	// (dest_qp_num).
	maxQPNField = 1<<24 - 1
)

// Attribute field ranges of ibv_modify_qp.
const (
	// maxRetryCnt is the largest retry_cnt and rnr_retry: both are 3-bit
	// fields.
	maxRetryCnt = 7
	// rnrRetryInfinite is the rnr_retry value that means "retry RNR NAKs
	// forever" (IBTA C9-141; docs/protocol.md §5.6). retry_cnt 7 is an
	// ordinary count of seven.
	rnrRetryInfinite = 7
	// maxTimerCode is the largest timeout and min_rnr_timer: both are
	// 5-bit codes into the timeout tables (ackTimeout, wire.RNRTimeout).
	maxTimerCode = 1<<5 - 1
)

// Requester limits (docs/protocol.md §5.4, §10.1).
const (
	// maxUnackedPSNs is the send window, the PSNs a requester may have
	// unacknowledged: four times rxe's RXE_MAX_UNACKED_PSNS (128). A
	// responder keeps no window, so the wire does not change. It holds
	// four of the requester's ACK requests (ackReqEvery): a window of two
	// requests made a 1 MiB WRITE stream between two processes wait for
	// the older one's ACK (docs/speed.md, "The send window and 256 QPs",
	// "The ACK clock"). Retries halve it (comp.go).
	maxUnackedPSNs = 512
	// maxPktPerAck is rxe's RXE_MAX_PKT_PER_ACK: its requester asks for
	// an ACK after more than 64 packets without one. The send budget's
	// least grant (budget.go).
	maxPktPerAck = 64
	// ackReqEvery is softroce's AckReq cadence inside a long message: an
	// ACK request after more than ackReqEvery packets without one, twice
	// rxe's. Every ACK wakes the sender's receive loop and costs both sides
	// a system call; at 128 a 1 MiB WRITE stream at 4 KiB MTU draws two
	// ACKs per MiB instead of four (docs/protocol.md §5.3, docs/speed.md,
	// "The ACK clock"). Any responder answers exactly the AckReq packets,
	// so the wire stays valid for rxe.
	ackReqEvery = 128
	// minAckTimeout is the shortest retransmit timeout, whatever the
	// timeout code asks.
	minAckTimeout = time.Millisecond
)

// eventQueue is the depth of the device's async event channel.
const eventQueue = 256

// deviceCapFlags are rxe's IBV_DEVICE_* capability flags (rxe: 0x01223c76)
// minus the fast-registration one (MEM_MGT_EXTENSIONS) softroce does not
// implement.
const deviceCapFlags = deviceBadPKeyCntr | deviceBadQKeyCntr | deviceAutoPathMig |
	deviceChangePhyPort | deviceUDAVPortEnforce | devicePortActiveEvent | deviceSysImageGUID |
	deviceRCRNRNAKGen | deviceSRQResize | deviceMemWindow | deviceMemWindow2B

// The IBV_DEVICE_* capability bits softroce reports.
const (
	deviceBadPKeyCntr     = 1 << 1  // IBV_DEVICE_BAD_PKEY_CNTR
	deviceBadQKeyCntr     = 1 << 2  // IBV_DEVICE_BAD_QKEY_CNTR
	deviceAutoPathMig     = 1 << 4  // IBV_DEVICE_AUTO_PATH_MIG
	deviceChangePhyPort   = 1 << 5  // IBV_DEVICE_CHANGE_PHY_PORT
	deviceUDAVPortEnforce = 1 << 6  // IBV_DEVICE_UD_AV_PORT_ENFORCE
	devicePortActiveEvent = 1 << 10 // IBV_DEVICE_PORT_ACTIVE_EVENT
	deviceSysImageGUID    = 1 << 11 // IBV_DEVICE_SYS_IMAGE_GUID
	deviceRCRNRNAKGen     = 1 << 12 // IBV_DEVICE_RC_RNR_NAK_GEN
	deviceSRQResize       = 1 << 13 // IBV_DEVICE_SRQ_RESIZE
	deviceMemWindow       = 1 << 17 // IBV_DEVICE_MEM_WINDOW
	deviceMemWindow2B     = 1 << 24 // IBV_DEVICE_MEM_WINDOW_TYPE_2B
)

// portCapCMSup is IB_PORT_CM_SUP, the one port capability rxe reports: the
// port takes connection manager MADs on QP1.
const portCapCMSup = 1 << 16

// Limits QueryDevice reports that the device does not enforce itself (rxe's
// values, so that tools sizing their work from them behave as against rxe).
const (
	maxQP            = 1<<20 - 16        // max_qp
	maxCQ            = 1 << 20           // max_cq
	maxPD            = 1 << 20           // max_pd
	maxResRdAtom     = 0x3F000           // max_res_rd_atom
	maxMcastGrp      = 8192              // max_mcast_grp
	maxTotalMcastQPs = 0x70000           // max_total_mcast_qp_attach
	maxAH            = 1<<15 - 1         // max_ah
	maxSRQ           = 1<<20 - 1<<17 - 1 // max_srq
	maxPKeys         = 64                // max_pkeys
	localCAAckDelay  = 15                // local_ca_ack_delay (4.096 us x 2^15)
	pageSizeCap      = 0xfffff000        // page_size_cap: 4 KiB pages and up
	vendorID         = 0xFFFFFF          // vendor_id, as rxe
)
