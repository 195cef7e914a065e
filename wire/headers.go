package wire

import (
	"encoding/binary"
	"time"
)

// DefaultPKey is the only P_Key RoCE uses.
const DefaultPKey = 0xFFFF

// UDPPort is the RoCEv2 destination UDP port.
const UDPPort = 4791

// GSIQKey is the Q_Key of the GSI QP (QP1), used by CM MADs.
const GSIQKey = 0x80010000

// BTH is the base transport header (12 bytes).
type BTH struct {
	Opcode Opcode
	SE     bool  // solicited event
	M      bool  // MigReq (sent 0, ignored on receive)
	PadCnt uint8 // 0-3 pad bytes after the payload
	TVer   uint8 // transport header version, must be 0
	PKey   uint16
	FECN   bool
	BECN   bool
	Resv6  uint8  // reserved bits 5-0 of byte 4 (sent 0; kept for exact re-encoding)
	DestQP uint32 // 24 bits
	AckReq bool
	Resv7  uint8  // reserved bits 6-0 of byte 8 (sent 0; kept for exact re-encoding)
	PSN    uint32 // 24 bits
}

// Append appends the 12-byte encoding of h to b.
func (h *BTH) Append(b []byte) []byte {
	b1 := h.PadCnt&3<<4 | h.TVer&0xF
	if h.SE {
		b1 |= 0x80
	}
	if h.M {
		b1 |= 0x40
	}
	b4 := h.Resv6 & 0x3F
	if h.FECN {
		b4 |= 0x80
	}
	if h.BECN {
		b4 |= 0x40
	}
	b8 := h.Resv7 & 0x7F
	if h.AckReq {
		b8 |= 0x80
	}
	return append(b, byte(h.Opcode), b1, byte(h.PKey>>8), byte(h.PKey),
		b4, byte(h.DestQP>>16), byte(h.DestQP>>8), byte(h.DestQP),
		b8, byte(h.PSN>>16), byte(h.PSN>>8), byte(h.PSN))
}

// Decode fills h from the first 12 bytes of b (len(b) >= BTHLen).
func (h *BTH) Decode(b []byte) {
	_ = b[11]
	h.Opcode = Opcode(b[0])
	h.SE = b[1]&0x80 != 0
	h.M = b[1]&0x40 != 0
	h.PadCnt = b[1] >> 4 & 3
	h.TVer = b[1] & 0xF
	h.PKey = binary.BigEndian.Uint16(b[2:])
	h.FECN = b[4]&0x80 != 0
	h.BECN = b[4]&0x40 != 0
	h.Resv6 = b[4] & 0x3F
	h.DestQP = binary.BigEndian.Uint32(b[4:]) & 0xFFFFFF
	h.AckReq = b[8]&0x80 != 0
	h.Resv7 = b[8] & 0x7F
	h.PSN = binary.BigEndian.Uint32(b[8:]) & 0xFFFFFF
}

// RETH is the RDMA extended transport header (16 bytes).
type RETH struct {
	VA     uint64
	RKey   uint32
	Length uint32 // DMA length
}

// Append appends the encoding of h to b.
func (h *RETH) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, h.VA)
	b = binary.BigEndian.AppendUint32(b, h.RKey)
	return binary.BigEndian.AppendUint32(b, h.Length)
}

// Decode fills h from b (len(b) >= RETHLen).
func (h *RETH) Decode(b []byte) {
	_ = b[15]
	h.VA = binary.BigEndian.Uint64(b)
	h.RKey = binary.BigEndian.Uint32(b[8:])
	h.Length = binary.BigEndian.Uint32(b[12:])
}

// AETH syndrome values (byte 0 of the AETH).
const (
	AETHTypeMask   = 0x60
	AETHTypeACK    = 0x00
	AETHTypeRNR    = 0x20
	AETHTypeNAK    = 0x60
	AETHValueMask  = 0x1F
	AETHCreditsInv = 0x1F // "invalid credits": the value rxe always sends

	// NAK codes (AETH value with type NAK).
	NAKPSNSeqError  = 0
	NAKInvalidReq   = 1
	NAKRemAccessErr = 2
	NAKRemOpErr     = 3
	NAKInvalidRDReq = 4

	// Complete syndromes as rxe sends them.
	SyndromeACK         = AETHTypeACK | AETHCreditsInv // 0x1F
	SyndromeNAKSeq      = AETHTypeNAK | NAKPSNSeqError // 0x60
	SyndromeNAKInvReq   = AETHTypeNAK | NAKInvalidReq  // 0x61
	SyndromeNAKRemAcc   = AETHTypeNAK | NAKRemAccessErr
	SyndromeNAKRemOp    = AETHTypeNAK | NAKRemOpErr
	SyndromeNAKInvRDReq = AETHTypeNAK | NAKInvalidRDReq
)

// AETH is the ACK extended transport header (4 bytes).
type AETH struct {
	Syndrome uint8
	MSN      uint32 // 24 bits
}

// IsACK reports a positive acknowledgement.
func (h AETH) IsACK() bool { return h.Syndrome&AETHTypeMask == AETHTypeACK }

// IsRNR reports a receiver-not-ready NAK; Value is then the RNR timer code.
func (h AETH) IsRNR() bool { return h.Syndrome&AETHTypeMask == AETHTypeRNR }

// IsNAK reports a NAK (not RNR); Value is then the NAK code.
func (h AETH) IsNAK() bool { return h.Syndrome&AETHTypeMask == AETHTypeNAK }

