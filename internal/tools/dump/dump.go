package dump

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/wire"
)

func init() {
	registerCmd(&cli.Command{
		Name:    "dump",
		Summary: "capture RoCEv2 traffic to pcap, or decode a pcap (like ibdump/tcpdump)",
		Run:     runDump,
	})
}

// dumpConfig holds the dump flags.
type dumpConfig struct {
	read, iface, write string
	count              int
	ports              []uint16
	snaplen            int
	noPromisc          bool
	flushEach          bool
	verbose, hexdump   bool
	tsMode             int // 0 time of day, 1 none, 2 epoch, 3 delta, 4 date, 5 since first
	local              *time.Location
}

func runDump(args []string, stdout, stderr io.Writer) int {
	g := cli.Getopt{Prog: "softroce dump", LongOnly: true}
	var c dumpConfig
	portList := "4791"
	var ts, verbose, hex, numeric int
	g.Str('r', "", &c.read).Describe("file", "read packets from a pcap/pcapng file (- for stdin) and print them")
	g.Str('i', "", &c.iface).Describe("interface", "capture on an interface (any for all); needs root or CAP_NET_RAW")
	g.Str('w', "", &c.write).Describe("file", "write the captured frames to a pcap file instead of printing them")
	g.NumIn('c', "", &c.count, 1, math.MaxInt).Describe("count", "stop after this many packets (default: until Ctrl-C or SIGTERM)")
	g.Str(0, "port", &portList).Describe("ports", "UDP destination ports carrying RoCEv2, comma-separated (default 4791)")
	g.NumIn('s', "", &c.snaplen, 0, 262144).Describe("snaplen", "with -i: keep at most this many bytes of each frame (0: 262144)")
	g.Flag('p', "", &c.noPromisc).Describe("", "with -i: do not put the interface in promiscuous mode")
	g.Flag('U', "", &c.flushEach).Describe("", "with -w: flush the file after every packet")
	g.Count('v', "", &verbose).Describe("", "also print UDP source port, IP TTL/TOS/ID, P_Key, pad count and ICRC")
	g.Count('x', "", &hex).Describe("", "print each packet's UDP payload in hex")
	g.Count('n', "", &numeric).Describe("", "do not resolve addresses (accepted: softroce dump never does; -nn too)")
	g.Count('t', "", &ts).Describe("", "timestamps: -t none, -tt epoch seconds, -ttt since the previous packet, -tttt date and time, -ttttt since the first packet")
	g.Synopsis = `-r FILE [-vx] [-nn] [-t...] [-c COUNT] [--port LIST]
       softroce dump -i IFACE [-w FILE [-U]] [-c COUNT] [-s SNAPLEN] [-p] [--port LIST]

Decodes RoCEv2 packets (BTH and extension headers, CM MADs on QP1; bad ICRCs
flagged) from a pcap or pcapng file, or captures UDP port 4791 on an interface
into a pcap file (Ethernet framing, readable by Wireshark) like ibdump. The
options are tcpdump's.`
	ops, code, ok := g.ParseArgs(args, stdout, stderr, nil)
	if !ok {
		return code
	}
	if len(ops) > 0 {
		return cli.UsageErr(stderr, g.Prog, "unexpected argument %q (filters are not supported; use --port)", ops[0])
	}
	if ts > 5 {
		// tcpdump's words (it exits 1; like the other option errors, 2 here).
		return cli.UsageErr(stderr, g.Prog, "only -t, -tt, -ttt, -tttt and -ttttt are supported (-t given %d times)", ts)
	}
	c.verbose, c.hexdump = verbose > 0, hex > 0
	c.tsMode = ts
	c.local = time.Local
	for p := range strings.SplitSeq(portList, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
		if err != nil || n == 0 {
			return cli.UsageErr(stderr, g.Prog, "bad --port %q: want UDP ports 1-65535, comma-separated", p)
		}
		c.ports = append(c.ports, uint16(n))
	}
	switch {
	case c.read != "" && c.iface != "":
		return cli.UsageErr(stderr, g.Prog, "give -r FILE (decode) or -i IFACE (capture), not both")
	case c.read != "":
		if c.write != "" {
			return cli.UsageErr(stderr, g.Prog, "-w goes with -i (capture)")
		}
		if cli.ArgsOnly {
			return cli.ExitOK
		}
		return dumpRead(&c, stdout, stderr)
	case c.iface != "":
		if cli.ArgsOnly {
			return cli.ExitOK
		}
		return dumpLive(&c, stdout, stderr)
	}
	return cli.UsageErr(stderr, g.Prog, "give -r FILE to decode a capture or -i IFACE to capture")
}

