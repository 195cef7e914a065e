package mad

import "encoding/binary"

// Sizes of the MAD and its parts.
const (
	MADLen    = 256 // every CM MAD
	HeaderLen = 24  // MAD common header
	DataLen   = MADLen - HeaderLen
)

// MAD common header values used by the CM.
const (
	BaseVersion    = 1    // MAD base version
	MgmtClassCM    = 0x07 // Communication Management class
	ClassVersionCM = 2    // CM class version used by Linux ib_cm
	MethodSend     = 0x03 // the only method the CM uses
)

// AttrID is a CM attribute ID: which message the MAD carries.
type AttrID uint16

// CM attribute IDs.
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001A
)

var attrNames = [...]string{
	AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ", AttrREP: "REP", AttrRTU: "RTU",
	AttrDREQ: "DREQ", AttrDREP: "DREP", AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP",
	AttrLAP: "LAP", AttrAPR: "APR",
}

// String returns the message name ("REQ", "SIDR_REP", ...) or "ATTR(0x....)".
func (a AttrID) String() string {
	if a == AttrClassPortInfo {
		return "ClassPortInfo"
	}
	if int(a) < len(attrNames) && attrNames[a] != "" {
		return attrNames[a]
	}
	const hex = "0123456789abcdef"
	return "ATTR(0x" + string([]byte{hex[a>>12], hex[a>>8&15], hex[a>>4&15], hex[a&15]}) + ")"
}

// Known reports whether a is one of the CM messages this package decodes.
func (a AttrID) Known() bool {
	return a >= AttrREQ && a <= AttrAPR
}

// Header is the 24-byte MAD common header.
type Header struct {
	BaseVersion   uint8  // 1
	MgmtClass     uint8  // 0x07 for the CM
	ClassVersion  uint8  // 2
	Method        uint8  // full byte: R bit (0x80) and method (0x03 Send)
	Status        uint16 // 0 in CM MADs
	ClassSpecific uint16
	TID           uint64 // transaction ID
	AttrID        AttrID
	AttrMod       uint32 // attribute modifier (0, or ECE data)
}

// NewHeader returns the header of a CM Send MAD with the given transaction ID.
// Append fills the same defaults into a zero Header, so this is only needed to
// set them explicitly.
func NewHeader(tid uint64) Header {
	return Header{BaseVersion: BaseVersion, MgmtClass: MgmtClassCM, ClassVersion: ClassVersionCM,
		Method: MethodSend, TID: tid}
}

// ParseHeader decodes and checks the header of b, a whole 256-byte MAD: base
// version 1, class CM, class version 2, method Send. It does not check the
// attribute ID; dispatch on it.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	return h, h.parse(b)
}

func (h *Header) parse(b []byte) error {
	if len(b) != MADLen {
		return ErrLength
	}
	h.BaseVersion = b[0]
	h.MgmtClass = b[1]
	h.ClassVersion = b[2]
	h.Method = b[3]
	h.Status = binary.BigEndian.Uint16(b[4:])
	h.ClassSpecific = binary.BigEndian.Uint16(b[6:])
	h.TID = binary.BigEndian.Uint64(b[8:])
	h.AttrID = AttrID(binary.BigEndian.Uint16(b[16:]))
	h.AttrMod = binary.BigEndian.Uint32(b[20:])
	switch {
	case h.BaseVersion != BaseVersion:
		return ErrBaseVersion
	case h.MgmtClass != MgmtClassCM:
		return ErrNotCM
	case h.ClassVersion != ClassVersionCM:
		return ErrClassVersion
	case h.Method != MethodSend:
		return ErrMethod
	}
	return nil
}

// parseAs parses the header and checks that it carries attribute a.
func (h *Header) parseAs(b []byte, a AttrID) error {
	if err := h.parse(b); err != nil {
		return err
	}
	if h.AttrID != a {
		return ErrAttrMismatch
	}
	return nil
}

// appendAs appends the 24-byte header with attribute a, filling CM defaults
// into zero version/class/method fields, and returns b grown by a whole zeroed
// MAD plus the 232-byte message area to fill.
func (h *Header) appendAs(b []byte, a AttrID) (out, data []byte) {
	bv, mc, cv, m := h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	if bv == 0 {
		bv = BaseVersion
	}
	if mc == 0 {
		mc = MgmtClassCM
	}
	if cv == 0 {
		cv = ClassVersionCM
	}
	if m == 0 {
		m = MethodSend
	}
	n := len(b)
	b = grow(b, MADLen)
	mad := b[n : n+MADLen]
	mad[0], mad[1], mad[2], mad[3] = bv, mc, cv, m
	binary.BigEndian.PutUint16(mad[4:], h.Status)
	binary.BigEndian.PutUint16(mad[6:], h.ClassSpecific)
	binary.BigEndian.PutUint64(mad[8:], h.TID)
	binary.BigEndian.PutUint16(mad[16:], uint16(a))
	binary.BigEndian.PutUint32(mad[20:], h.AttrMod)
	return b, mad[HeaderLen:]
}

// grow appends n zero bytes to b.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		b = b[:len(b)+n]
		clear(b[len(b)-n:])
		return b
	}
	return append(b, make([]byte, n)...)
}
