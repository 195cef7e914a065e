package oob

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"syscall"
)

// PerftestVersion is the VERSION string of perftest 4.5+0.17.
const PerftestVersion = "6.06"

// Message sizes of the perftest side channel.
const (
	PerftestVersionLen = 16  // sizeof(user_param->version)
	PerftestDestLen    = 59  // KEY_MSG_SIZE: "%04x:%04x:%06x:%06x:%08x:%016Lx:%08x" + NUL
	PerftestDestGIDLen = 108 // KEY_MSG_SIZE_GID: with 16 ":%02x" GID bytes and a trailing ':'
)

// PerftestDest is perftest's struct pingpong_dest as sent over TCP:
// LID:OUT_READS:QPN:PSN:RKEY:VADDR[:GID bytes]:SRQN, lowercase hex.
type PerftestDest struct {
	LID      uint16
	OutReads uint16 // outstanding RDMA reads/atomics (-o), 1 for SEND/WRITE tests
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32 // XRC/DC SRQ number, 0 otherwise
}

// Append appends the message for d: 108 bytes with the GID when withGID is
// set (perftest's gid_index != -1), else 59 bytes.
func (d *PerftestDest) Append(b []byte, withGID bool) []byte {
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.OutReads), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN&0xFFFFFF), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN&0xFFFFFF), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.RKey), 8)
	b = append(b, ':')
	b = appendHex(b, d.VAddr, 16)
	b = append(b, ':')
	if withGID {
		for _, g := range d.GID {
			b = append(b, hexDigits[g>>4], hexDigits[g&15], ':')
		}
		b = appendHex(b, uint64(d.SRQN), 8)
		b = append(b, ':')
	} else {
		b = appendHex(b, uint64(d.SRQN), 8)
	}
	return append(b, 0)
}

// ParsePerftestDest decodes a 59-byte (no GID) or 108-byte (GID) message.
// Like perftest's strtol-based reader it accepts any field width up to the
// field size.
func ParsePerftestDest(b []byte) (PerftestDest, error) {
	var d PerftestDest
	text, _, _ := cut(b, 0)
	if len(text) > 0 && text[len(text)-1] == ':' {
		text = text[:len(text)-1]
	}
	var f [23][]byte
	n := 0
	for rest := text; ; {
		if n == len(f) {
			return d, ErrPerftestMsg
		}
		var ok bool
		f[n], rest, ok = cut(rest, ':')
		n++
		if !ok {
			break
		}
	}
	var vals [6]uint64
	widths := [6]int{4, 4, 6, 6, 8, 16}
	if n != 7 && n != 23 {
		return d, ErrPerftestMsg
	}
	for i, w := range widths {
		v, ok := unhex(f[i], w)
		if !ok {
			return d, ErrPerftestMsg
		}
		vals[i] = v
	}
	if n == 23 {
		for i := range d.GID {
			v, ok := unhex(f[6+i], 2)
			if !ok {
				return d, ErrPerftestMsg
			}
			d.GID[i] = byte(v)
		}
	}
	srqn, ok := unhex(f[n-1], 8)
	if !ok {
		return d, ErrPerftestMsg
	}
	d.LID, d.OutReads, d.QPN, d.PSN = uint16(vals[0]), uint16(vals[1]), uint32(vals[2]), uint32(vals[3])
	d.RKey, d.VAddr, d.SRQN = uint32(vals[4]), vals[5], uint32(srqn)
	return d, nil
}

// SysData is what check_sys_data exchanges.
type SysData struct {
	CycleBuffer   int32 // page size (sysconf(_SC_PAGESIZE)), 4096
	CacheLineSize int32 // 64
}

// BWReport is perftest's struct bw_report_data as xchg_bw_reports sends it
// (without the per-port fields of --report-per-port).
type BWReport struct {
	Size       uint64  // message size in bytes
	Iters      uint64  // iterations
	BWPeak     float64 // MB/s
	BWAvg      float64 // MB/s
	MsgRateAvg float64 // Mpps
}