// dumpCounts is the summary of a decode.
type dumpCounts struct {
	packets, badICRC, unknown, truncated uint64
}

// dumpDecoder prints packets one per line.
type dumpDecoder struct {
	c           *dumpConfig
	out         io.Writer
	line        []byte
	scratch     []byte
	first, prev time.Time
	n           dumpCounts
}

func dumpRead(c *dumpConfig, stdout, stderr io.Writer) int {
	var in io.Reader = os.Stdin
	if c.read != "-" {
		f, err := os.Open(c.read)
		if err != nil {
			fmt.Fprintf(stderr, "softroce dump: %v\n", err)
			return 1
		}
		defer f.Close()
		in = f
	}
	r, err := capture.NewReader(in, &capture.ReaderOptions{Ports: c.ports})
	if err != nil {
		fmt.Fprintf(stderr, "softroce dump: %s: %v\n", c.read, err)
		return 1
	}
	bw := bufio.NewWriterSize(stdout, 1<<16)
	defer bw.Flush()
	d := &dumpDecoder{c: c, out: bw}
	var p capture.Packet
	code := 0
	for c.count == 0 || d.n.packets < uint64(c.count) {
		err := r.Next(&p)
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(stderr, "softroce dump: %s: %v\n", c.read, err)
			code = 1
			break
		}
		d.print(&p)
	}
	d.summary(r.Stats().Skipped)
	return code
}

func dumpLive(c *dumpConfig, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := capture.OpenLive(c.iface, &capture.LiveOptions{Ports: c.ports, Snaplen: c.snaplen, NoPromisc: c.noPromisc})
	if err != nil {
		fmt.Fprintf(stderr, "softroce dump: %v\n", err)
		return 1
	}
	defer l.Close()
	var w *capture.Writer
	if c.write != "" {
		w, err = capture.Create(c.write, &capture.Options{LinkType: l.LinkType(), Snaplen: l.Snaplen()})
		if err != nil {
			fmt.Fprintf(stderr, "softroce dump: %v\n", err)
			return 1
		}
		defer w.Close()
	}
	fmt.Fprintf(stderr, "softroce dump: listening on %s, link-type %v, snapshot length %d bytes, UDP ports %s\n",
		c.iface, l.LinkType(), l.Snaplen(), portsString(c.ports))
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	d := &dumpDecoder{c: c, out: stdout}
	buf := make([]byte, l.Snaplen())
	var captured uint64
	code := 0
	for c.count == 0 || captured < uint64(c.count) {
		n, wireLen, ts, err := l.ReadFrame(buf)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, os.ErrClosed) {
				fmt.Fprintf(stderr, "softroce dump: %v\n", err)
				code = 1
			}
			break
		}
		captured++
		if w != nil {
			if err := w.WriteFrame(ts, buf[:n], wireLen); err != nil {
				fmt.Fprintf(stderr, "softroce dump: %v\n", err)
				code = 1
				break
			}
			if c.flushEach {
				if err := w.Flush(); err != nil {
					fmt.Fprintf(stderr, "softroce dump: %v\n", err)
					code = 1
					break
				}
			}
			continue
		}
		var p capture.Packet
		if capture.ParseFrame(l.LinkType(), buf[:n], &p) {
			p.Time, p.Frame, p.WireLen = ts, captured, wireLen
			d.print(&p)
		}
	}
	st, serr := l.Stats()
	if w != nil {
		if err := w.Close(); err != nil {
			fmt.Fprintf(stderr, "softroce dump: %v\n", err)
			code = 1
		}
	} else {
		d.summary(0)
	}
	fmt.Fprintf(stderr, "%d packets captured\n", captured)
	if serr == nil {
		fmt.Fprintf(stderr, "%d packets received by filter\n%d packets dropped by kernel\n", st.Received, st.Dropped)
	}
	return code
}

