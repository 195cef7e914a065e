package verbs

import (
	"net/netip"
	"strconv"

	"github.com/softroce/softroce/wire"
)

// QPType is the transport service of a QP (enum ibv_qp_type values).
type QPType uint8

// QP types.
const (
	QPTypeRC QPType = 2
	QPTypeUC QPType = 3
	QPTypeUD QPType = 4
)

// String returns "RC", "UC" or "UD".
func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	}
	return "QPType(" + strconv.Itoa(int(t)) + ")"
}

// QPState is a QP state (enum ibv_qp_state values).
type QPState uint8

// QP states.
const (
	QPStateReset QPState = 0
	QPStateInit  QPState = 1
	QPStateRTR   QPState = 2
	QPStateRTS   QPState = 3
	QPStateSQD   QPState = 4
	QPStateSQE   QPState = 5
	QPStateErr   QPState = 6
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the state name, e.g. "RTS".
func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return "QPState(" + strconv.Itoa(int(s)) + ")"
}

// Access is a set of memory/QP access flags (enum ibv_access_flags values).
type Access uint32

// Access flags.
const (
	AccessLocalWrite      Access = 1
	AccessRemoteWrite     Access = 2
	AccessRemoteRead      Access = 4
	AccessRemoteAtomic    Access = 8
	AccessMWBind          Access = 16
	AccessZeroBased       Access = 32
	AccessOnDemand        Access = 64
	AccessHugeTLB         Access = 128
	AccessFlushGlobal     Access = 256
	AccessFlushPersistent Access = 512
	AccessRelaxedOrdering Access = 1 << 20
)

// WCStatus is a work completion status (enum ibv_wc_status values).
type WCStatus uint8

// Work completion statuses.
const (
	WCSuccess          WCStatus = 0
	WCLocLenErr        WCStatus = 1
	WCLocQPOpErr       WCStatus = 2
	WCLocEECOpErr      WCStatus = 3
	WCLocProtErr       WCStatus = 4
	WCWRFlushErr       WCStatus = 5
	WCMWBindErr        WCStatus = 6
	WCBadRespErr       WCStatus = 7
	WCLocAccessErr     WCStatus = 8
	WCRemInvReqErr     WCStatus = 9
	WCRemAccessErr     WCStatus = 10
	WCRemOpErr         WCStatus = 11
	WCRetryExcErr      WCStatus = 12
	WCRNRRetryExcErr   WCStatus = 13
	WCLocRDDViolErr    WCStatus = 14
	WCRemInvRDReqErr   WCStatus = 15
	WCRemAbortErr      WCStatus = 16
	WCInvEECNErr       WCStatus = 17
	WCInvEECStateErr   WCStatus = 18
	WCFatalErr         WCStatus = 19
	WCRespTimeoutErr   WCStatus = 20
	WCGeneralErr       WCStatus = 21
	WCTMErr            WCStatus = 22
	WCTMRndvIncomplete WCStatus = 23
)

var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "operation aborted",
	"invalid EE context number", "invalid EE context state", "fatal error", "response timeout error",
	"general error", "TM error", "TM rendezvous incomplete",
}

// String returns the text ibv_wc_status_str gives.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return "unknown"
}

// WCOpcode is the operation a work completion reports (enum ibv_wc_opcode values).
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCTSO             WCOpcode = 7
	WCFlush           WCOpcode = 8
	WCAtomicWrite     WCOpcode = 9
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// WCFlags are work completion flags (enum ibv_wc_flags values).
type WCFlags uint8

// Work completion flags.
const (
	WCWithGRH     WCFlags = 1
	WCWithImm     WCFlags = 2
	WCIPCsumOK    WCFlags = 4
	WCWithInv     WCFlags = 8
	WCTMSyncReq   WCFlags = 16
	WCTMMatch     WCFlags = 32
	WCTMDataValid WCFlags = 64
)

