package verbs

import "github.com/softroce/softroce/internal/engine"

// Clock is the time source of the device's timers (retransmit, RNR). Tests
// may inject a fake one; the default is the real clock.
type Clock = engine.Clock

// Timer is a timer started by a Clock.
type Timer = engine.Timer

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

// WROpcode is a send work request's operation (enum ibv_wr_opcode values).
//
// Methods:
//   - String() string: String returns the IBV_WR_ name without its prefix, e.g. "RDMA_WRITE".
type WROpcode = engine.WROpcode

// SendFlags modify a send work request (enum ibv_send_flags values).
type SendFlags = engine.SendFlags

// GID is a 16-byte global identifier; for RoCEv2 the IPv6 address or the
// IPv4-mapped IPv6 address of an endpoint.
//
// Methods:
//   - Addr() netip.Addr: Addr returns the IP address the GID stands for (unmapped for IPv4).
//   - String() string: String formats the GID as an IPv6 address.
type GID = engine.GID

// AttrMask selects QPAttr fields in ModifyQP / QueryQP (enum ibv_qp_attr_mask values).
type AttrMask = engine.AttrMask

// EventType is an asynchronous event type (enum ibv_event_type values).
//
// Methods:
//   - String() string: String returns the text ibv_event_type_str gives.
type EventType = engine.EventType

// PortState is a port's state (enum ibv_port_state values).
type PortState = engine.PortState

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