func portsString(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

func (d *dumpDecoder) summary(skipped uint64) {
	fmt.Fprintf(d.out, "%d packets, %d bad ICRC, %d unknown", d.n.packets, d.n.badICRC, d.n.unknown)
	if d.n.truncated > 0 {
		fmt.Fprintf(d.out, ", %d truncated", d.n.truncated)
	}
	if skipped > 0 {
		fmt.Fprintf(d.out, " (%d other frames skipped)", skipped)
	}
	fmt.Fprintln(d.out)
}

// appendTime formats the timestamp as tcpdump's -t options do.
func (d *dumpDecoder) appendTime(b []byte, ts time.Time) []byte {
	if d.first.IsZero() {
		d.first, d.prev = ts, ts
	}
	defer func() { d.prev = ts }()
	rel := func(dt time.Duration) []byte {
		s := int64(dt / time.Second)
		us := int64(dt%time.Second) / 1000
		if dt < 0 {
			b = append(b, '-')
			s, us = -s, -us
		}
		return fmt.Appendf(b, "%d.%06d ", s, us)
	}
	switch d.c.tsMode {
	case 1:
		return b
	case 2:
		return fmt.Appendf(b, "%d.%06d ", ts.Unix(), ts.Nanosecond()/1000)
	case 3:
		return rel(ts.Sub(d.prev))
	case 4:
		return ts.In(d.c.local).AppendFormat(b, "2006-01-02 15:04:05.000000 ")
	case 5:
		return rel(ts.Sub(d.first))
	}
	return ts.In(d.c.local).AppendFormat(b, "15:04:05.000000 ")
}

// print writes one line for p.
func (d *dumpDecoder) print(p *capture.Packet) {
	d.n.packets++
	b := d.appendTime(d.line[:0], p.Time)
	b = p.Src.Addr().AppendTo(b)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(p.Src.Port()), 10)
	b = append(b, " > "...)
	b = p.Dst.Addr().AppendTo(b)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(p.Dst.Port()), 10)
	b = append(b, ": "...)
	if p.VLAN >= 0 {
		b = fmt.Appendf(b, "vlan %d ", p.VLAN)
	}
	b = d.appendRoCE(b, p)
	b = append(b, '\n')
	if d.c.hexdump {
		b = dumpAppendHex(b, p.Payload)
	}
	d.line = b
	d.out.Write(b)
}

// appendRoCE decodes the UDP payload.
func (d *dumpDecoder) appendRoCE(b []byte, p *capture.Packet) []byte {
	data := p.Payload
	if p.Truncated {
		d.n.truncated++
		// Decode the headers that were captured: parse a zero-filled copy
		// of the declared length.
		if cap(d.scratch) < p.Len {
			d.scratch = make([]byte, p.Len)
		}
		data = d.scratch[:p.Len]
		clear(data[copy(data, p.Payload):])
	}
	b = d.appendHeaders(b, data, p)
	switch {
	case p.Truncated:
		b = fmt.Appendf(b, " [truncated: %d of %d bytes captured, ICRC not checked]", len(p.Payload), p.Len)
	case len(p.Payload) < wire.ICRCLen:
	case len(p.IPHdr) != 20 && len(p.IPHdr) != 40:
		b = append(b, " [IP options, ICRC not checked]"...)
	case !wire.VerifyICRC(p.IPHdr, p.Src.Port(), p.Dst.Port(), p.Payload):
		d.n.badICRC++
		want := wire.ICRC(p.IPHdr, dumpUDPHeader(p), p.Payload[:len(p.Payload)-wire.ICRCLen])
		b = fmt.Appendf(b, " BAD-ICRC 0x%08x (want 0x%08x)", wire.GetICRC(p.Payload), want)
	}
	return b
}

