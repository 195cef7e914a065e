package verbs

import (
	"unsafe"

	"github.com/softroce/softroce/internal/engine"
)

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

// MWBindInfo describes a binding (struct ibv_mw_bind_info): the window
// covers [Addr, Addr+Length) of MR (in the MR's address space) with the
// remote Access given. With AccessZeroBased (type 2 only) remote addresses
// through the window start at 0; otherwise they are the MR addresses.
// A type 1 bind with Length 0 (MR may be nil) unbinds the window.
type MWBindInfo struct {
	// MR is the region the window exposes part of.
	MR *MR
	// Addr and Length are the window's range in the MR's address space.
	Addr   uint64
	Length uint64
	// Access is the remote access the window grants.
	Access Access
}

// MWBind is a type 1 bind request (struct ibv_mw_bind).
type MWBind struct {
	// WRID is the caller's identifier, returned in the bind's completion.
	WRID uint64
	// Flags are the send flags of the bind (SendSignaled, SendFence).
	Flags SendFlags
	// BindInfo is what to bind the window to.
	BindInfo MWBindInfo
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

// The conversions below hand verbs' types to the engine and back (the
// objects themselves convert in handles.go). Structs that carry objects
// are declared here with the engine's layout, their object fields being
// verbs' views of the same pointers; TestEngineLayout checks the two
// layouts field by field, so reading a []SendWR or a channel of
// AsyncEvent as the engine's type, without a copy, is sound. Sizes are
// also checked at compile time:
var (
	_ = [1]struct{}{}[unsafe.Sizeof(SendWR{})-unsafe.Sizeof(engine.SendWR{})]
	_ = [1]struct{}{}[unsafe.Sizeof(AsyncEvent{})-unsafe.Sizeof(engine.AsyncEvent{})]
	_ = [1]struct{}{}[unsafe.Sizeof(RecvWR{})-unsafe.Sizeof(engine.RecvWR{})]
	_ = [1]struct{}{}[unsafe.Sizeof(AHAttr{})-unsafe.Sizeof(engine.AHAttr{})]
	_ = [1]struct{}{}[unsafe.Sizeof(QPAttr{})-unsafe.Sizeof(engine.QPAttr{})]
	_ = [1]struct{}{}[unsafe.Sizeof(WC{})-unsafe.Sizeof(engine.WC{})]
	_ = [1]struct{}{}[unsafe.Sizeof(PortAttr{})-unsafe.Sizeof(engine.PortAttr{})]
)

// engineSendWRs views wrs as the engine's work requests (same memory).
func engineSendWRs(wrs []SendWR) []engine.SendWR {
	if len(wrs) == 0 {
		return nil
	}
	return unsafe.Slice((*engine.SendWR)(unsafe.Pointer(&wrs[0])), len(wrs))
}

// engineRecvWRs views wrs as the engine's work requests (same memory).
func engineRecvWRs(wrs []RecvWR) []engine.RecvWR {
	if len(wrs) == 0 {
		return nil
	}
	return unsafe.Slice((*engine.RecvWR)(unsafe.Pointer(&wrs[0])), len(wrs))
}

// engineWCs views wc as the engine's completions (same memory).
func engineWCs(wc []WC) []engine.WC {
	if len(wc) == 0 {
		return nil
	}
	return unsafe.Slice((*engine.WC)(unsafe.Pointer(&wc[0])), len(wc))
}

func (a *AHAttr) eng() *engine.AHAttr { return (*engine.AHAttr)(unsafe.Pointer(a)) }

func ahAttrOf(a *engine.AHAttr) *AHAttr { return (*AHAttr)(unsafe.Pointer(a)) }

func (a *QPAttr) eng() *engine.QPAttr { return (*engine.QPAttr)(unsafe.Pointer(a)) }

func qpAttrOf(a *engine.QPAttr) *QPAttr { return (*QPAttr)(unsafe.Pointer(a)) }

func portAttrOf(a *engine.PortAttr) *PortAttr { return (*PortAttr)(unsafe.Pointer(a)) }

// gidsOf views the engine's GIDs as verbs' (same memory, the same bytes).
func gidsOf(g []engine.GID) []GID {
	if len(g) == 0 {
		return nil
	}
	return unsafe.Slice((*GID)(&g[0]), len(g))
}

// asyncEventChan views the engine's event channel as one of verbs events.
func asyncEventChan(c <-chan engine.AsyncEvent) <-chan AsyncEvent {
	return *(*<-chan AsyncEvent)(unsafe.Pointer(&c))
}

// cqChan views the engine's CQ event channel as one of verbs CQs.
func cqChan(c <-chan *engine.CQ) <-chan *CQ {
	return *(*<-chan *CQ)(unsafe.Pointer(&c))
}

func (b MWBindInfo) engine() engine.MWBindInfo {
	return engine.MWBindInfo{MR: b.MR.eng(), Addr: b.Addr, Length: b.Length, Access: engine.Access(b.Access)}
}

func (b MWBind) engine() engine.MWBind {
	return engine.MWBind{WRID: b.WRID, Flags: engine.SendFlags(b.Flags), BindInfo: b.BindInfo.engine()}
}

func (a *QPInitAttr) engine() *engine.QPInitAttr {
	if a == nil {
		return nil
	}
	return &engine.QPInitAttr{
		Context: a.Context, SendCQ: a.SendCQ.eng(), RecvCQ: a.RecvCQ.eng(),
		SRQ: a.SRQ.eng(), Cap: engine.QPCap(a.Cap), QPType: engine.QPType(a.QPType), SQSigAll: a.SQSigAll,
	}
}

func qpInitAttrOf(a engine.QPInitAttr) QPInitAttr {
	return QPInitAttr{
		Context: a.Context, SendCQ: wrapCQ(a.SendCQ), RecvCQ: wrapCQ(a.RecvCQ),
		SRQ: wrapSRQ(a.SRQ), Cap: QPCap(a.Cap), QPType: QPType(a.QPType), SQSigAll: a.SQSigAll,
	}
}

func asyncEventOf(e engine.AsyncEvent) AsyncEvent {
	return AsyncEvent{Type: EventType(e.Type), QP: wrapQP(e.QP), CQ: wrapCQ(e.CQ), SRQ: wrapSRQ(e.SRQ), MR: wrapMR(e.MR), Port: e.Port}
}
