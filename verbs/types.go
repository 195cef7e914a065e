package verbs

import "github.com/softroce/softroce/internal/engine"

// Clock is the time source of the device's timers (retransmit, RNR). Tests
// may inject a fake one; the default is the real clock.
type Clock = engine.Clock

// Timer is a timer started by a Clock.
type Timer = engine.Timer

// Config tunes a device. The zero value is ready to use.
//
//	struct {
//		// Name is the device name (default "softroce0").
//		Name	string
//		// Clock drives the retransmit and RNR timers (default: the real clock).
//		// On the real clock (nil or RealClock) a device keeps all its QPs'
//		// timers in one heap served by one goroutine; any other Clock (a
//		// FakeClock) gets the QPs' timers directly.
//		Clock	Clock
//		// Logger receives debug logs (nil: silent).
//		Logger	*slog.Logger
//		// NoICRCCheck skips the receive-side ICRC check (failures are still
//		// counted when checking is on).
//		NoICRCCheck	bool
//		// MAC is the hardware address the link-local default GID (index 0) is
//		// derived from; zero derives one from the bound address.
//		MAC	[6]byte
//		// MaxMR caps the number of registered MRs (0: rxe's 2^19-1; larger
//		// values are lowered to it). Registrations beyond it fail with ENOMEM.
//		MaxMR	int
//		// MaxMRSize caps one MR's length in bytes (0: no limit but the
//		// address space, rxe's max_mr_size 2^64-1). Larger registrations fail
//		// with EINVAL. QueryDevice reports both limits.
//		MaxMRSize	uint64
//		// Memory is the memory-provider registry PD.RegMem and
//		// PD.RegDmabufMR resolve memory with (see package mem). Nil gives the
//		// device its own registry with the Go heap provider ("heap", the
//		// catch-all for ordinary memory) and the file-descriptor provider ("fd").
//		Memory	*mem.Registry
//	}
type Config = engine.Config

// Stats are a device's counters, updated atomically.
//
//	struct {
//		RxPackets, RxBytes	atomic.Uint64
//		TxPackets, TxBytes	atomic.Uint64
//		TxErrors		atomic.Uint64	// packets the link failed to send
//		Retransmits		atomic.Uint64	// retry sequences started (timeout, NAK, lost response)
//		RetryTimeouts		atomic.Uint64	// retransmit timer expiries
//		RetryDeferred		atomic.Uint64	// timer expiries not retried: the peer had answered (no progress) in that period
//		RNRNAKsSent		atomic.Uint64
//		RNRNAKsRcvd		atomic.Uint64
//		SeqNAKsSent		atomic.Uint64
//		SeqNAKsRcvd		atomic.Uint64
//		SeqNAKsIgnored		atomic.Uint64	// sequence-error NAKs received while a retry was under way (rxe ignores them too)
//		NAKsSent		atomic.Uint64	// other NAKs (0x61-0x63)
//		NAKsRcvd		atomic.Uint64
//		DupRequests		atomic.Uint64	// duplicate requests answered
//		BadInvalidates		atomic.Uint64	// SEND_WITH_INVALIDATE of a key that may not be invalidated remotely
//		ICRCErrors		atomic.Uint64
//		MRs			atomic.Uint64	// registered MRs now
//		MWs			atomic.Uint64	// allocated memory windows now
//
//		// Drops by reason.
//		DropMalformed	atomic.Uint64	// wire.Packet.Parse failed
//		DropNoQP	atomic.Uint64	// unknown destination QPN (or QP0)
//		DropQPState	atomic.Uint64	// QP not ready for the packet (docs/protocol.md §5.9: receive from RTR, send from RTS)
//		DropTransport	atomic.Uint64	// opcode's transport differs from the QP type
//		DropPKey	atomic.Uint64
//		DropQKey	atomic.Uint64	// UD Q_Key mismatch (docs/protocol.md §6.1)
//		DropSrcAddr	atomic.Uint64	// RC/UC packet not from the QP's peer (docs/protocol.md §9)
//		DropNoRecv	atomic.Uint64	// UD packet with no receive WQE
//		DropLength	atomic.Uint64	// UD packet too large for the receive WQE or the MTU
//		DropResponse	atomic.Uint64	// stray, duplicate or out-of-order responses
//		DropBadResponse	atomic.Uint64	// responses answering nothing sent or outstanding, or of the wrong kind (forged?)
//		DropDuplicate	atomic.Uint64	// duplicates that need no answer
//		DropOutOfSeq	atomic.Uint64	// requests after a PSN gap (NAK sent once)
//		DropUCResync	atomic.Uint64	// UC packets dropped while resynchronising (docs/protocol.md §6.2)
//		DropEvents	atomic.Uint64	// async or CQ events lost because the consumer lagged
//		DropUnsupported	atomic.Uint64	// CNP and other ignored packets
//	}
type Stats = engine.Stats