// appendBTHFlags appends the BTH flags that are set.
func (d *dumpDecoder) appendBTHFlags(b []byte, h *wire.BTH) []byte {
	if h.AckReq {
		b = append(b, " ackreq"...)
	}
	if h.SE {
		b = append(b, " se"...)
	}
	if h.M {
		b = append(b, " migreq"...)
	}
	if h.FECN {
		b = append(b, " fecn"...)
	}
	if h.BECN {
		b = append(b, " becn"...)
	}
	if h.PKey != wire.DefaultPKey || d.c.verbose {
		b = fmt.Appendf(b, " pkey 0x%04x", h.PKey)
	}
	return b
}

// appendHeaders decodes the BTH and extension headers of data.
func (d *dumpDecoder) appendHeaders(b, data []byte, p *capture.Packet) []byte {
	var pkt wire.Packet
	err := pkt.Parse(data)
	if err != nil {
		if len(data) == 0 {
			// Not RoCE: softroce's same-host lanes wake a sleeping
			// reader with an empty datagram (udp.Config.Local).
			return append(b, "EMPTY datagram (a softroce same-host lane's wake-up)"...)
		}
		if len(data) < wire.BTHLen {
			d.n.unknown++
			return fmt.Appendf(b, "UNKNOWN %d bytes (too short for a BTH)", len(data))
		}
		var h wire.BTH
		h.Decode(data)
		b = fmt.Appendf(b, "%v dqp 0x%06x psn 0x%06x", h.Opcode, h.DestQP, h.PSN)
		b = d.appendBTHFlags(b, &h)
		if h.Opcode == wire.OpCNP {
			// Congestion notification: BTH, 16 reserved bytes, ICRC.
			return b
		}
		d.n.unknown++
		var pe *wire.ParseError
		if errors.As(err, &pe) {
			b = append(b, " UNKNOWN ("...)
			b = append(b, pe.Reason...)
			b = append(b, ')')
		}
		return fmt.Appendf(b, " %d bytes", len(data))
	}
	h := &pkt.BTH
	m := pkt.Mask
	b = append(b, h.Opcode.String()...)
	b = fmt.Appendf(b, " dqp 0x%06x psn 0x%06x", h.DestQP, h.PSN)
	b = d.appendBTHFlags(b, h)
	if m&wire.HasDETH != 0 {
		b = fmt.Appendf(b, " DETH qkey 0x%08x srcqp 0x%06x", pkt.DETH.QKey, pkt.DETH.SrcQP)
	}
	if m&wire.HasFETH != 0 {
		b = fmt.Appendf(b, " FETH %s %s", flushSel(pkt.FETH.SEL), flushPLT(pkt.FETH.PLT))
	}
	if m&wire.HasRETH != 0 {
		b = fmt.Appendf(b, " RETH va 0x%016x rkey 0x%08x len %d", pkt.RETH.VA, pkt.RETH.RKey, pkt.RETH.Length)
	}
	if m&wire.HasAtomicETH != 0 {
		a := &pkt.AtomicETH
		b = fmt.Appendf(b, " AtomicETH va 0x%016x rkey 0x%08x", a.VA, a.RKey)
		if h.Opcode.Operation() == wire.OpCompareSwap {
			b = fmt.Appendf(b, " swap 0x%016x compare 0x%016x", a.SwapAdd, a.Compare)
		} else {
			b = fmt.Appendf(b, " add 0x%016x", a.SwapAdd)
		}
	}
	if m&wire.HasAETH != 0 {
		b = append(b, " AETH "...)
		b = appendAETH(b, pkt.AETH)
	}
	if m&wire.HasAtomicAckETH != 0 {
		b = fmt.Appendf(b, " AtomicAckETH orig 0x%016x", pkt.AtomicAckETH.Orig)
	}
	if m&wire.HasImmDt != 0 {
		b = fmt.Appendf(b, " imm 0x%08x", pkt.Imm)
	}
	if m&wire.HasIETH != 0 {
		b = fmt.Appendf(b, " IETH rkey 0x%08x", pkt.IETH)
	}
	if m&wire.HasPayload != 0 {
		b = fmt.Appendf(b, " payload %d", len(pkt.Payload))
	}
	if h.DestQP == 1 && m&wire.HasDETH != 0 && !p.Truncated {
		b = appendMAD(b, pkt.Payload)
	}
	if d.c.verbose {
		b = fmt.Appendf(b, " pad %d", h.PadCnt)
		b = appendIPVerbose(b, p.IPHdr)
		if !p.Truncated {
			b = fmt.Appendf(b, " icrc 0x%08x", pkt.ICRC)
		}
	}
	return b
}

