package oob

import "encoding/binary"

// RDMAInfoLen is the size of rping's struct rping_rdma_info and krping's
// struct krping_rdma_info.
const RDMAInfoLen = 16

// RDMAInfo is the buffer advertisement rping and krping send as an RDMA
// SEND: the buffer's address (u64), its rkey (u32) and its size (u32), all in
// network byte order. The rping client sends one for its source buffer (the
// server RDMA READs it) and one for its sink buffer (the server RDMA WRITEs
// it) per ping; the server's SENDs in reply ("go ahead") carry 16 bytes of
// its own, unused by the client (zero in the captures).
type RDMAInfo struct {
	Addr uint64
	RKey uint32
	Size uint32
}

// Append appends the 16-byte encoding of i.
func (i *RDMAInfo) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, i.Addr)
	b = binary.BigEndian.AppendUint32(b, i.RKey)
	return binary.BigEndian.AppendUint32(b, i.Size)
}

// ParseRDMAInfo decodes a received advertisement. rping checks the receive
// length is exactly 16 bytes (sizeof struct rping_rdma_info); so does this.
func ParseRDMAInfo(b []byte) (RDMAInfo, error) {
	if len(b) != RDMAInfoLen {
		return RDMAInfo{}, ErrRDMAInfo
	}
	return RDMAInfo{
		Addr: binary.BigEndian.Uint64(b),
		RKey: binary.BigEndian.Uint32(b[8:]),
		Size: binary.BigEndian.Uint32(b[12:]),
	}, nil
}

// RpingFill writes rping's data pattern for ping number ping into buf, as the
// rping client does before advertising its source buffer: the text
// "rdma-ping-<ping>: " followed by consecutive characters from 'A' to 'z'
// (wrapping to 'A'), starting at 'A'+ping%58, and a final NUL. If the text
// does not fit, it is truncated like snprintf (the last byte is still NUL).
func RpingFill(buf []byte, ping int) {
	if len(buf) == 0 {
		return
	}
	var tmp [32]byte
	txt := append(append(tmp[:0], "rdma-ping-"...), itoa(ping)...)
	txt = append(txt, ": "...)
	n := copy(buf[:len(buf)-1], txt)
	c := byte('A' + ping%58)
	if ping < 0 {
		c = 'A'
	}
	for i := n; i < len(buf); i++ {
		buf[i] = c
		c++
		if c > 'z' {
			c = 'A'
		}
	}
	buf[len(buf)-1] = 0
}

func itoa(v int) []byte {
	var b [20]byte
	i := len(b)
	u := uint64(v)
	neg := v < 0
	if neg {
		u = uint64(-v)
	}
	for {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return b[i:]
}