// Error is a verbs call failure. Errno is what rdma-core returns for the same
// misuse (EINVAL, ENOMEM, ...), so errors.Is(err, syscall.EINVAL) works.
//
//	struct {
//		Op	string	// the call, e.g. "post send"
//		Reason	string	// what was wrong and what to do
//		Errno	syscall.Errno
//		// Err is the underlying cause, if any (for example a package mem
//		// error such as mem.ErrSpansProviders); errors.Is and errors.As see it.
//		Err	error
//	}
//
// Methods:
//   - Error() string: Error formats the failure with its errno.
//   - Unwrap() []error: Unwrap returns the errno and the cause.
type Error = engine.Error

// MWType is a memory window's type (enum ibv_mw_type values).
//
// Methods:
//   - String() string: String returns "type 1" or "type 2".
type MWType = engine.MWType

// QPType is the transport service of a QP (enum ibv_qp_type values).
//
// Methods:
//   - String() string: String returns "RC", "UC" or "UD".
type QPType = engine.QPType

// QPState is a QP state (enum ibv_qp_state values).
//
// Methods:
//   - String() string: String returns the state name, e.g. "RTS".
type QPState = engine.QPState

// Access is a set of memory/QP access flags (enum ibv_access_flags values).
type Access = engine.Access

// WCStatus is a work completion status (enum ibv_wc_status values).
//
// Methods:
//   - String() string: String returns the text ibv_wc_status_str gives.
type WCStatus = engine.WCStatus

// WCOpcode is the operation a work completion reports (enum ibv_wc_opcode values).
//
// Methods:
//   - String() string: String returns the IBV_WC_ name without its prefix, e.g. "RDMA_WRITE" or "RECV_RDMA_WITH_IMM".
type WCOpcode = engine.WCOpcode

// WCFlags are work completion flags (enum ibv_wc_flags values).
type WCFlags = engine.WCFlags

// WC is a work completion (struct ibv_wc).
//
//	struct {
//		WRID		uint64
//		Status		WCStatus
//		Opcode		WCOpcode
//		VendorErr	uint32
//		ByteLen		uint32
//		// ImmData is the immediate data (WCWithImm) in host order, or the
//		// invalidated R_Key (WCWithInv).
//		ImmData		uint32
//		QPNum		uint32
//		SrcQP		uint32
//		Flags		WCFlags
//		PKeyIndex	uint16
//		SLID		uint16
//		SL		uint8
//		DLIDPathBits	uint8
//	}
type WC = engine.WC

// WROpcode is a send work request's operation (enum ibv_wr_opcode values).
//
// Methods:
//   - String() string: String returns the IBV_WR_ name without its prefix, e.g. "RDMA_WRITE".
type WROpcode = engine.WROpcode

// SendFlags modify a send work request (enum ibv_send_flags values).
type SendFlags = engine.SendFlags

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at Addr in
// the region whose local key is LKey. Addr is in the region's address space
// (MR.Addr() plus an offset; 0-based for zero-based regions).
//
//	struct {
//		Addr	uint64
//		Length	uint32
//		LKey	uint32
//	}
type SGE = engine.SGE

// RecvWR is a receive work request (struct ibv_recv_wr).
//
//	struct {
//		WRID	uint64
//		SGList	[]SGE
//	}
type RecvWR = engine.RecvWR

// GID is a 16-byte global identifier; for RoCEv2 the IPv6 address or the
// IPv4-mapped IPv6 address of an endpoint.
//
// Methods:
//   - Addr() netip.Addr: Addr returns the IP address the GID stands for (unmapped for IPv4).
//   - String() string: String formats the GID as an IPv6 address.
type GID = engine.GID