// dumpUDPHeader rebuilds the UDP header (the checksum is masked by the ICRC).
func dumpUDPHeader(p *capture.Packet) []byte {
	var u [8]byte
	binary.BigEndian.PutUint16(u[0:], p.Src.Port())
	binary.BigEndian.PutUint16(u[2:], p.Dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(p.Payload)))
	return u[:]
}

func appendIPVerbose(b []byte, ip []byte) []byte {
	if len(ip) >= 20 && ip[0]>>4 == 4 {
		return fmt.Appendf(b, " tos 0x%02x ttl %d id %d", ip[1], ip[8], binary.BigEndian.Uint16(ip[4:]))
	}
	if len(ip) >= 40 {
		v := binary.BigEndian.Uint32(ip)
		return fmt.Appendf(b, " tclass 0x%02x flowlabel 0x%05x hlim %d", v>>20&0xFF, v&0xFFFFF, ip[7])
	}
	return b
}

// appendAETH decodes an AETH syndrome and MSN.
func appendAETH(b []byte, a wire.AETH) []byte {
	switch {
	case a.IsACK():
		b = append(b, "ACK"...)
		if n, ok := wire.Credits(a.Value()); ok {
			b = fmt.Appendf(b, " credits %d", n)
		}
	case a.IsRNR():
		b = fmt.Appendf(b, "RNR-NAK timer %d (%v)", a.Value(), wire.RNRTimeout(a.Value()))
	case a.IsNAK():
		b = append(b, "NAK "...)
		switch a.Value() {
		case wire.NAKPSNSeqError:
			b = append(b, "PSN-sequence-error"...)
		case wire.NAKInvalidReq:
			b = append(b, "invalid-request"...)
		case wire.NAKRemAccessErr:
			b = append(b, "remote-access-error"...)
		case wire.NAKRemOpErr:
			b = append(b, "remote-operational-error"...)
		case wire.NAKInvalidRDReq:
			b = append(b, "invalid-RD-request"...)
		default:
			b = fmt.Appendf(b, "reserved-code-%d", a.Value())
		}
	default:
		b = fmt.Appendf(b, "reserved-syndrome-0x%02x", a.Syndrome)
	}
	return fmt.Appendf(b, " msn %d", a.MSN)
}

func flushSel(sel uint8) string {
	switch sel {
	case wire.FlushSelRange:
		return "sel range"
	case wire.FlushSelWholeMR:
		return "sel whole-mr"
	}
	return "sel " + strconv.Itoa(int(sel))
}

func flushPLT(plt uint8) string {
	switch plt {
	case wire.FlushGlobalVisibility:
		return "plt global-visibility"
	case wire.FlushPersistence:
		return "plt persistence"
	}
	return "plt " + strconv.Itoa(int(plt))
}

// MAD common header: base version, class, class version, method, status,
// class-specific, transaction ID, attribute ID, reserved, attribute modifier.
const dumpMADHdrLen = 24

var madClasses = map[uint8]string{
	0x01: "SM", 0x81: "SM-DR", 0x03: "SA", 0x04: "PERF", 0x05: "BM", 0x06: "DM", 0x07: "CM", 0x08: "SNMP",
}