// PerftestConn is one side of perftest's TCP side channel (perftest 4.5,
// Debian bookworm 4.5+0.17). Create it with NewPerftestConn on a connected
// (client) or accepted (server) socket, then call Run, or the exchanges one by
// one in this order. It is not safe for concurrent use.
//
// The client connects to the server's TCP port (18515 by default; perftest -p).
// Every exchange is symmetric: the client writes its message then reads the
// server's; the server reads first then writes (ctx_xchg_data_ethernet,
// ctx_hand_shake). Each message is one write(2) and the peer reads it with a
// single read(2) of exactly its size. In order:
//
//  1. version: 16 bytes, the VERSION string NUL-padded ("6.06" for 4.5+0.17);
//     exchange_versions. Later steps depend on the remote version (atof).
//  2. system data, if the remote version >= 5.32 (check_sys_data): the cycle
//     buffer (page size, 4096) then the cache line size (64), each a 4-byte
//     big-endian int; both sides then use the larger values.
//  3. MTU, if the remote version >= 5.1 (check_mtu): sprintf("%d") of the
//     active MTU enum (3 = 1024) sent as 2 bytes ("3\0"; 4 bytes if the remote
//     is older than 5.31); both use the smaller valid value.
//  4. addresses: per QP one PerftestDest message, 108 bytes with the GID
//     (perftest -x, always the case on RoCE), else 59 (ctx_hand_shake).
//     The tools then move their QPs to RTR/RTS (ctx_connect), exchange the
//     addresses of every QP again, and do one more handshake "after moving the
//     QP to RTR". ib_send_bw and the latency tests add one more handshake
//     right before the traffic (after posting receives).
//  5. traffic (RDMA, not on this socket).
//  6. write/read/atomic BW tests (non-duplex): one handshake, then the BW
//     report (xchg_bw_reports): size (8 bytes), iterations (8 bytes, 4 if the
//     remote is older than 5.33), peak BW, average BW and message rate
//     (IEEE-754 doubles), all big-endian, each exchanged separately. The
//     client sends its results; the server's are not meaningful.
//  7. close (ctx_close_connection): one handshake, then each side writes
//     "done" and its NUL (5 bytes) without waiting and closes the socket.
//     ib_write_lat 4.5 skips this step and just closes.
//
// PerftestPlan gives the handshake counts of each tool as captured; Run
// drives a whole session. WithGID must match the peer (perftest -x on both
// sides, as RoCE requires). Duplex (-b) and all-sizes (-a) runs add
// handshakes per message size that Run does not model.
type PerftestConn struct {
	conn   net.Conn
	client bool
	// WithGID selects the 108-byte address messages (perftest -x / RoCE).
	// NewPerftestConn sets it.
	WithGID bool
	// RemoteVersion is the peer's version, set by ExchangeVersions;
	// until then the peer is assumed to be PerftestVersion.
	RemoteVersion string
	remVer        float64
	buf           [PerftestDestGIDLen]byte
}

// NewPerftestConn wraps conn. client selects the order of every exchange
// (client writes first).
func NewPerftestConn(conn net.Conn, client bool) *PerftestConn {
	return &PerftestConn{conn: conn, client: client, WithGID: true, RemoteVersion: PerftestVersion, remVer: 6.06}
}

// Conn returns the underlying socket.
func (c *PerftestConn) Conn() net.Conn { return c.conn }

// xchg sends out and reads len(in) bytes, client first.
func (c *PerftestConn) xchg(ctx context.Context, out, in []byte) error {
	return bind(ctx, c.conn, func() error {
		if c.client {
			if _, err := c.conn.Write(out); err != nil {
				return fmt.Errorf("oob: perftest write: %w", err)
			}
		}
		if _, err := io.ReadFull(c.conn, in); err != nil {
			return fmt.Errorf("oob: perftest read: %w", err)
		}
		if !c.client {
			if _, err := c.conn.Write(out); err != nil {
				return fmt.Errorf("oob: perftest write: %w", err)
			}
		}
		return nil
	})
}

// atof mimics C's atof on a version string: the leading decimal number.
func atof(s string) float64 {
	end := 0
	dot := false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !dot) {
		if s[end] == '.' {
			dot = true
		}
		end++
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(s[:end], "."), 64)
	if err != nil {
		return 0
	}
	return v
}