// Value returns the low five bits: credit code, RNR timer code or NAK code.
func (h AETH) Value() uint8 { return h.Syndrome & AETHValueMask }

// Append appends the encoding of h to b.
func (h *AETH) Append(b []byte) []byte {
	return append(b, h.Syndrome, byte(h.MSN>>16), byte(h.MSN>>8), byte(h.MSN))
}

// Decode fills h from b (len(b) >= AETHLen).
func (h *AETH) Decode(b []byte) {
	_ = b[3]
	h.Syndrome = b[0]
	h.MSN = uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// creditTable maps AETH credit codes 0-30 to credit counts.
var creditTable = [31]uint32{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256,
	384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}

// Credits decodes an ACK's credit code; ok is false for code 31 (invalid/unlimited).
func Credits(code uint8) (n uint32, ok bool) {
	if code >= 31 {
		return 0, false
	}
	return creditTable[code], true
}

// rnrTimer maps RNR NAK timer codes to durations (IBA table; code 25 is
// 61.44 ms, which rxe's table mistypes as 61.41).
var rnrTimer = [32]time.Duration{
	655360 * time.Microsecond, 10 * time.Microsecond, 20 * time.Microsecond, 30 * time.Microsecond,
	40 * time.Microsecond, 60 * time.Microsecond, 80 * time.Microsecond, 120 * time.Microsecond,
	160 * time.Microsecond, 240 * time.Microsecond, 320 * time.Microsecond, 480 * time.Microsecond,
	640 * time.Microsecond, 960 * time.Microsecond, 1280 * time.Microsecond, 1920 * time.Microsecond,
	2560 * time.Microsecond, 3840 * time.Microsecond, 5120 * time.Microsecond, 7680 * time.Microsecond,
	10240 * time.Microsecond, 15360 * time.Microsecond, 20480 * time.Microsecond, 30720 * time.Microsecond,
	40960 * time.Microsecond, 61440 * time.Microsecond, 81920 * time.Microsecond, 122880 * time.Microsecond,
	163840 * time.Microsecond, 245760 * time.Microsecond, 327680 * time.Microsecond, 491520 * time.Microsecond,
}

// RNRTimeout returns the wait coded by an RNR NAK timer code (0-31).
func RNRTimeout(code uint8) time.Duration { return rnrTimer[code&AETHValueMask] }

// AtomicETH is the atomic extended transport header (28 bytes).
type AtomicETH struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64 // swap value (COMPARE_SWAP) or add value (FETCH_ADD)
	Compare uint64 // compare value (COMPARE_SWAP), 0 for FETCH_ADD
}

// Append appends the encoding of h to b.
func (h *AtomicETH) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, h.VA)
	b = binary.BigEndian.AppendUint32(b, h.RKey)
	b = binary.BigEndian.AppendUint64(b, h.SwapAdd)
	return binary.BigEndian.AppendUint64(b, h.Compare)
}

// Decode fills h from b (len(b) >= AtomicETHLen).
func (h *AtomicETH) Decode(b []byte) {
	_ = b[27]
	h.VA = binary.BigEndian.Uint64(b)
	h.RKey = binary.BigEndian.Uint32(b[8:])
	h.SwapAdd = binary.BigEndian.Uint64(b[12:])
	h.Compare = binary.BigEndian.Uint64(b[20:])
}

// AtomicAckETH carries the original remote value of an atomic (8 bytes).
type AtomicAckETH struct {
	Orig uint64
}

// Append appends the encoding of h to b.
func (h *AtomicAckETH) Append(b []byte) []byte { return binary.BigEndian.AppendUint64(b, h.Orig) }

// Decode fills h from b (len(b) >= AtomicAckETHLen).
func (h *AtomicAckETH) Decode(b []byte) { h.Orig = binary.BigEndian.Uint64(b[:8]) }

// DETH is the datagram extended transport header (8 bytes, UD).
type DETH struct {
	QKey  uint32
	Resv  uint8  // reserved byte 4 (sent 0; kept for exact re-encoding)
	SrcQP uint32 // 24 bits
}

// Append appends the encoding of h to b.
func (h *DETH) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, h.QKey)
	return binary.BigEndian.AppendUint32(b, uint32(h.Resv)<<24|h.SrcQP&0xFFFFFF)
}

// Decode fills h from b (len(b) >= DETHLen).
func (h *DETH) Decode(b []byte) {
	_ = b[7]
	h.QKey = binary.BigEndian.Uint32(b)
	h.Resv = b[4]
	h.SrcQP = binary.BigEndian.Uint32(b[4:]) & 0xFFFFFF
}

// FLUSH placement types (FETH PLT) and selectivity (FETH SEL).
const (
	FlushGlobalVisibility = 1
	FlushPersistence      = 2
	FlushSelRange         = 0 // range given by the RETH
	FlushSelWholeMR       = 1
)

// FETH is the FLUSH extended transport header (4 bytes).
type FETH struct {
	PLT  uint8  // bits 3-0: placement type
	SEL  uint8  // bits 5-4: selectivity
	Resv uint32 // reserved bits 31-6 (sent 0; kept for exact re-encoding)
}

// Append appends the encoding of h to b.
func (h *FETH) Append(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, h.Resv&^0x3F|uint32(h.SEL&3)<<4|uint32(h.PLT&0xF))
}

// Decode fills h from b (len(b) >= FETHLen).
func (h *FETH) Decode(b []byte) {
	v := binary.BigEndian.Uint32(b[:4])
	h.PLT = uint8(v & 0xF)
	h.SEL = uint8(v >> 4 & 3)
	h.Resv = v &^ 0x3F
}