// GlobalRoute is the GRH part of an address vector (struct ibv_global_route).
//
//	struct {
//		DGID		GID
//		FlowLabel	uint32
//		SGIDIndex	uint8
//		HopLimit	uint8
//		TrafficClass	uint8
//	}
type GlobalRoute = engine.GlobalRoute

// AHAttr is an address vector (struct ibv_ah_attr). RoCE requires a GRH.
//
//	struct {
//		GRH		GlobalRoute
//		IsGlobal	bool
//		DLID		uint16
//		SL		uint8
//		PortNum		uint8
//		// DstPort is the destination UDP port, a softroce extension for
//		// several devices on one IP; 0 means 4791 as on every RoCEv2 node.
//		DstPort	uint16
//	}
type AHAttr = engine.AHAttr

// QPCap are a QP's queue sizes (struct ibv_qp_cap).
//
//	struct {
//		MaxSendWR	uint32
//		MaxRecvWR	uint32
//		MaxSendSGE	uint32
//		MaxRecvSGE	uint32
//		MaxInlineData	uint32
//	}
type QPCap = engine.QPCap

// AttrMask selects QPAttr fields in ModifyQP / QueryQP (enum ibv_qp_attr_mask values).
type AttrMask = engine.AttrMask

// QPAttr are a QP's modifiable attributes (struct ibv_qp_attr).
//
//	struct {
//		QPState		QPState
//		CurQPState	QPState
//		PathMTU		wire.MTU
//		QKey		uint32
//		RQPSN		uint32
//		SQPSN		uint32
//		DestQPNum	uint32
//		QPAccessFlags	Access
//		Cap		QPCap
//		AHAttr		AHAttr
//		PKeyIndex	uint16
//		SQDraining	bool
//		MaxRdAtomic	uint8
//		MaxDestRdAtomic	uint8
//		MinRNRTimer	uint8
//		PortNum		uint8
//		Timeout		uint8
//		RetryCnt	uint8
//		RNRRetry	uint8
//	}
type QPAttr = engine.QPAttr

// EventType is an asynchronous event type (enum ibv_event_type values).
//
// Methods:
//   - String() string: String returns the text ibv_event_type_str gives.
type EventType = engine.EventType

// PortState is a port's state (enum ibv_port_state values).
type PortState = engine.PortState

// DeviceAttr are a device's limits (struct ibv_device_attr), rxe's values
// (docs/protocol.md §10.1).
//
//	struct {
//		FWVer			string
//		NodeGUID		uint64
//		SysImageGUID		uint64
//		MaxMRSize		uint64
//		PageSizeCap		uint64
//		VendorID		uint32
//		VendorPartID		uint32
//		HWVer			uint32
//		MaxQP			int
//		MaxQPWR			int
//		DeviceCapFlags		uint32
//		MaxSGE			int
//		MaxSGERd		int
//		MaxCQ			int
//		MaxCQE			int
//		MaxMR			int
//		MaxMW			int
//		MaxPD			int
//		MaxQPRdAtom		int
//		MaxEECRdAtom		int
//		MaxResRdAtom		int
//		MaxQPInitRdAtom		int
//		AtomicCap		uint8	// 0 NONE, 1 HCA, 2 GLOB
//		MaxMcastGrp		int
//		MaxMcastQPAttach	int
//		MaxTotalMcastQPAttach	int
//		MaxAH			int
//		MaxSRQ			int
//		MaxSRQWR		int
//		MaxSRQSGE		int
//		MaxPKeys		uint16
//		LocalCAAckDelay		uint8
//		PhysPortCnt		uint8
//		MaxInlineData		int
//		MaxMsgSz		uint32
//	}
type DeviceAttr = engine.DeviceAttr

// PortAttr are a port's attributes (struct ibv_port_attr).
//
//	struct {
//		State		PortState
//		MaxMTU		wire.MTU
//		ActiveMTU	wire.MTU
//		GIDTblLen	int
//		PortCapFlags	uint32
//		MaxMsgSz	uint32
//		PKeyTblLen	uint16
//		LinkLayer	uint8	// 2 = Ethernet
//		ActiveSpeed	uint8
//		ActiveWidth	uint8
//		PhysState	uint8	// 5 = LinkUp
//	}
type PortAttr = engine.PortAttr