// WC is a work completion (struct ibv_wc).
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	// ImmData is the immediate data (WCWithImm) in host order, or the
	// invalidated R_Key (WCWithInv).
	ImmData      uint32
	QPNum        uint32
	SrcQP        uint32
	Flags        WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
}

// WROpcode is a send work request's operation (enum ibv_wr_opcode values).
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRLocalInv          WROpcode = 7
	WRBindMW            WROpcode = 8
	WRSendWithInv       WROpcode = 9
	WRTSO               WROpcode = 10
	WRFlush             WROpcode = 14
	WRAtomicWrite       WROpcode = 15
)

var wrOpNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAndAdd: "ATOMIC_FETCH_AND_ADD", WRLocalInv: "LOCAL_INV", WRBindMW: "BIND_MW",
	WRSendWithInv: "SEND_WITH_INV", WRTSO: "TSO", WRFlush: "FLUSH", WRAtomicWrite: "ATOMIC_WRITE",
}

// String returns the IBV_WR_ name without its prefix, e.g. "RDMA_WRITE".
func (o WROpcode) String() string {
	if s, ok := wrOpNames[o]; ok {
		return s
	}
	return "WROpcode(" + strconv.Itoa(int(o)) + ")"
}

// SendFlags modify a send work request (enum ibv_send_flags values).
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1
	SendSignaled  SendFlags = 2
	SendSolicited SendFlags = 4
	SendInline    SendFlags = 8
	SendIPCsum    SendFlags = 16
)

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at Addr in
// the region whose local key is LKey. Addr is in the region's address space
// (MR.Addr() plus an offset; 0-based for zero-based regions).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// MaxSGE is the largest number of SGEs per work request (rxe: 32).
const MaxSGE = 32

// MaxInline is the largest inline payload (rxe: 512 bytes).
const MaxInline = 512

// SendWR is a send work request (struct ibv_send_wr). The device copies it
// at post time; the caller may reuse it afterwards.
type SendWR struct {
	// WRID is the caller's identifier, returned in the completion.
	WRID uint64
	// SGList is the local memory the request reads (or, for READ and
	// atomics, writes): at most the QP's MaxSendSGE elements.
	SGList []SGE
	// Opcode is the operation.
	Opcode WROpcode
	// Flags are SendSignaled, SendFence, SendSolicited, SendInline, ...
	Flags SendFlags
	// ImmData is the immediate data (WITH_IMM opcodes), host order; for
	// SEND_WITH_INV and LOCAL_INV it is the key to invalidate (an MR's or a
	// type 2 window's; invalidate_rkey).
	ImmData uint32
	// RemoteAddr and RKey address the remote memory of RDMA and atomic ops.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value (CMP_AND_SWP) or the add value (FETCH_ADD).
	CompareAdd uint64
	// Swap is the swap value (CMP_AND_SWP).
	Swap uint64
	// AtomicWrite is the 8-byte value of ATOMIC_WRITE, in big-endian wire order.
	AtomicWrite [8]byte
	// FlushType (wire.FlushGlobalVisibility / FlushPersistence) and
	// FlushLevel (wire.FlushSelRange / FlushSelWholeMR) describe a FLUSH; its
	// range is RemoteAddr, RKey and FlushLen.
	FlushType  uint8
	FlushLevel uint8
	FlushLen   uint32
	// UD: the address handle, remote QPN and Q_Key.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// Inline is the payload of an inline send (SendInline). softroce also
	// honours SendInline with SGList, copying at post time.
	Inline []byte
	// MW and BindInfo describe a WRBindMW (struct ibv_send_wr's bind_mw):
	// the window, and what to bind it to; RKey is the window's new key
	// (the old key with a new key8, see IncRKey).
	MW       *MW
	BindInfo MWBindInfo
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID   uint64
	SGList []SGE
}