// ExchangeVersions sends local (at most 15 bytes; use PerftestVersion) as
// the 16-byte version message and returns the peer's version.
func (c *PerftestConn) ExchangeVersions(ctx context.Context, local string) (string, error) {
	var out, in [PerftestVersionLen]byte
	if len(local) >= PerftestVersionLen {
		return "", ErrVersion
	}
	copy(out[:], local)
	if err := c.xchg(ctx, out[:], in[:]); err != nil {
		return "", err
	}
	text, _, ok := cut(in[:], 0)
	if !ok {
		return "", fmt.Errorf("%w: got %q", ErrVersion, in[:])
	}
	c.RemoteVersion = string(text)
	c.remVer = atof(c.RemoteVersion)
	return c.RemoteVersion, nil
}

// ExchangeSysData runs check_sys_data: it returns the element-wise maximum
// of local and the peer's values, which both sides then use. With a peer
// older than 5.32 nothing is exchanged and local is returned.
func (c *PerftestConn) ExchangeSysData(ctx context.Context, local SysData) (SysData, error) {
	if c.remVer < 5.32 {
		return local, nil
	}
	var out, in [4]byte
	binary.BigEndian.PutUint32(out[:], uint32(local.CycleBuffer))
	if err := c.xchg(ctx, out[:], in[:]); err != nil {
		return local, err
	}
	res := local
	res.CycleBuffer = max(local.CycleBuffer, int32(binary.BigEndian.Uint32(in[:])))
	binary.BigEndian.PutUint32(out[:], uint32(local.CacheLineSize))
	if err := c.xchg(ctx, out[:], in[:]); err != nil {
		return local, err
	}
	res.CacheLineSize = max(local.CacheLineSize, int32(binary.BigEndian.Uint32(in[:])))
	return res, nil
}

// ExchangeMTU runs check_mtu's exchange of the active MTU enum (1..5, e.g. 3
// for 1024 bytes) and returns the MTU both sides use: the smaller, if the
// peer's is valid. With a peer older than 5.1 nothing is exchanged.
func (c *PerftestConn) ExchangeMTU(ctx context.Context, local int) (int, error) {
	if c.remVer < 5.1 {
		return local, nil
	}
	n := 2
	if c.remVer < 5.31 {
		n = 4
	}
	var out, in [4]byte
	s := strconv.Itoa(local)
	if len(s) >= n {
		return local, ErrMTU
	}
	copy(out[:], s)
	if err := c.xchg(ctx, out[:n], in[:n]); err != nil {
		return local, err
	}
	text, _, _ := cut(in[:n], 0)
	rem, err := strconv.Atoi(string(text))
	if err != nil {
		return local, fmt.Errorf("%w: got %q", ErrMTU, in[:n])
	}
	if rem >= 1 && rem <= 5 && rem < local {
		return rem, nil
	}
	return local, nil
}

// HandShake exchanges one address message (ctx_hand_shake): the tools call
// it once per QP to learn the peer's addresses and also as a barrier.
func (c *PerftestConn) HandShake(ctx context.Context, local *PerftestDest) (PerftestDest, error) {
	n := PerftestDestLen
	if c.WithGID {
		n = PerftestDestGIDLen
	}
	out := local.Append(make([]byte, 0, PerftestDestGIDLen), c.WithGID)
	in := c.buf[:n]
	if err := c.xchg(ctx, out, in); err != nil {
		return PerftestDest{}, err
	}
	d, err := ParsePerftestDest(in)
	if err != nil {
		return d, fmt.Errorf("%w: got %q", err, in)
	}
	return d, nil
}

// ExchangeBWReport runs xchg_bw_reports on the TCP side channel
// (XchgBWReport).
func (c *PerftestConn) ExchangeBWReport(ctx context.Context, local BWReport) (BWReport, error) {
	return XchgBWReport(ctx, c.remVer, c.xchg, local)
}