// SRQAttr are a shared receive queue's attributes (struct ibv_srq_attr).
//
//	struct {
//		MaxWR		uint32
//		MaxSGE		uint32
//		SRQLimit	uint32
//	}
type SRQAttr = engine.SRQAttr

// SRQAttrMask selects SRQAttr fields in ModifySRQ.
type SRQAttrMask = engine.SRQAttrMask

// Constants, with the numeric values of rdma-core's enums.
const (
	MulticastQPN           = engine.MulticastQPN
	ReregChangeTranslation = engine.ReregChangeTranslation
	ReregChangePD          = engine.ReregChangePD
	ReregChangeAccess      = engine.ReregChangeAccess
	MWType1                = engine.MWType1
	MWType2                = engine.MWType2
	MaxMW                  = engine.MaxMW
	QPTypeRC               = engine.QPTypeRC
	QPTypeUC               = engine.QPTypeUC
	QPTypeUD               = engine.QPTypeUD
	QPStateReset           = engine.QPStateReset
	QPStateInit            = engine.QPStateInit
	QPStateRTR             = engine.QPStateRTR
	QPStateRTS             = engine.QPStateRTS
	QPStateSQD             = engine.QPStateSQD
	QPStateSQE             = engine.QPStateSQE
	QPStateErr             = engine.QPStateErr
	AccessLocalWrite       = engine.AccessLocalWrite
	AccessRemoteWrite      = engine.AccessRemoteWrite
	AccessRemoteRead       = engine.AccessRemoteRead
	AccessRemoteAtomic     = engine.AccessRemoteAtomic
	AccessMWBind           = engine.AccessMWBind
	AccessZeroBased        = engine.AccessZeroBased
	AccessOnDemand         = engine.AccessOnDemand
	AccessHugeTLB          = engine.AccessHugeTLB
	AccessFlushGlobal      = engine.AccessFlushGlobal
	AccessFlushPersistent  = engine.AccessFlushPersistent
	AccessRelaxedOrdering  = engine.AccessRelaxedOrdering
	WCSuccess              = engine.WCSuccess
	WCLocLenErr            = engine.WCLocLenErr
	WCLocQPOpErr           = engine.WCLocQPOpErr
	WCLocEECOpErr          = engine.WCLocEECOpErr
	WCLocProtErr           = engine.WCLocProtErr
	WCWRFlushErr           = engine.WCWRFlushErr
	WCMWBindErr            = engine.WCMWBindErr
	WCBadRespErr           = engine.WCBadRespErr
	WCLocAccessErr         = engine.WCLocAccessErr
	WCRemInvReqErr         = engine.WCRemInvReqErr
	WCRemAccessErr         = engine.WCRemAccessErr
	WCRemOpErr             = engine.WCRemOpErr
	WCRetryExcErr          = engine.WCRetryExcErr
	WCRNRRetryExcErr       = engine.WCRNRRetryExcErr
	WCLocRDDViolErr        = engine.WCLocRDDViolErr
	WCRemInvRDReqErr       = engine.WCRemInvRDReqErr
	WCRemAbortErr          = engine.WCRemAbortErr
	WCInvEECNErr           = engine.WCInvEECNErr
	WCInvEECStateErr       = engine.WCInvEECStateErr
	WCFatalErr             = engine.WCFatalErr
	WCRespTimeoutErr       = engine.WCRespTimeoutErr
	WCGeneralErr           = engine.WCGeneralErr
	WCTMErr                = engine.WCTMErr
	WCTMRndvIncomplete     = engine.WCTMRndvIncomplete
	WCSend                 = engine.WCSend
	WCRDMAWrite            = engine.WCRDMAWrite
	WCRDMARead             = engine.WCRDMARead
	WCCompSwap             = engine.WCCompSwap
	WCFetchAdd             = engine.WCFetchAdd
	WCBindMW               = engine.WCBindMW
	WCLocalInv             = engine.WCLocalInv
	WCTSO                  = engine.WCTSO
	WCFlush                = engine.WCFlush
	WCAtomicWrite          = engine.WCAtomicWrite
	WCRecv                 = engine.WCRecv
	WCRecvRDMAWithImm      = engine.WCRecvRDMAWithImm
	WCWithGRH              = engine.WCWithGRH
	WCWithImm              = engine.WCWithImm
	WCIPCsumOK             = engine.WCIPCsumOK
	WCWithInv              = engine.WCWithInv
	WCTMSyncReq            = engine.WCTMSyncReq
	WCTMMatch              = engine.WCTMMatch
	WCTMDataValid          = engine.WCTMDataValid
	WRRDMAWrite            = engine.WRRDMAWrite
	WRRDMAWriteWithImm     = engine.WRRDMAWriteWithImm
	WRSend                 = engine.WRSend
	WRSendWithImm          = engine.WRSendWithImm
	WRRDMARead             = engine.WRRDMARead
	WRAtomicCmpAndSwp      = engine.WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd    = engine.WRAtomicFetchAndAdd
	WRLocalInv             = engine.WRLocalInv
	WRBindMW               = engine.WRBindMW
	WRSendWithInv          = engine.WRSendWithInv
	WRTSO                  = engine.WRTSO
	WRFlush                = engine.WRFlush
	WRAtomicWrite          = engine.WRAtomicWrite
	SendFence              = engine.SendFence
	SendSignaled           = engine.SendSignaled
	SendSolicited          = engine.SendSolicited
	SendInline             = engine.SendInline
	SendIPCsum             = engine.SendIPCsum
	MaxSGE                 = engine.MaxSGE
	MaxInline              = engine.MaxInline
	QPAttrState            = engine.QPAttrState
	QPAttrCurState         = engine.QPAttrCurState
	QPAttrEnSQDAsyncNotify = engine.QPAttrEnSQDAsyncNotify
	QPAttrAccessFlags      = engine.QPAttrAccessFlags
	QPAttrPKeyIndex        = engine.QPAttrPKeyIndex
	QPAttrPort             = engine.QPAttrPort
	QPAttrQKey             = engine.QPAttrQKey
	QPAttrAV               = engine.QPAttrAV
	QPAttrPathMTU          = engine.QPAttrPathMTU
	QPAttrTimeout          = engine.QPAttrTimeout
	QPAttrRetryCnt         = engine.QPAttrRetryCnt
	QPAttrRNRRetry         = engine.QPAttrRNRRetry
	QPAttrRQPSN            = engine.QPAttrRQPSN
	QPAttrMaxQPRdAtomic    = engine.QPAttrMaxQPRdAtomic
	QPAttrAltPath          = engine.QPAttrAltPath
	QPAttrMinRNRTimer      = engine.QPAttrMinRNRTimer
	QPAttrSQPSN            = engine.QPAttrSQPSN
	QPAttrMaxDestRdAtomic  = engine.QPAttrMaxDestRdAtomic
	QPAttrPathMigState     = engine.QPAttrPathMigState
	QPAttrCap              = engine.QPAttrCap
	QPAttrDestQPN          = engine.QPAttrDestQPN
	QPAttrRateLimit        = engine.QPAttrRateLimit
	EventCQErr             = engine.EventCQErr
	EventQPFatal           = engine.EventQPFatal
	EventQPReqErr          = engine.EventQPReqErr
	EventQPAccessErr       = engine.EventQPAccessErr
	EventCommEst           = engine.EventCommEst
	EventSQDrained         = engine.EventSQDrained
	EventDeviceFatal       = engine.EventDeviceFatal
	EventPortActive        = engine.EventPortActive
	EventPortErr           = engine.EventPortErr
	EventSRQErr            = engine.EventSRQErr
	EventSRQLimitReached   = engine.EventSRQLimitReached
	EventQPLastWQEReached  = engine.EventQPLastWQEReached
	EventGIDChange         = engine.EventGIDChange
	EventMRInvalidated     = engine.EventMRInvalidated
	PortDown               = engine.PortDown
	PortInit               = engine.PortInit
	PortArmed              = engine.PortArmed
	PortActive             = engine.PortActive
	SRQAttrMaxWR           = engine.SRQAttrMaxWR
	SRQAttrLimit           = engine.SRQAttrLimit
)

// Variables.
var (
	RealClock = engine.RealClock
	ErrClosed = engine.ErrClosed
)
