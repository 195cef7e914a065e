package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/wire"
)

// Errors returned by the Writer.
var (
	// ErrAddrFamily reports a datagram whose source and destination are not
	// both IPv4 (or IPv4-mapped) or both IPv6.
	ErrAddrFamily = errors.New("capture: source and destination addresses are of different IP families")
	// ErrTooLong reports a datagram that does not fit in an IP packet.
	ErrTooLong = errors.New("capture: datagram longer than an IP packet can carry")
	// ErrSynthLinkType reports WritePacket on a Writer whose link type is
	// neither Ethernet nor raw IP, for which it cannot synthesise frames.
	ErrSynthLinkType = errors.New("capture: WritePacket needs link type Ethernet or raw IP")
)

// DefaultSnaplen is the snap length written to the file header (as tcpdump's).
const DefaultSnaplen = 262144

// Options configures a Writer. The zero value (or nil) writes
// microsecond-resolution pcap with LINKTYPE_ETHERNET.
type Options struct {
	// LinkType of the frames: LinkTypeEthernet (default) or LinkTypeRaw for
	// WritePacket; anything for WriteFrame.
	LinkType LinkType
	// Snaplen is the largest frame stored; longer frames are cut (0: DefaultSnaplen).
	Snaplen int
	// Nanoseconds selects the nanosecond-resolution pcap format.
	Nanoseconds bool
	// TTL is the IPv4 TTL / IPv6 hop limit of synthesised headers (0: 64).
	TTL uint8
	// TOS is the IPv4 TOS / IPv6 traffic class of the headers WritePacket
	// synthesises (WritePacketTOS, and so Tee, write each datagram's own).
	TOS uint8
	// PreserveICRC keeps each datagram's ICRC as given instead of computing
	// it for the synthesised headers. For IPv4 the Identification field is
	// then chosen to make the ICRC valid if any value does (a packet as the
	// kernel sent it), so only a genuinely corrupt ICRC shows as bad.
	PreserveICRC bool
}

// Writer writes a pcap file. Its methods are safe for concurrent use; each
// record reaches the underlying writer in a single Write call.
type Writer struct {
	opts Options

	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error // sticky write error

	bw     *bufio.Writer // set by Create
	closer io.Closer     // set by Create

	packets atomic.Uint64
	bytes   atomic.Uint64
}

// NewWriter writes the pcap file header to w and returns a Writer.
func NewWriter(w io.Writer, opts *Options) (*Writer, error) {
	pw := &Writer{w: w, buf: make([]byte, 0, 16+ethHdrLen+ipv6HdrLen+udpHdrLen+4096+64)}
	if opts != nil {
		pw.opts = *opts
	}
	if pw.opts.LinkType == 0 {
		pw.opts.LinkType = LinkTypeEthernet
	}
	if pw.opts.Snaplen <= 0 {
		pw.opts.Snaplen = DefaultSnaplen
	}
	if pw.opts.TTL == 0 {
		pw.opts.TTL = 64
	}
	var h [24]byte
	magic := uint32(magicMicros)
	if pw.opts.Nanoseconds {
		magic = magicNanos
	}
	binary.LittleEndian.PutUint32(h[0:], magic)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], uint32(pw.opts.Snaplen))
	binary.LittleEndian.PutUint32(h[20:], uint32(pw.opts.LinkType))
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("capture: writing the pcap header: %w", err)
	}
	return pw, nil
}

// Create creates (or truncates) the named file and returns a buffered Writer
// on it; Close flushes and closes the file.
func Create(name string, opts *Options) (*Writer, error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	w, err := NewWriter(bw, opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.bw, w.closer = bw, f
	return w, nil
}

// Packets returns the number of records written.
func (w *Writer) Packets() uint64 { return w.packets.Load() }

// Bytes returns the number of frame bytes written (excluding record headers).
func (w *Writer) Bytes() uint64 { return w.bytes.Load() }

// Flush writes buffered records to the file (Writers made by Create only;
// otherwise it does nothing).
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if w.bw == nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil && w.err == nil {
		w.err = fmt.Errorf("capture: %w", err)
	}
	return w.err
}

// Close flushes and, for a Writer made by Create, closes the file. Later
// writes fail.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.flushLocked()
	if w.closer != nil {
		if cerr := w.closer.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("capture: %w", cerr)
		}
		w.closer = nil
	}
	if w.err == nil {
		w.err = errors.New("capture: write to a closed Writer")
	}
	return err
}

// appendRecordHeader appends a pcap record header for a frame of n bytes.
func (w *Writer) appendRecordHeader(b []byte, ts time.Time, n int) []byte {
	frac := uint32(ts.Nanosecond())
	if !w.opts.Nanoseconds {
		frac /= 1000
	}
	caplen := min(n, w.opts.Snaplen)
	b = binary.LittleEndian.AppendUint32(b, uint32(ts.Unix()))
	b = binary.LittleEndian.AppendUint32(b, frac)
	b = binary.LittleEndian.AppendUint32(b, uint32(caplen))
	return binary.LittleEndian.AppendUint32(b, uint32(n))
}