// GID is a 16-byte global identifier; for RoCEv2 the IPv6 address or the
// IPv4-mapped IPv6 address of an endpoint.
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address (IPv4-mapped for IPv4).
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the IP address the GID stands for (unmapped for IPv4).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String formats the GID as an IPv6 address.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// GlobalRoute is the GRH part of an address vector (struct ibv_global_route).
type GlobalRoute struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr is an address vector (struct ibv_ah_attr). RoCE requires a GRH.
type AHAttr struct {
	GRH      GlobalRoute
	IsGlobal bool
	DLID     uint16
	SL       uint8
	PortNum  uint8
	// DstPort is the destination UDP port, a softroce extension for
	// several devices on one IP; 0 means 4791 as on every RoCEv2 node.
	DstPort uint16
}

// QPCap are a QP's queue sizes (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// QPInitAttr are the creation attributes of a QP (struct ibv_qp_init_attr).
type QPInitAttr struct {
	// Context is the user context QP.Context returns.
	Context any
	// SendCQ and RecvCQ receive the QP's completions (they may be the same CQ).
	SendCQ *CQ
	RecvCQ *CQ
	// SRQ, if set, supplies the QP's receive WRs.
	SRQ *SRQ
	// Cap are the queue sizes asked for; Query reports those granted.
	Cap QPCap
	// QPType is the transport service (QPTypeRC, QPTypeUC, QPTypeUD).
	QPType QPType
	// SQSigAll makes every send WR signaled.
	SQSigAll bool
	// CreateFlags are ibv_create_qp_ex's create_flags; only
	// QPCreateBlockSelfMcastLB is supported (another bit: EINVAL).
	CreateFlags QPCreateFlags
}

// QPCreateFlags are QP creation flags (enum ibv_qp_create_flags values).
type QPCreateFlags uint32

// QPCreateBlockSelfMcastLB (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) blocks the
// multicast loopback of the QP's own datagrams, as mlx5's block_lb_mc
// does: a datagram the QP sends to a multicast group is not delivered to
// any QP of the same device (the sender's own, or another attached to the
// group there), while other devices, on this host or others, still
// receive it. rxe does not support the flag (EOPNOTSUPP).
const QPCreateBlockSelfMcastLB QPCreateFlags = 1 << 1

// AttrMask selects QPAttr fields in ModifyQP / QueryQP (enum ibv_qp_attr_mask values).
type AttrMask uint32

// QP attribute mask bits.
const (
	QPAttrState            AttrMask = 1 << 0
	QPAttrCurState         AttrMask = 1 << 1
	QPAttrEnSQDAsyncNotify AttrMask = 1 << 2
	QPAttrAccessFlags      AttrMask = 1 << 3
	QPAttrPKeyIndex        AttrMask = 1 << 4
	QPAttrPort             AttrMask = 1 << 5
	QPAttrQKey             AttrMask = 1 << 6
	QPAttrAV               AttrMask = 1 << 7
	QPAttrPathMTU          AttrMask = 1 << 8
	QPAttrTimeout          AttrMask = 1 << 9
	QPAttrRetryCnt         AttrMask = 1 << 10
	QPAttrRNRRetry         AttrMask = 1 << 11
	QPAttrRQPSN            AttrMask = 1 << 12
	QPAttrMaxQPRdAtomic    AttrMask = 1 << 13
	QPAttrAltPath          AttrMask = 1 << 14
	QPAttrMinRNRTimer      AttrMask = 1 << 15
	QPAttrSQPSN            AttrMask = 1 << 16
	QPAttrMaxDestRdAtomic  AttrMask = 1 << 17
	QPAttrPathMigState     AttrMask = 1 << 18
	QPAttrCap              AttrMask = 1 << 19
	QPAttrDestQPN          AttrMask = 1 << 20
	QPAttrRateLimit        AttrMask = 1 << 25
)

// QPAttr are a QP's modifiable attributes (struct ibv_qp_attr).
type QPAttr struct {
	QPState         QPState
	CurQPState      QPState
	PathMTU         wire.MTU
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPNum       uint32
	QPAccessFlags   Access
	Cap             QPCap
	AHAttr          AHAttr
	PKeyIndex       uint16
	SQDraining      bool
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	PortNum         uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
}

