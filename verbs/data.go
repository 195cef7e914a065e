package verbs

import (
	"log/slog"
	"sync/atomic"

	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/wire"
)

// Config tunes a device. The zero value is ready to use.
type Config struct {
	// Name is the device name (default "softroce0").
	Name string
	// Clock drives the retransmit and RNR timers (default: the real clock).
	// On the real clock (nil or RealClock) a device keeps all its QPs'
	// timers in one heap served by one goroutine; any other Clock (a
	// FakeClock) gets the QPs' timers directly.
	Clock Clock
	// Logger receives debug logs (nil: silent).
	Logger *slog.Logger
	// NoICRCCheck skips the receive-side ICRC check (failures are still
	// counted when checking is on).
	NoICRCCheck bool
	// MAC is the hardware address the link-local default GID (index 0) is
	// derived from; zero derives one from the bound address.
	MAC [6]byte
	// MaxMR caps the number of registered MRs (0: rxe's 2^19-1; larger
	// values are lowered to it). Registrations beyond it fail with ENOMEM.
	MaxMR int
	// MaxMRSize caps one MR's length in bytes (0: no limit but the
	// address space, rxe's max_mr_size 2^64-1). Larger registrations fail
	// with EINVAL. QueryDevice reports both limits.
	MaxMRSize uint64
	// Memory is the memory-provider registry PD.RegMem and
	// PD.RegDmabufMR resolve memory with (see package mem). Nil gives the
	// device its own registry with the Go heap provider ("heap", the
	// catch-all for ordinary memory) and the file-descriptor provider ("fd").
	Memory *mem.Registry
}

// Stats are a device's counters, updated atomically.
type Stats struct {
	RxPackets, RxBytes atomic.Uint64
	TxPackets, TxBytes atomic.Uint64
	TxErrors           atomic.Uint64 // packets the link failed to send
	Retransmits        atomic.Uint64 // retry sequences started (timeout, NAK, lost response)
	RetryTimeouts      atomic.Uint64 // retransmit timer expiries
	RetryDeferred      atomic.Uint64 // timer expiries not retried: the peer had answered (no progress) in that period
	RNRNAKsSent        atomic.Uint64
	RNRNAKsRcvd        atomic.Uint64
	SeqNAKsSent        atomic.Uint64
	SeqNAKsRcvd        atomic.Uint64
	SeqNAKsIgnored     atomic.Uint64 // sequence-error NAKs received while a retry was under way (rxe ignores them too)
	NAKsSent           atomic.Uint64 // other NAKs (0x61-0x63)
	NAKsRcvd           atomic.Uint64
	DupRequests        atomic.Uint64 // duplicate requests answered
	BadInvalidates     atomic.Uint64 // SEND_WITH_INVALIDATE of a key that may not be invalidated remotely
	ICRCErrors         atomic.Uint64
	MRs                atomic.Uint64 // registered MRs now
	MWs                atomic.Uint64 // allocated memory windows now

	// Drops by reason.
	DropMalformed   atomic.Uint64 // wire.Packet.Parse failed
	DropNoQP        atomic.Uint64 // unknown destination QPN (or QP0)
	DropQPState     atomic.Uint64 // QP not ready for the packet (docs/protocol.md §5.9: receive from RTR, send from RTS)
	DropTransport   atomic.Uint64 // opcode's transport differs from the QP type
	DropPKey        atomic.Uint64
	DropQKey        atomic.Uint64 // UD Q_Key mismatch (docs/protocol.md §6.1)
	DropSrcAddr     atomic.Uint64 // RC/UC packet not from the QP's peer (docs/protocol.md §9)
	DropNoRecv      atomic.Uint64 // UD packet with no receive WQE
	DropLength      atomic.Uint64 // UD packet too large for the receive WQE or the MTU
	DropResponse    atomic.Uint64 // stray, duplicate or out-of-order responses
	DropBadResponse atomic.Uint64 // responses answering nothing sent or outstanding, or of the wrong kind (forged?)
	DropDuplicate   atomic.Uint64 // duplicates that need no answer
	DropOutOfSeq    atomic.Uint64 // requests after a PSN gap (NAK sent once)
	DropUCResync    atomic.Uint64 // UC packets dropped while resynchronising (docs/protocol.md §6.2)
	DropEvents      atomic.Uint64 // async or CQ events lost because the consumer lagged
	DropUnsupported atomic.Uint64 // CNP and other ignored packets
}

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

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at Addr in
// the region whose local key is LKey. Addr is in the region's address space
// (MR.Addr() plus an offset; 0-based for zero-based regions).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID   uint64
	SGList []SGE
}

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
