package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// Errors returned by the Reader.
var (
	// ErrFormat reports a file that is neither pcap nor pcapng, or is corrupt.
	ErrFormat = errors.New("capture: not a pcap or pcapng file, or a corrupt one")
	// ErrLinkType reports a link type the Reader cannot find IP packets in.
	ErrLinkType = errors.New("capture: unsupported link type (want Ethernet, Linux cooked SLL/SLL2, raw IP or loopback)")
)

// File magic numbers.
const (
	magicMicros   = 0xA1B2C3D4
	magicNanos    = 0xA1B23C4D
	ngBlockSHB    = 0x0A0D0D0A
	ngByteOrder   = 0x1A2B3C4D
	ngBlockIDB    = 1
	ngBlockOldPkt = 2
	ngBlockSPB    = 3
	ngBlockEPB    = 6

	// maxRecord bounds the memory one record can make the reader allocate.
	maxRecord = 16 << 20
)

// ReaderOptions configures NewReader. The zero value (or nil) reads RoCEv2
// on the standard UDP port 4791.
type ReaderOptions struct {
	// Ports are the UDP destination ports that carry RoCEv2; nil means 4791.
	Ports []uint16
}

// ReaderStats counts what a Reader has seen so far.
type ReaderStats struct {
	Frames  uint64 // frames read from the file
	RoCE    uint64 // frames returned by Next (UDP to a RoCEv2 port)
	Skipped uint64 // other frames: ARP, TCP, other UDP, fragments, unknown link types
}

// Reader returns the RoCEv2 datagrams of a pcap or pcapng file. It is not
// safe for concurrent use.
type Reader struct {
	r     *bufio.Reader
	ports []uint16
	buf   []byte
	hdr   [28]byte
	stats ReaderStats

	ng    bool
	order binary.ByteOrder

	// pcap
	linkType LinkType
	nanos    bool

	// pcapng: per-interface link type and timestamp resolution.
	ifaces []ngIface
}

type ngIface struct {
	linkType LinkType
	snaplen  uint32
	// Timestamps are ticks of 1/tsPerSec seconds, plus tsOffset seconds.
	tsPerSec uint64
	tsOffset int64
}

// NewReader reads the file header of a pcap or pcapng stream.
func NewReader(r io.Reader, opts *ReaderOptions) (*Reader, error) {
	rd := &Reader{r: bufio.NewReaderSize(r, 1<<16), ports: []uint16{4791}, buf: make([]byte, 0, 1<<16)}
	if opts != nil && len(opts.Ports) > 0 {
		rd.ports = slices.Clone(opts.Ports)
	}
	var m [4]byte
	if _, err := io.ReadFull(rd.r, m[:]); err != nil {
		return nil, fmt.Errorf("%w: reading the file header: %v", ErrFormat, err)
	}
	if binary.LittleEndian.Uint32(m[:]) == ngBlockSHB {
		rd.ng = true
		if err := rd.readSHB(); err != nil {
			return nil, err
		}
		return rd, nil
	}
	var h [20]byte
	if _, err := io.ReadFull(rd.r, h[:]); err != nil {
		return nil, fmt.Errorf("%w: pcap header: %v", ErrFormat, err)
	}
	switch {
	case binary.LittleEndian.Uint32(m[:]) == magicMicros:
		rd.order = binary.LittleEndian
	case binary.BigEndian.Uint32(m[:]) == magicMicros:
		rd.order = binary.BigEndian
	case binary.LittleEndian.Uint32(m[:]) == magicNanos:
		rd.order, rd.nanos = binary.LittleEndian, true
	case binary.BigEndian.Uint32(m[:]) == magicNanos:
		rd.order, rd.nanos = binary.BigEndian, true
	default:
		return nil, fmt.Errorf("%w: unknown magic %x", ErrFormat, m)
	}
	// The low 16 bits are the link type; higher ones carry FCS information.
	rd.linkType = LinkType(rd.order.Uint32(h[16:]) & 0xFFFF)
	if !rd.linkType.Supported() {
		return nil, fmt.Errorf("%w: %v", ErrLinkType, rd.linkType)
	}
	return rd, nil
}

// Stats returns the counts so far.
func (r *Reader) Stats() ReaderStats { return r.stats }

// Next fills p with the next RoCEv2 datagram, skipping other frames. It
// returns io.EOF at the end of the file. p's slices alias the Reader's
// buffer and stay valid until the next call.
func (r *Reader) Next(p *Packet) error {
	for {
		data, lt, err := r.nextFrame(p)
		if err != nil {
			return err
		}
		if lt.Supported() && ParseFrame(lt, data, p) && slices.Contains(r.ports, p.Dst.Port()) {
			r.stats.RoCE++
			return nil
		}
		r.stats.Skipped++
	}
}

