package verbs

import (
	"net/netip"

	"github.com/softroce/softroce/internal/engine"
)

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
type MWType uint8

// String returns "type 1" or "type 2".
func (v MWType) String() string { return engine.MWType(v).String() }

const (
	MWType1 MWType = 1
	MWType2 MWType = 2
)

// QPType is the transport service of a QP (enum ibv_qp_type values).
type QPType uint8

// String returns "RC", "UC" or "UD".
func (v QPType) String() string { return engine.QPType(v).String() }

const (
	QPTypeRC QPType = 2
	QPTypeUC QPType = 3
	QPTypeUD QPType = 4
)

// QPState is a QP state (enum ibv_qp_state values).
type QPState uint8

// String returns the state name, e.g. "RTS".
func (v QPState) String() string { return engine.QPState(v).String() }

const (
	QPStateReset QPState = 0
	QPStateInit  QPState = 1
	QPStateRTR   QPState = 2
	QPStateRTS   QPState = 3
	QPStateSQD   QPState = 4
	QPStateSQE   QPState = 5
	QPStateErr   QPState = 6
)

// Access is a set of memory/QP access flags (enum ibv_access_flags values).
type Access uint32

const (
	AccessLocalWrite      Access = 0x1
	AccessRemoteWrite     Access = 0x2
	AccessRemoteRead      Access = 0x4
	AccessRemoteAtomic    Access = 0x8
	AccessMWBind          Access = 0x10
	AccessZeroBased       Access = 0x20
	AccessOnDemand        Access = 0x40
	AccessHugeTLB         Access = 0x80
	AccessFlushGlobal     Access = 0x100
	AccessFlushPersistent Access = 0x200
	AccessRelaxedOrdering Access = 0x100000
)

// WCStatus is a work completion status (enum ibv_wc_status values).
type WCStatus uint8

// String returns the text ibv_wc_status_str gives.
func (v WCStatus) String() string { return engine.WCStatus(v).String() }

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

// WCOpcode is the operation a work completion reports (enum ibv_wc_opcode values).
type WCOpcode uint8

// String returns the IBV_WC_ name without its prefix, e.g. "RDMA_WRITE" or
// "RECV_RDMA_WITH_IMM" (as ibv_wc_opcode names it in <infiniband/verbs.h>).
func (v WCOpcode) String() string { return engine.WCOpcode(v).String() }

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

const (
	WCWithGRH     WCFlags = 0x1
	WCWithImm     WCFlags = 0x2
	WCIPCsumOK    WCFlags = 0x4
	WCWithInv     WCFlags = 0x8
	WCTMSyncReq   WCFlags = 0x10
	WCTMMatch     WCFlags = 0x20
	WCTMDataValid WCFlags = 0x40
)

// WROpcode is a send work request's operation (enum ibv_wr_opcode values).
type WROpcode uint8

// String returns the IBV_WR_ name without its prefix, e.g. "RDMA_WRITE".
func (v WROpcode) String() string { return engine.WROpcode(v).String() }

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

// SendFlags modify a send work request (enum ibv_send_flags values).
type SendFlags uint32

const (
	SendFence     SendFlags = 0x1
	SendSignaled  SendFlags = 0x2
	SendSolicited SendFlags = 0x4
	SendInline    SendFlags = 0x8
	SendIPCsum    SendFlags = 0x10
)

// GID is a 16-byte global identifier; for RoCEv2 the IPv6 address or the
// IPv4-mapped IPv6 address of an endpoint.
type GID [16]byte

// Addr returns the IP address the GID stands for (unmapped for IPv4).
func (g GID) Addr() netip.Addr { return engine.GID(g).Addr() }

// String formats the GID as an IPv6 address.
func (g GID) String() string { return engine.GID(g).String() }

// AttrMask selects QPAttr fields in ModifyQP / QueryQP (enum ibv_qp_attr_mask values).
type AttrMask uint32

const (
	QPAttrState            AttrMask = 0x1
	QPAttrCurState         AttrMask = 0x2
	QPAttrEnSQDAsyncNotify AttrMask = 0x4
	QPAttrAccessFlags      AttrMask = 0x8
	QPAttrPKeyIndex        AttrMask = 0x10
	QPAttrPort             AttrMask = 0x20
	QPAttrQKey             AttrMask = 0x40
	QPAttrAV               AttrMask = 0x80
	QPAttrPathMTU          AttrMask = 0x100
	QPAttrTimeout          AttrMask = 0x200
	QPAttrRetryCnt         AttrMask = 0x400
	QPAttrRNRRetry         AttrMask = 0x800
	QPAttrRQPSN            AttrMask = 0x1000
	QPAttrMaxQPRdAtomic    AttrMask = 0x2000
	QPAttrAltPath          AttrMask = 0x4000
	QPAttrMinRNRTimer      AttrMask = 0x8000
	QPAttrSQPSN            AttrMask = 0x10000
	QPAttrMaxDestRdAtomic  AttrMask = 0x20000
	QPAttrPathMigState     AttrMask = 0x40000
	QPAttrCap              AttrMask = 0x80000
	QPAttrDestQPN          AttrMask = 0x100000
	QPAttrRateLimit        AttrMask = 0x2000000
)

// EventType is an asynchronous event type (enum ibv_event_type values).
type EventType uint8

// String returns the text ibv_event_type_str gives.
func (v EventType) String() string { return engine.EventType(v).String() }

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

// PortState is a port's state (enum ibv_port_state values).
type PortState uint8

const (
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

// SRQAttrMask selects SRQAttr fields in ModifySRQ.
type SRQAttrMask uint32

const (
	SRQAttrMaxWR SRQAttrMask = 0x1
	SRQAttrLimit SRQAttrMask = 0x2
)

// Constants, with the numeric values of rdma-core's enums.
const (
	MulticastQPN           = 0xffffff
	ReregChangeTranslation = 0x1
	ReregChangePD          = 0x2
	ReregChangeAccess      = 0x4
	// MaxMW is the number of memory windows a device supports.
	MaxMW     = 524288
	MaxSGE    = 32
	MaxInline = 512
)

// Variables.
var (
	RealClock = engine.RealClock
	ErrClosed = engine.ErrClosed
)