var madMethods = map[uint8]string{
	0x01: "Get", 0x02: "Set", 0x03: "Send", 0x05: "Trap", 0x06: "Report", 0x07: "TrapRepress",
	0x12: "GetTable", 0x13: "GetTraceTable", 0x14: "GetMulti", 0x15: "Delete",
	0x81: "GetResp", 0x86: "ReportResp", 0x92: "GetTableResp", 0x94: "GetMultiResp", 0x95: "DeleteResp",
}

var cmAttrs = map[uint16]string{
	0x0001: "ClassPortInfo", 0x0010: "REQ", 0x0011: "MRA", 0x0012: "REJ", 0x0013: "REP", 0x0014: "RTU",
	0x0015: "DREQ", 0x0016: "DREP", 0x0017: "SIDR_REQ", 0x0018: "SIDR_REP", 0x0019: "LAP", 0x001A: "APR",
}

// appendMAD decodes the common MAD header of a QP1 datagram, plus the
// communication IDs (and REJ reason) of CM messages.
func appendMAD(b []byte, m []byte) []byte {
	if len(m) < dumpMADHdrLen {
		return fmt.Appendf(b, " MAD truncated (%d bytes)", len(m))
	}
	class, method := m[1], m[3]
	attr := binary.BigEndian.Uint16(m[16:])
	status := binary.BigEndian.Uint16(m[4:])
	tid := binary.BigEndian.Uint64(m[8:])
	cn, ok := madClasses[class]
	switch {
	case ok:
	case class >= 0x09 && class <= 0x0F || class >= 0x30 && class <= 0x4F:
		cn = fmt.Sprintf("VENDOR-0x%02x", class)
	default:
		cn = fmt.Sprintf("CLASS-0x%02x", class)
	}
	b = append(b, " MAD "...)
	b = append(b, cn...)
	if class == 0x07 && cmAttrs[attr] != "" {
		b = append(b, ' ')
		b = append(b, cmAttrs[attr]...)
	} else {
		b = fmt.Appendf(b, " attr 0x%04x", attr)
	}
	if class != 0x07 || method != 0x03 {
		if mn := madMethods[method]; mn != "" {
			b = append(b, ' ')
			b = append(b, mn...)
		} else {
			b = fmt.Appendf(b, " method 0x%02x", method)
		}
	}
	if m[0] != 1 || class == 0x07 && m[2] != 2 {
		b = fmt.Appendf(b, " version %d/%d", m[0], m[2])
	}
	b = fmt.Appendf(b, " tid 0x%016x", tid)
	if status != 0 {
		b = fmt.Appendf(b, " status 0x%04x", status)
	}
	data := m[dumpMADHdrLen:]
	if class == 0x07 && len(data) >= 12 {
		lcid, rcid := binary.BigEndian.Uint32(data), binary.BigEndian.Uint32(data[4:])
		switch attr {
		case 0x0010: // REQ: local comm ID only
			b = fmt.Appendf(b, " lcid 0x%08x", lcid)
		case 0x0011, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016, 0x0019, 0x001A:
			b = fmt.Appendf(b, " lcid 0x%08x rcid 0x%08x", lcid, rcid)
			if attr == 0x0012 {
				b = fmt.Appendf(b, " reason %d", binary.BigEndian.Uint16(data[10:]))
			}
		case 0x0017, 0x0018:
			b = fmt.Appendf(b, " reqid 0x%08x", lcid)
		}
	}
	return b
}

// dumpAppendHex appends a tcpdump -x style hex dump.
func dumpAppendHex(b, data []byte) []byte {
	for off := 0; off < len(data); off += 16 {
		b = fmt.Appendf(b, "\t0x%04x: ", off)
		row := data[off:min(off+16, len(data))]
		for i := 0; i < len(row); i += 2 {
			b = hex.AppendEncode(b, row[i:min(i+2, len(row))])
			b = append(b, ' ')
		}
		b = append(b, '\n')
	}
	return b
}