// Frame is one link-layer frame of a capture, whatever it carries.
type Frame struct {
	// Time is the capture timestamp.
	Time time.Time
	// Number is the 1-based number of the frame in the file.
	Number uint64
	// LinkType is the link type of the frame's interface.
	LinkType LinkType
	// Data is the frame as captured (from the link-layer header on); it
	// aliases the Reader's buffer and is valid until the next call.
	Data []byte
	// WireLen is the frame's length on the wire, as recorded in the file.
	WireLen int
}

// NextFrame fills f with the next frame of the file, whatever it carries
// (for what Next skips: TCP, ARP, ...; see ParseFrame for the UDP
// datagrams among them). It returns io.EOF at the end of the file.
func (r *Reader) NextFrame(f *Frame) error {
	var p Packet
	data, lt, err := r.nextFrame(&p)
	if err != nil {
		return err
	}
	*f = Frame{Time: p.Time, Number: p.Frame, LinkType: lt, Data: data, WireLen: p.WireLen}
	return nil
}

// nextFrame reads the next packet record and sets p's time, frame number
// and wire length.
func (r *Reader) nextFrame(p *Packet) (data []byte, lt LinkType, err error) {
	for {
		var (
			ok      bool
			wireLen int
		)
		if r.ng {
			data, lt, wireLen, ok, err = r.nextNg(p)
		} else {
			data, wireLen, err = r.nextPcap(p)
			lt, ok = r.linkType, true
		}
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			continue // not a packet block
		}
		r.stats.Frames++
		p.Frame = r.stats.Frames
		p.WireLen = wireLen
		return data, lt, nil
	}
}

// grow returns r.buf resized to n bytes.
func (r *Reader) grow(n int) []byte {
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	return r.buf[:n]
}

func (r *Reader) nextPcap(p *Packet) (data []byte, wireLen int, err error) {
	if _, err := io.ReadFull(r.r, r.hdr[:16]); err != nil {
		if err == io.EOF {
			return nil, 0, io.EOF
		}
		return nil, 0, fmt.Errorf("%w: record header of frame %d: %v", ErrFormat, r.stats.Frames+1, err)
	}
	sec := r.order.Uint32(r.hdr[0:])
	frac := r.order.Uint32(r.hdr[4:])
	caplen := r.order.Uint32(r.hdr[8:])
	wireLen = int(r.order.Uint32(r.hdr[12:]))
	if caplen > maxRecord {
		return nil, 0, fmt.Errorf("%w: frame %d claims %d bytes", ErrFormat, r.stats.Frames+1, caplen)
	}
	data = r.grow(int(caplen))
	if _, err := io.ReadFull(r.r, data); err != nil {
		return nil, 0, fmt.Errorf("%w: frame %d cut short: %v", ErrFormat, r.stats.Frames+1, io.ErrUnexpectedEOF)
	}
	if !r.nanos {
		frac *= 1000
	}
	p.Time = time.Unix(int64(sec), int64(frac))
	return data, wireLen, nil
}

// readSHB reads a pcapng section header block; its type has been consumed.
func (r *Reader) readSHB() error {
	var h [8]byte // block total length, byte-order magic
	if _, err := io.ReadFull(r.r, h[:]); err != nil {
		return fmt.Errorf("%w: pcapng section header: %v", ErrFormat, err)
	}
	switch {
	case binary.LittleEndian.Uint32(h[4:]) == ngByteOrder:
		r.order = binary.LittleEndian
	case binary.BigEndian.Uint32(h[4:]) == ngByteOrder:
		r.order = binary.BigEndian
	default:
		return fmt.Errorf("%w: bad pcapng byte-order magic", ErrFormat)
	}
	n := r.order.Uint32(h[0:])
	if n < 28 || n%4 != 0 || n > maxRecord {
		return fmt.Errorf("%w: pcapng section header length %d", ErrFormat, n)
	}
	if _, err := r.r.Discard(int(n) - 12); err != nil {
		return fmt.Errorf("%w: pcapng section header: %v", ErrFormat, err)
	}
	r.ifaces = r.ifaces[:0] // interfaces are per section
	return nil
}