// XchgBWReport is xchg_bw_reports over any exchange of equal-sized messages
// (xchg sends out and reads as many bytes into in; the TCP side channel's,
// or perftest -R's on the rdma_cm connection): five values, each on its
// own, big-endian; the iteration count is 4 bytes with a peer (version
// remVer) older than 5.33.
func XchgBWReport(ctx context.Context, remVer float64, xchg func(ctx context.Context, out, in []byte) error,
	local BWReport) (BWReport, error) {
	var out, in [8]byte
	vals := [5]uint64{local.Size, local.Iters, math.Float64bits(local.BWPeak), math.Float64bits(local.BWAvg),
		math.Float64bits(local.MsgRateAvg)}
	var got [5]uint64
	for i, v := range vals {
		n := 8
		if i == 1 && remVer < 5.33 {
			n = 4
			binary.BigEndian.PutUint32(out[:], uint32(v))
		} else {
			binary.BigEndian.PutUint64(out[:], v)
		}
		if err := xchg(ctx, out[:n], in[:n]); err != nil {
			return BWReport{}, err
		}
		if n == 4 {
			got[i] = uint64(binary.BigEndian.Uint32(in[:]))
		} else {
			got[i] = binary.BigEndian.Uint64(in[:])
		}
	}
	return BWReport{Size: got[0], Iters: got[1], BWPeak: math.Float64frombits(got[2]),
		BWAvg: math.Float64frombits(got[3]), MsgRateAvg: math.Float64frombits(got[4])}, nil
}

// Close runs ctx_close_connection: one handshake, then "done" and its NUL
// are written; the peer's "done" is read if it arrives (perftest writes it
// without waiting, and ib_write_lat 4.5 does not send it at all), and the
// socket is closed.
func (c *PerftestConn) Close(ctx context.Context, local *PerftestDest) error {
	if _, err := c.HandShake(ctx, local); err != nil {
		c.conn.Close()
		return err
	}
	err := bind(ctx, c.conn, func() error {
		// perftest writes its "done" and closes at once, without reading
		// ours: when ours arrives after that close, the peer's kernel
		// answers with a reset. A peer that closed (EOF) or reset the
		// connection here has finished the exchange.
		if _, err := c.conn.Write(doneMsg); err != nil {
			if peerClosed(err) {
				return nil
			}
			return fmt.Errorf("oob: perftest write done: %w", err)
		}
		var done [5]byte
		if _, err := io.ReadFull(c.conn, done[:]); err != nil {
			if err == io.EOF || peerClosed(err) {
				return nil
			}
			return fmt.Errorf("%w: %w", ErrDone, err)
		}
		if string(done[:]) != string(doneMsg) {
			return fmt.Errorf("%w: got %q", ErrDone, done[:])
		}
		return nil
	})
	if cerr := c.conn.Close(); err == nil {
		err = cerr
	}
	return err
}

// PerftestTest names a perftest tool.
type PerftestTest int

// The perftest tools.
const (
	SendBW PerftestTest = iota
	WriteBW
	ReadBW
	AtomicBW
	SendLat
	WriteLat
	ReadLat
	AtomicLat
)

var testNames = [...]string{"send_bw", "write_bw", "read_bw", "atomic_bw", "send_lat", "write_lat", "read_lat", "atomic_lat"}

// String returns the tool name without the ib_ prefix, e.g. "write_bw".
func (t PerftestTest) String() string {
	if t >= 0 && int(t) < len(testNames) {
		return testNames[t]
	}
	return "perftest(" + strconv.Itoa(int(t)) + ")"
}

// PerftestPlan is the shape of one tool's side-channel session (non-duplex,
// one message size, perftest 4.5+0.17 as captured). After the setup
// (versions, system data, MTU) the tools do, in order:
//
//	numQPs handshakes, move QPs to RTR/RTS, numQPs handshakes, 1 handshake
//	(Connect), then SyncBeforeTraffic more handshakes, traffic, then
//	Report (1 handshake + BW report) and Close (handshake + "done").
type PerftestPlan struct {
	SyncBeforeTraffic int  // extra handshakes after Connect, before traffic
	Report            bool // post-test handshake and BW report exchange
	Close             bool // ctx_close_connection
}

// Plan returns the side-channel shape of t, as captured from perftest
// 4.5+0.17 (../shared/captures: 3 setup handshakes for write/read/atomic BW,
// 4 for send_bw and the latency tests with one QP).
func (t PerftestTest) Plan() PerftestPlan {
	switch t {
	case WriteBW, ReadBW, AtomicBW:
		return PerftestPlan{Report: true, Close: true}
	case SendBW, SendLat, ReadLat, AtomicLat:
		return PerftestPlan{SyncBeforeTraffic: 1, Close: true}
	case WriteLat:
		return PerftestPlan{SyncBeforeTraffic: 1}
	}
	return PerftestPlan{Close: true}
}

