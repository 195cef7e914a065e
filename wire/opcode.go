package wire

import "strconv"

// Opcode is the BTH opcode: transport base (bits 7-5) plus operation (bits 4-0).
type Opcode uint8

// Transport bases (upper three bits of the opcode).
const (
	TransportRC  Opcode = 0x00
	TransportUC  Opcode = 0x20
	TransportRD  Opcode = 0x40
	TransportUD  Opcode = 0x60
	TransportCNP Opcode = 0x80
	TransportXRC Opcode = 0xA0
)

// Operations (lower five bits), added to a transport base.
const (
	OpSendFirst          Opcode = 0x00
	OpSendMiddle         Opcode = 0x01
	OpSendLast           Opcode = 0x02
	OpSendLastImm        Opcode = 0x03
	OpSendOnly           Opcode = 0x04
	OpSendOnlyImm        Opcode = 0x05
	OpWriteFirst         Opcode = 0x06
	OpWriteMiddle        Opcode = 0x07
	OpWriteLast          Opcode = 0x08
	OpWriteLastImm       Opcode = 0x09
	OpWriteOnly          Opcode = 0x0A
	OpWriteOnlyImm       Opcode = 0x0B
	OpReadRequest        Opcode = 0x0C
	OpReadResponseFirst  Opcode = 0x0D
	OpReadResponseMiddle Opcode = 0x0E
	OpReadResponseLast   Opcode = 0x0F
	OpReadResponseOnly   Opcode = 0x10
	OpAcknowledge        Opcode = 0x11
	OpAtomicAcknowledge  Opcode = 0x12
	OpCompareSwap        Opcode = 0x13
	OpFetchAdd           Opcode = 0x14
	OpSendLastInv        Opcode = 0x16
	OpSendOnlyInv        Opcode = 0x17
	OpFlush              Opcode = 0x1C
	OpAtomicWrite        Opcode = 0x1D
	operationMask        Opcode = 0x1F
	transportMask        Opcode = 0xE0
	OpCNP                Opcode = 0x81 // congestion notification packet
)

// Full opcodes for the transports softroce implements.
const (
	RCSendFirst          = TransportRC | OpSendFirst
	RCSendMiddle         = TransportRC | OpSendMiddle
	RCSendLast           = TransportRC | OpSendLast
	RCSendLastImm        = TransportRC | OpSendLastImm
	RCSendOnly           = TransportRC | OpSendOnly
	RCSendOnlyImm        = TransportRC | OpSendOnlyImm
	RCWriteFirst         = TransportRC | OpWriteFirst
	RCWriteMiddle        = TransportRC | OpWriteMiddle
	RCWriteLast          = TransportRC | OpWriteLast
	RCWriteLastImm       = TransportRC | OpWriteLastImm
	RCWriteOnly          = TransportRC | OpWriteOnly
	RCWriteOnlyImm       = TransportRC | OpWriteOnlyImm
	RCReadRequest        = TransportRC | OpReadRequest
	RCReadResponseFirst  = TransportRC | OpReadResponseFirst
	RCReadResponseMiddle = TransportRC | OpReadResponseMiddle
	RCReadResponseLast   = TransportRC | OpReadResponseLast
	RCReadResponseOnly   = TransportRC | OpReadResponseOnly
	RCAcknowledge        = TransportRC | OpAcknowledge
	RCAtomicAcknowledge  = TransportRC | OpAtomicAcknowledge
	RCCompareSwap        = TransportRC | OpCompareSwap
	RCFetchAdd           = TransportRC | OpFetchAdd
	RCSendLastInv        = TransportRC | OpSendLastInv
	RCSendOnlyInv        = TransportRC | OpSendOnlyInv
	RCFlush              = TransportRC | OpFlush
	RCAtomicWrite        = TransportRC | OpAtomicWrite

	UCSendFirst    = TransportUC | OpSendFirst
	UCSendMiddle   = TransportUC | OpSendMiddle
	UCSendLast     = TransportUC | OpSendLast
	UCSendLastImm  = TransportUC | OpSendLastImm
	UCSendOnly     = TransportUC | OpSendOnly
	UCSendOnlyImm  = TransportUC | OpSendOnlyImm
	UCWriteFirst   = TransportUC | OpWriteFirst
	UCWriteMiddle  = TransportUC | OpWriteMiddle
	UCWriteLast    = TransportUC | OpWriteLast
	UCWriteLastImm = TransportUC | OpWriteLastImm
	UCWriteOnly    = TransportUC | OpWriteOnly
	UCWriteOnlyImm = TransportUC | OpWriteOnlyImm
	UDSendOnly     = TransportUD | OpSendOnly
	UDSendOnlyImm  = TransportUD | OpSendOnlyImm
)