// nextNg reads one pcapng block. ok is false for blocks that are not packets.
func (r *Reader) nextNg(p *Packet) (data []byte, lt LinkType, wireLen int, ok bool, err error) {
	var h [8]byte
	if _, err := io.ReadFull(r.r, h[:4]); err != nil {
		if err == io.EOF {
			return nil, 0, 0, false, io.EOF
		}
		return nil, 0, 0, false, fmt.Errorf("%w: pcapng block: %v", ErrFormat, err)
	}
	if binary.LittleEndian.Uint32(h[:4]) == ngBlockSHB {
		return nil, 0, 0, false, r.readSHB()
	}
	if _, err := io.ReadFull(r.r, h[4:]); err != nil {
		return nil, 0, 0, false, fmt.Errorf("%w: pcapng block: %v", ErrFormat, err)
	}
	typ, n := r.order.Uint32(h[:]), r.order.Uint32(h[4:])
	if n < 12 || n%4 != 0 || n > maxRecord {
		return nil, 0, 0, false, fmt.Errorf("%w: pcapng block length %d", ErrFormat, n)
	}
	body := r.grow(int(n) - 8)
	if _, err := io.ReadFull(r.r, body); err != nil {
		return nil, 0, 0, false, fmt.Errorf("%w: pcapng block cut short", ErrFormat)
	}
	body = body[:len(body)-4] // trailing total length
	switch typ {
	case ngBlockIDB:
		return nil, 0, 0, false, r.readIDB(body)
	case ngBlockEPB, ngBlockOldPkt:
		if len(body) < 20 {
			return nil, 0, 0, false, fmt.Errorf("%w: short pcapng packet block", ErrFormat)
		}
		var id uint32
		if typ == ngBlockEPB {
			id = r.order.Uint32(body)
		} else {
			id = uint32(r.order.Uint16(body))
		}
		if int(id) >= len(r.ifaces) {
			return nil, 0, 0, false, fmt.Errorf("%w: packet on undeclared interface %d", ErrFormat, id)
		}
		ifc := &r.ifaces[id]
		ts := uint64(r.order.Uint32(body[4:]))<<32 | uint64(r.order.Uint32(body[8:]))
		caplen := int(r.order.Uint32(body[12:]))
		wireLen = int(r.order.Uint32(body[16:]))
		if caplen > len(body)-20 {
			return nil, 0, 0, false, fmt.Errorf("%w: pcapng packet longer than its block", ErrFormat)
		}
		sec := ts / ifc.tsPerSec
		frac := ts % ifc.tsPerSec
		nsec := int64(float64(frac) * 1e9 / float64(ifc.tsPerSec))
		p.Time = time.Unix(int64(sec)+ifc.tsOffset, nsec)
		return body[20 : 20+caplen], ifc.linkType, wireLen, true, nil
	case ngBlockSPB:
		if len(body) < 4 || len(r.ifaces) == 0 {
			return nil, 0, 0, false, fmt.Errorf("%w: simple packet block without interface", ErrFormat)
		}
		ifc := &r.ifaces[0]
		wireLen = int(r.order.Uint32(body))
		caplen := min(wireLen, len(body)-4)
		if ifc.snaplen != 0 {
			caplen = min(caplen, int(ifc.snaplen))
		}
		p.Time = time.Time{}
		return body[4 : 4+caplen], ifc.linkType, wireLen, true, nil
	}
	return nil, 0, 0, false, nil // statistics, name resolution, custom, ...
}

// readIDB records an interface description block.
func (r *Reader) readIDB(body []byte) error {
	if len(body) < 8 {
		return fmt.Errorf("%w: short pcapng interface block", ErrFormat)
	}
	ifc := ngIface{
		linkType: LinkType(r.order.Uint16(body)),
		snaplen:  r.order.Uint32(body[4:]),
		tsPerSec: 1e6,
	}
	opts := body[8:]
	for len(opts) >= 4 {
		code, l := r.order.Uint16(opts), int(r.order.Uint16(opts[2:]))
		if code == 0 || 4+l > len(opts) {
			break
		}
		v := opts[4 : 4+l]
		switch {
		case code == 9 && l >= 1: // if_tsresol
			e := uint64(v[0] & 0x7F)
			base := uint64(10)
			if v[0]&0x80 != 0 {
				base = 2
			}
			tps := uint64(1)
			for range e {
				if tps > math.MaxUint64/base {
					return fmt.Errorf("%w: pcapng timestamp resolution out of range", ErrFormat)
				}
				tps *= base
			}
			ifc.tsPerSec = tps
		case code == 14 && l == 8: // if_tsoffset
			ifc.tsOffset = int64(r.order.Uint64(v))
		}
		opts = opts[4+(l+3)&^3:]
	}
	r.ifaces = append(r.ifaces, ifc)
	return nil
}

// ReadAll returns all the RoCEv2 datagrams of the pcap or pcapng stream r
// (see NewReader for opts). Unlike Next's, the packets' slices are their
// own: they stay valid. It is meant for tests and tools that look at a
// whole capture at once.
func ReadAll(r io.Reader, opts *ReaderOptions) ([]Packet, error) {
	rd, err := NewReader(r, opts)
	if err != nil {
		return nil, err
	}
	var out []Packet
	for {
		var p Packet
		if err := rd.Next(&p); err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		b := make([]byte, len(p.IPHdr)+len(p.Payload))
		n := copy(b, p.IPHdr)
		copy(b[n:], p.Payload)
		p.IPHdr, p.Payload = b[:n:n], b[n:]
		out = append(out, p)
	}
}