// EventType is an asynchronous event type (enum ibv_event_type values).
type EventType uint8

// Asynchronous event types.
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
	EventGIDChange        EventType = 18
	// EventMRInvalidated (a softroce extension, no ibv_event_type) says a
	// memory provider revoked the memory under AsyncEvent.MR: the MR is
	// invalid from then on (remote access gets REM_ACCESS_ERR, local use
	// LOC_PROT_ERR); deregister it. mem.Region.Cause says why.
	EventMRInvalidated EventType = 64
)

var eventNames = map[EventType]string{
	EventCQErr: "CQ error", EventQPFatal: "local work queue catastrophic error",
	EventQPReqErr: "invalid request local work queue error", EventQPAccessErr: "local access violation work queue error",
	EventCommEst: "communication established", EventSQDrained: "send queue drained",
	EventDeviceFatal: "local catastrophic error", EventPortActive: "port active", EventPortErr: "port error",
	EventSRQErr: "SRQ catastrophic error", EventSRQLimitReached: "SRQ limit reached",
	EventQPLastWQEReached: "last WQE reached", EventGIDChange: "GID table change",
	EventMRInvalidated: "MR invalidated by its memory provider",
}

// String returns the text ibv_event_type_str gives.
func (e EventType) String() string {
	if s, ok := eventNames[e]; ok {
		return s
	}
	return "unknown"
}

// AsyncEvent is an asynchronous event (struct ibv_async_event): exactly one
// of QP, CQ, SRQ, MR or Port is set, according to Type.
type AsyncEvent struct {
	// Type is the event.
	Type EventType
	// QP, CQ, SRQ or MR is the object the event concerns.
	QP  *QP
	CQ  *CQ
	SRQ *SRQ
	MR  *MR
	// Port is the port of a port event (1).
	Port uint8
}

// PortState is a port's state (enum ibv_port_state values).
type PortState uint8

// Port states.
const (
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

// DeviceAttr are a device's limits (struct ibv_device_attr), rxe's values
// (docs/protocol.md §10.1).
type DeviceAttr struct {
	FWVer                 string
	NodeGUID              uint64
	SysImageGUID          uint64
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 int
	MaxQPWR               int
	DeviceCapFlags        uint32
	MaxSGE                int
	MaxSGERd              int
	MaxCQ                 int
	MaxCQE                int
	MaxMR                 int
	MaxMW                 int
	MaxPD                 int
	MaxQPRdAtom           int
	MaxEECRdAtom          int
	MaxResRdAtom          int
	MaxQPInitRdAtom       int
	AtomicCap             uint8 // 0 NONE, 1 HCA, 2 GLOB
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
	MaxAH                 int
	MaxSRQ                int
	MaxSRQWR              int
	MaxSRQSGE             int
	MaxPKeys              uint16
	LocalCAAckDelay       uint8
	PhysPortCnt           uint8
	MaxInlineData         int
	MaxMsgSz              uint32
}

// PortAttr are a port's attributes (struct ibv_port_attr).
type PortAttr struct {
	State        PortState
	MaxMTU       wire.MTU
	ActiveMTU    wire.MTU
	GIDTblLen    int
	PortCapFlags uint32
	MaxMsgSz     uint32
	PKeyTblLen   uint16
	LinkLayer    uint8 // 2 = Ethernet
	ActiveSpeed  uint8
	ActiveWidth  uint8
	PhysState    uint8 // 5 = LinkUp
}

// SRQAttr are a shared receive queue's attributes (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
}

// SRQAttrMask selects SRQAttr fields in ModifySRQ.
type SRQAttrMask uint32

// SRQ attribute mask bits (enum ibv_srq_attr_mask values).
const (
	SRQAttrMaxWR SRQAttrMask = 1
	SRQAttrLimit SRQAttrMask = 2
)