// Mask describes an opcode: the extension headers that follow the BTH, whether
// it carries payload, its position in a message and what kind of operation it is.
type Mask uint32

// Header bits.
const (
	HasRETH Mask = 1 << iota
	HasAETH
	HasAtomicETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasDETH
	HasFETH
	HasPayload

	// Position in a multi-packet message.
	First
	Middle
	Last
	Only

	// Operation kind.
	IsSend
	IsWrite
	IsRead        // RDMA READ request
	IsAtomic      // COMPARE_SWAP, FETCH_ADD
	IsFlush       // FLUSH
	IsAtomicWrite // ATOMIC_WRITE
	IsReadResponse
	IsAck // ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE
	IsRequest
	IsResponse

	// Responder effects.
	ConsumesRecv // consumes a receive WQE ("RWR")
	Completes    // generates a responder completion ("CQE")
)

// Header sizes in bytes.
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	FETHLen         = 4
	ICRCLen         = 4
)

// OpInfo is the static description of one opcode.
type OpInfo struct {
	Name   string // e.g. "RC_SEND_ONLY", as Linux and Wireshark name it
	Mask   Mask
	HdrLen int // BTH plus extension headers, in bytes
}

var opTable [256]OpInfo

func init() {
	type op struct {
		op   Opcode
		name string
		mask Mask
	}
	ops := []op{
		{OpSendFirst, "SEND_FIRST", HasPayload | First | IsSend | IsRequest | ConsumesRecv},
		{OpSendMiddle, "SEND_MIDDLE", HasPayload | Middle | IsSend | IsRequest},
		{OpSendLast, "SEND_LAST", HasPayload | Last | IsSend | IsRequest | Completes},
		{OpSendLastImm, "SEND_LAST_WITH_IMMEDIATE", HasImmDt | HasPayload | Last | IsSend | IsRequest | Completes},
		{OpSendOnly, "SEND_ONLY", HasPayload | Only | IsSend | IsRequest | ConsumesRecv | Completes},
		{OpSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", HasImmDt | HasPayload | Only | IsSend | IsRequest | ConsumesRecv | Completes},
		{OpWriteFirst, "RDMA_WRITE_FIRST", HasRETH | HasPayload | First | IsWrite | IsRequest},
		{OpWriteMiddle, "RDMA_WRITE_MIDDLE", HasPayload | Middle | IsWrite | IsRequest},
		{OpWriteLast, "RDMA_WRITE_LAST", HasPayload | Last | IsWrite | IsRequest},
		{OpWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", HasImmDt | HasPayload | Last | IsWrite | IsRequest | ConsumesRecv | Completes},
		{OpWriteOnly, "RDMA_WRITE_ONLY", HasRETH | HasPayload | Only | IsWrite | IsRequest},
		{OpWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt | HasPayload | Only | IsWrite | IsRequest | ConsumesRecv | Completes},
		{OpReadRequest, "RDMA_READ_REQUEST", HasRETH | Only | IsRead | IsRequest},
		{OpReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", HasAETH | HasPayload | First | IsReadResponse | IsResponse},
		{OpReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", HasPayload | Middle | IsReadResponse | IsResponse},
		{OpReadResponseLast, "RDMA_READ_RESPONSE_LAST", HasAETH | HasPayload | Last | IsReadResponse | IsResponse},
		{OpReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", HasAETH | HasPayload | Only | IsReadResponse | IsResponse},
		{OpAcknowledge, "ACKNOWLEDGE", HasAETH | Only | IsAck | IsResponse},
		{OpAtomicAcknowledge, "ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH | Only | IsAck | IsResponse},
		{OpCompareSwap, "COMPARE_SWAP", HasAtomicETH | Only | IsAtomic | IsRequest},
		{OpFetchAdd, "FETCH_ADD", HasAtomicETH | Only | IsAtomic | IsRequest},
		{OpSendLastInv, "SEND_LAST_WITH_INVALIDATE", HasIETH | HasPayload | Last | IsSend | IsRequest | Completes},
		{OpSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", HasIETH | HasPayload | Only | IsSend | IsRequest | ConsumesRecv | Completes},
		{OpFlush, "FLUSH", HasFETH | HasRETH | Only | IsFlush | IsRequest},
		{OpAtomicWrite, "ATOMIC_WRITE", HasRETH | HasPayload | Only | IsAtomicWrite | IsRequest},
	}
	for _, o := range ops {
		// RC: everything.
		add(TransportRC|o.op, "RC_"+o.name, o.mask)
		// UC: sends and writes, no invalidate.
		if o.mask&(IsSend|IsWrite) != 0 && o.op != OpSendLastInv && o.op != OpSendOnlyInv {
			add(TransportUC|o.op, "UC_"+o.name, o.mask)
		}
		// UD: SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE, with DETH.
		if o.op == OpSendOnly || o.op == OpSendOnlyImm {
			add(TransportUD|o.op, "UD_"+o.name, o.mask|HasDETH)
		}
	}
}

func add(op Opcode, name string, m Mask) {
	n := BTHLen
	for _, h := range [...]struct {
		m Mask
		l int
	}{{HasRETH, RETHLen}, {HasAETH, AETHLen}, {HasAtomicETH, AtomicETHLen}, {HasAtomicAckETH, AtomicAckETHLen},
		{HasImmDt, ImmDtLen}, {HasIETH, IETHLen}, {HasDETH, DETHLen}, {HasFETH, FETHLen}} {
		if m&h.m != 0 {
			n += h.l
		}
	}
	opTable[op] = OpInfo{Name: name, Mask: m, HdrLen: n}
}

// Info returns the description of o and whether softroce implements it
// (RC, UC and UD opcodes). RD, XRC, CNP and reserved opcodes report false.
func (o Opcode) Info() (OpInfo, bool) {
	i := opTable[o]
	return i, i.Mask != 0
}

// Valid reports whether o is an implemented RC/UC/UD opcode.
func (o Opcode) Valid() bool { return opTable[o].Mask != 0 }

// Mask returns the opcode's mask (0 if unknown).
func (o Opcode) Mask() Mask { return opTable[o].Mask }

// HdrLen returns BTH plus extension header length (0 if unknown).
func (o Opcode) HdrLen() int { return opTable[o].HdrLen }

// Transport returns the transport base (TransportRC, TransportUC, ...).
func (o Opcode) Transport() Opcode { return o & transportMask }

// Operation returns the operation part (bits 4-0).
func (o Opcode) Operation() Opcode { return o & operationMask }

// String returns the opcode's name, e.g. "RC_SEND_ONLY", or a hex form.
func (o Opcode) String() string {
	if i := opTable[o]; i.Mask != 0 {
		return i.Name
	}
	switch {
	case o == OpCNP:
		return "CNP"
	case o.Transport() == TransportRD:
		return "RD_0x" + strconv.FormatUint(uint64(o), 16)
	case o.Transport() == TransportXRC:
		return "XRC_0x" + strconv.FormatUint(uint64(o), 16)
	}
	return "OPCODE_0x" + strconv.FormatUint(uint64(o), 16)
}