// Setup runs steps 1-3: versions, system data and MTU, returning the
// negotiated system data and MTU.
func (c *PerftestConn) Setup(ctx context.Context, sys SysData, mtu int) (SysData, int, error) {
	if _, err := c.ExchangeVersions(ctx, PerftestVersion); err != nil {
		return sys, mtu, err
	}
	sys, err := c.ExchangeSysData(ctx, sys)
	if err != nil {
		return sys, mtu, err
	}
	mtu, err = c.ExchangeMTU(ctx, mtu)
	return sys, mtu, err
}

// Connect runs step 4: a handshake per QP, connect (may be nil) with the
// peer's addresses (move the QPs to RTR/RTS there), a second handshake per
// QP, and the handshake after RTR. It returns the peer's addresses.
func (c *PerftestConn) Connect(ctx context.Context, local []PerftestDest, connect func(remote []PerftestDest) error) ([]PerftestDest, error) {
	remote := make([]PerftestDest, len(local))
	for i := range local {
		r, err := c.HandShake(ctx, &local[i])
		if err != nil {
			return nil, err
		}
		remote[i] = r
	}
	if connect != nil {
		if err := connect(remote); err != nil {
			return nil, err
		}
	}
	for i := range local {
		r, err := c.HandShake(ctx, &local[i])
		if err != nil {
			return nil, err
		}
		remote[i] = r
	}
	if len(local) > 0 {
		if _, err := c.HandShake(ctx, &local[0]); err != nil {
			return nil, err
		}
	}
	return remote, nil
}

// PerftestSession is one side's part in a whole perftest session, run by
// PerftestConn.Run. Every hook may be nil.
type PerftestSession struct {
	Test  PerftestTest
	Sys   SysData        // local system data, e.g. {4096, 64}
	MTU   int            // local active MTU enum (3 = 1024 bytes)
	Local []PerftestDest // one per QP

	// Connect gets the negotiated system data and MTU and the peer's
	// addresses, between the two rounds of address handshakes: move the QPs
	// to RTR/RTS here.
	Connect func(sys SysData, mtu int, remote []PerftestDest) error
	// Ready runs after the connection handshakes, before the handshake that
	// releases the traffic in send_bw and the latency tests: post receives.
	Ready func() error
	// Traffic runs the test. The client's report is sent to the server in
	// the write/read/atomic BW tests; the server's is ignored by perftest.
	Traffic func() (BWReport, error)
	// Report receives the peer's BW report (write/read/atomic BW tests).
	Report func(remote BWReport)
}

// Run runs a whole session on c, in the order perftest 4.5+0.17 does (see
// PerftestPlan), and closes the socket at the end (or on error).
func (c *PerftestConn) Run(ctx context.Context, s *PerftestSession) (err error) {
	closed := false
	defer func() {
		if !closed {
			if cerr := c.conn.Close(); err == nil {
				err = cerr
			}
		}
	}()
	if len(s.Local) == 0 {
		return ErrCount
	}
	plan := s.Test.Plan()
	sys, mtu, err := c.Setup(ctx, s.Sys, s.MTU)
	if err != nil {
		return err
	}
	var connect func([]PerftestDest) error
	if s.Connect != nil {
		connect = func(r []PerftestDest) error { return s.Connect(sys, mtu, r) }
	}
	if _, err := c.Connect(ctx, s.Local, connect); err != nil {
		return err
	}
	if s.Ready != nil {
		if err := s.Ready(); err != nil {
			return err
		}
	}
	local := &s.Local[0]
	for range plan.SyncBeforeTraffic {
		if _, err := c.HandShake(ctx, local); err != nil {
			return err
		}
	}
	var rep BWReport
	if s.Traffic != nil {
		if rep, err = s.Traffic(); err != nil {
			return err
		}
	}
	if plan.Report {
		if _, err := c.HandShake(ctx, local); err != nil {
			return err
		}
		rem, err := c.ExchangeBWReport(ctx, rep)
		if err != nil {
			return err
		}
		if s.Report != nil {
			s.Report(rem)
		}
	}
	if plan.Close {
		closed = true
		return c.Close(ctx, local)
	}
	return nil
}

// peerClosed reports an error that means the peer closed or reset the
// connection.
func peerClosed(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