// commit writes w.buf (a record header plus a frame of n bytes, possibly
// more than the snap length) with the lock held.
func (w *Writer) commit(n int) error {
	if w.err != nil {
		return w.err
	}
	rec := w.buf[:16+min(n, w.opts.Snaplen)]
	if _, err := w.w.Write(rec); err != nil {
		w.err = fmt.Errorf("capture: %w", err)
		return w.err
	}
	w.packets.Add(1)
	w.bytes.Add(uint64(len(rec) - 16))
	return nil
}

// WriteFrame records a frame of the Writer's link type as captured: data
// holds the captured bytes, wireLen the frame's length on the wire (0: the
// same as len(data)).
func (w *Writer) WriteFrame(ts time.Time, data []byte, wireLen int) error {
	if wireLen < len(data) {
		wireLen = len(data)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = w.appendRecordHeader(w.buf[:0], ts, wireLen)
	// The record header says caplen = min(wireLen, snaplen); never claim
	// more than we have.
	caplen := min(len(data), w.opts.Snaplen)
	binary.LittleEndian.PutUint32(w.buf[8:], uint32(caplen))
	w.buf = append(w.buf, data[:caplen]...)
	return w.commit(caplen)
}

// MACFor returns the Ethernet address the Writer gives an IP address:
// 02:00 followed by the IPv4 address, or 02 followed by the last five bytes
// of an IPv6 address (locally administered, unicast).
func MACFor(a netip.Addr) [6]byte {
	a = a.Unmap()
	if a.Is4() {
		v := a.As4()
		return [6]byte{0x02, 0x00, v[0], v[1], v[2], v[3]}
	}
	v := a.As16()
	return [6]byte{0x02, v[11], v[12], v[13], v[14], v[15]}
}

// WritePacket records one RoCEv2 datagram (udpPayload: BTH through ICRC)
// sent from src to dst, inside synthesised Ethernet (unless the link type
// is raw IP), IPv4 or IPv6 and UDP headers, with Options.TOS. IPv4-mapped
// addresses are written as IPv4; a zero destination port is written as
// 4791. The ICRC in the record is recomputed for the synthesised headers
// (see Options.PreserveICRC); udpPayload itself is not modified.
func (w *Writer) WritePacket(ts time.Time, src, dst netip.AddrPort, udpPayload []byte) error {
	return w.WritePacketTOS(ts, src, dst, w.opts.TOS, udpPayload)
}

// WritePacketTOS is WritePacket with the datagram's own IPv4 TOS or IPv6
// traffic class (DSCP and ECN), as a device's traffic carries it (Tee).
// The ICRC does not cover it.
func (w *Writer) WritePacketTOS(ts time.Time, src, dst netip.AddrPort, tos uint8, udpPayload []byte) error {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	if sa.Is4() != da.Is4() || !sa.IsValid() || !da.IsValid() {
		return fmt.Errorf("%w: %v and %v", ErrAddrFamily, src, dst)
	}
	sport, dport := src.Port(), dst.Port()
	if dport == 0 {
		dport = wire.UDPPort
	}
	ulen := udpHdrLen + len(udpPayload)
	if ulen > 0xFFFF-ipv6HdrLen {
		return fmt.Errorf("%w: %d bytes", ErrTooLong, len(udpPayload))
	}
	var eth bool
	switch w.opts.LinkType {
	case LinkTypeEthernet:
		eth = true
	case LinkTypeRaw:
	default:
		return ErrSynthLinkType
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.buf[:16] // record header, filled below
	if eth {
		dm, sm := MACFor(da), MACFor(sa)
		b = append(b, dm[:]...)
		b = append(b, sm[:]...)
		if sa.Is4() {
			b = binary.BigEndian.AppendUint16(b, etherTypeIPv4)
		} else {
			b = binary.BigEndian.AppendUint16(b, etherTypeIPv6)
		}
	}
	var ipv4ID uint16
	if sa.Is4() {
		if len(udpPayload) >= wire.ICRCLen && w.opts.PreserveICRC {
			if id, ok := wire.VerifyICRCAddrs(netip.AddrPortFrom(sa, sport), netip.AddrPortFrom(da, dport), udpPayload); ok {
				ipv4ID = id
			}
		}
		ih := wire.IPv4Header{TOS: tos, TotalLen: uint16(wire.IPv4HeaderLen + ulen), ID: ipv4ID, DF: true, TTL: w.opts.TTL,
			Src: sa.As4(), Dst: da.As4()}
		b = ih.Append(b)
	} else {
		ih := wire.IPv6Header{TrafficClass: tos, PayloadLen: uint16(ulen), HopLimit: w.opts.TTL, Src: sa.As16(), Dst: da.As16()}
		b = ih.Append(b)
	}
	b = binary.BigEndian.AppendUint16(b, sport)
	b = binary.BigEndian.AppendUint16(b, dport)
	b = binary.BigEndian.AppendUint16(b, uint16(ulen))
	b = append(b, 0, 0) // UDP checksum 0, as rxe sends
	pl := len(b)
	b = append(b, udpPayload...)
	if n := len(udpPayload); n >= wire.ICRCLen && !w.opts.PreserveICRC {
		wire.PutICRC(b[pl:], wire.ICRCFor(netip.AddrPortFrom(sa, sport), netip.AddrPortFrom(da, dport), 0, b[pl:pl+n-wire.ICRCLen]))
	}
	frame := len(b) - 16
	w.buf = w.appendRecordHeader(b[:0], ts, frame)[:len(b)]
	return w.commit(frame)
}
