package pipeline

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// PacketFormat describes the UDP packets of a digitiser stream: a header of
// HeaderLen bytes holding a sequence number, then PayloadSize bytes of data.
// The zero value means the defaults: an 8-byte big-endian sequence number at
// offset 0 of an 8-byte header, 8192 bytes of payload, step 1.
type PacketFormat struct {
	HeaderLen    int    // bytes before the payload (default 8; 0 with SeqWidth set is invalid)
	PayloadSize  int    // data bytes per packet (default 8192)
	SeqOffset    int    // offset of the sequence number in the header
	SeqWidth     int    // 4 or 8 bytes (default 8)
	LittleEndian bool   // byte order of the sequence number (default big-endian, network order)
	SeqStep      uint64 // difference between consecutive packets' sequence numbers (default 1)
}

// withDefaults fills in zero fields and checks the layout.
func (f PacketFormat) withDefaults() (PacketFormat, error) {
	if f.SeqWidth == 0 {
		f.SeqWidth = 8
	}
	if f.HeaderLen == 0 {
		f.HeaderLen = f.SeqOffset + f.SeqWidth
	}
	if f.PayloadSize == 0 {
		f.PayloadSize = 8192
	}
	if f.SeqStep == 0 {
		f.SeqStep = 1
	}
	switch {
	case f.SeqWidth != 4 && f.SeqWidth != 8:
		return f, fmt.Errorf("%w: sequence number width %d (want 4 or 8 bytes)", ErrConfig, f.SeqWidth)
	case f.SeqOffset < 0 || f.SeqOffset+f.SeqWidth > f.HeaderLen:
		return f, fmt.Errorf("%w: a %d-byte sequence number at offset %d does not fit a %d-byte header", ErrConfig, f.SeqWidth, f.SeqOffset, f.HeaderLen)
	case f.PayloadSize < 1 || f.HeaderLen+f.PayloadSize > 65507:
		return f, fmt.Errorf("%w: %d-byte header + %d-byte payload: a UDP datagram holds at most 65507 bytes", ErrConfig, f.HeaderLen, f.PayloadSize)
	}
	return f, nil
}

// PacketLen is the datagram size: HeaderLen + PayloadSize.
func (f PacketFormat) PacketLen() int { return f.HeaderLen + f.PayloadSize }

// Seq reads the sequence number from a packet header.
func (f PacketFormat) Seq(hdr []byte) uint64 {
	b := hdr[f.SeqOffset : f.SeqOffset+f.SeqWidth]
	switch {
	case f.SeqWidth == 4 && f.LittleEndian:
		return uint64(binary.LittleEndian.Uint32(b))
	case f.SeqWidth == 4:
		return uint64(binary.BigEndian.Uint32(b))
	case f.LittleEndian:
		return binary.LittleEndian.Uint64(b)
	}
	return binary.BigEndian.Uint64(b)
}

// PutSeq writes a sequence number into a packet header.
func (f PacketFormat) PutSeq(hdr []byte, seq uint64) {
	b := hdr[f.SeqOffset : f.SeqOffset+f.SeqWidth]
	switch {
	case f.SeqWidth == 4 && f.LittleEndian:
		binary.LittleEndian.PutUint32(b, uint32(seq))
	case f.SeqWidth == 4:
		binary.BigEndian.PutUint32(b, uint32(seq))
	case f.LittleEndian:
		binary.LittleEndian.PutUint64(b, seq)
	default:
		binary.BigEndian.PutUint64(b, seq)
	}
}

// FillPattern fills b with the test pattern at stream position pos: the
// little-endian 64-bit word at every 8-aligned position p is p, so that any
// byte of a stream can be checked on its own and zero-filled losses stand
// out.
func FillPattern(b []byte, pos uint64) {
	i := 0
	for ; i < len(b) && (pos+uint64(i))%8 != 0; i++ {
		p := pos + uint64(i)
		b[i] = byte((p &^ 7) >> (8 * (p % 8)))
	}
	v := pos + uint64(i)
	for ; i+32 <= len(b); i += 32 {
		w := b[i : i+32 : i+32]
		binary.LittleEndian.PutUint64(w[0:], v)
		binary.LittleEndian.PutUint64(w[8:], v+8)
		binary.LittleEndian.PutUint64(w[16:], v+16)
		binary.LittleEndian.PutUint64(w[24:], v+24)
		v += 32
	}
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], pos+uint64(i))
	}
	for ; i < len(b); i++ {
		p := pos + uint64(i)
		b[i] = byte((p &^ 7) >> (8 * (p % 8)))
	}
}

// CheckPattern returns the offset of the first byte of b that differs from
// the pattern at pos, or -1 if b matches.
func CheckPattern(b []byte, pos uint64) int {
	i := 0
	for ; i < len(b) && (pos+uint64(i))%8 != 0; i++ {
		p := pos + uint64(i)
		if b[i] != byte((p&^7)>>(8*(p%8))) {
			return i
		}
	}
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != pos+uint64(i) {
			for j := i; ; j++ {
				p := pos + uint64(j)
				if b[j] != byte((p&^7)>>(8*(p%8))) {
					return j
				}
			}
		}
	}
	for ; i < len(b); i++ {
		p := pos + uint64(i)
		if b[i] != byte((p&^7)>>(8*(p%8))) {
			return i
		}
	}
	return -1
}

// Stats are the live counters of a sender or receiver, updated atomically
// while it runs.
type Stats struct {
	Bytes     atomic.Uint64 // data bytes sent, or placed into the ring (zero fill excluded)
	Packets   atomic.Uint64 // UDP datagrams sent or placed; RoCE: RDMA writes
	Blocks    atomic.Uint64 // ring blocks marked filled (receiver) or written (RoCE sender)
	Lost      atomic.Uint64 // UDP: packets never received, zero-filled in the ring
	Late      atomic.Uint64 // UDP: packets that arrived after their block was closed (dropped)
	Dup       atomic.Uint64 // UDP: duplicate packets (dropped)
	Reordered atomic.Uint64 // UDP: packets that arrived after a later one (placed)
	Bad       atomic.Uint64 // UDP: datagrams of the wrong size or with a sequence number out of range
	Skipped   atomic.Uint64 // UDP sender: packets left out on purpose (loss injection)
	WaitNanos atomic.Int64  // time spent waiting for a free ring block (receiver) or a credit (sender)
	Full      atomic.Int64  // receiver: ring blocks full and not yet read, at the last filled block
	Transfers atomic.Uint64 // observations completed
}
