package wire

import "encoding/binary"

// Packet is a decoded RoCEv2 packet (the UDP payload). Only the headers named
// in Mask are meaningful. Payload aliases the buffer passed to Parse.
type Packet struct {
	BTH          BTH
	Mask         Mask // the opcode's mask (headers present, kind, position)
	RETH         RETH
	AETH         AETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
	DETH         DETH
	FETH         FETH
	Imm          uint32 // ImmDt, in host order of the big-endian wire value
	IETH         uint32 // R_Key to invalidate
	Payload      []byte
	ICRC         uint32 // as read from the wire (little-endian)
}

// Parse decodes b, a complete UDP payload from the BTH through the ICRC,
// into p without allocating. It checks the structure only (version, opcode,
// lengths, pad); the ICRC is checked separately (see VerifyICRC*).
func (p *Packet) Parse(b []byte) error {
	if len(b) < BTHLen+ICRCLen {
		return ErrTruncated
	}
	p.BTH.Decode(b)
	if p.BTH.TVer != 0 {
		return ErrBadVersion
	}
	info := opTable[p.BTH.Opcode]
	if info.Mask == 0 {
		switch t := p.BTH.Opcode.Transport(); {
		case p.BTH.Opcode == OpCNP, t == TransportRD, t == TransportXRC:
			return ErrUnsupportedOpcode
		}
		return ErrUnknownOpcode
	}
	p.Mask = info.Mask
	n := len(b) - ICRCLen
	if n < info.HdrLen {
		return ErrTruncated
	}
	off := BTHLen
	m := info.Mask
	// Header order (docs/protocol.md §2.2): DETH, RETH/AtomicETH (FLUSH: FETH then RETH), ImmDt, IETH;
	// responses: AETH then AtomicAckETH.
	if m&HasDETH != 0 {
		p.DETH.Decode(b[off:])
		off += DETHLen
	}
	if m&HasFETH != 0 {
		p.FETH.Decode(b[off:])
		off += FETHLen
	}
	if m&HasRETH != 0 {
		p.RETH.Decode(b[off:])
		off += RETHLen
	}
	if m&HasAtomicETH != 0 {
		p.AtomicETH.Decode(b[off:])
		off += AtomicETHLen
	}
	if m&HasAETH != 0 {
		p.AETH.Decode(b[off:])
		off += AETHLen
	}
	if m&HasAtomicAckETH != 0 {
		p.AtomicAckETH.Decode(b[off:])
		off += AtomicAckETHLen
	}
	if m&HasImmDt != 0 {
		p.Imm = binary.BigEndian.Uint32(b[off:])
		off += ImmDtLen
	}
	if m&HasIETH != 0 {
		p.IETH = binary.BigEndian.Uint32(b[off:])
		off += IETHLen
	}
	pad := int(p.BTH.PadCnt)
	plen := n - off - pad
	if m&HasPayload == 0 {
		if n != off {
			return ErrHeaderMismatch
		}
		if pad != 0 {
			return ErrBadPad
		}
	} else if plen < 0 || (plen+pad)&3 != 0 {
		// Headers are 4-byte multiples and packets 4-byte aligned, so
		// payload plus pad must be too.
		return ErrBadPad
	}
	if plen > MaxPayload {
		return ErrOversized
	}
	if m&IsAtomicWrite != 0 && plen != 8 {
		return ErrHeaderMismatch
	}
	p.Payload = b[off : off+plen : off+plen]
	p.ICRC = binary.LittleEndian.Uint32(b[n:])
	return nil
}

// PadLen returns the pad bytes that follow a payload of n bytes.
func PadLen(n int) int { return -n & 3 }

// AppendHeaders appends the BTH and the extension headers that p.BTH.Opcode
// requires, in wire order. The BTH is written as given (set PadCnt yourself,
// or use Append which does).
func (p *Packet) AppendHeaders(b []byte) []byte {
	m := opTable[p.BTH.Opcode].Mask
	b = p.BTH.Append(b)
	if m&HasDETH != 0 {
		b = p.DETH.Append(b)
	}
	if m&HasFETH != 0 {
		b = p.FETH.Append(b)
	}
	if m&HasRETH != 0 {
		b = p.RETH.Append(b)
	}
	if m&HasAtomicETH != 0 {
		b = p.AtomicETH.Append(b)
	}
	if m&HasAETH != 0 {
		b = p.AETH.Append(b)
	}
	if m&HasAtomicAckETH != 0 {
		b = p.AtomicAckETH.Append(b)
	}
	if m&HasImmDt != 0 {
		b = binary.BigEndian.AppendUint32(b, p.Imm)
	}
	if m&HasIETH != 0 {
		b = binary.BigEndian.AppendUint32(b, p.IETH)
	}
	return b
}

// Append appends the whole packet: headers (with BTH.PadCnt set from
// len(p.Payload)), payload, zero pad and a 4-byte ICRC placeholder (zero);
// the ICRC is filled in by whoever knows the IP header (see PutICRC).
func (p *Packet) Append(b []byte) []byte {
	p.BTH.PadCnt = uint8(PadLen(len(p.Payload)))
	b = p.AppendHeaders(b)
	b = append(b, p.Payload...)
	return append(b, make([]byte, int(p.BTH.PadCnt)+ICRCLen)...)
}
