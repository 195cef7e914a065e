package oob

import (
	"context"
	"fmt"
	"io"
	"net"
)

// DefaultPort is the TCP port of the ibv_*_pingpong tools and perftest.
const DefaultPort = 18515

// PingpongMsgLen is the size of one ibv_*_pingpong address message:
// sizeof "0000:000000:000000:00000000000000000000000000000000" (51 characters
// and the terminating NUL).
const PingpongMsgLen = 52

// SRQPingpongMaxQP is ibv_srq_pingpong's MAX_QP: it always sends and reads
// this many address messages, the ones past its -q QPs being all zero.
const SRQPingpongMaxQP = 256

var doneMsg = []byte("done\x00")

// PingpongDest is struct pingpong_dest of rdma-core's ibv_*_pingpong: the
// address of one QP, sent as sprintf("%04x:%06x:%06x:%s", lid, qpn, psn, gid)
// with the GID as 32 lowercase hex digits of its 16 bytes in wire order
// (gid_to_wire_gid), NUL-terminated. On RoCE the LID is 0 and the GID (the
// tools' -g index) must be set, or the tools cannot build a GRH.
type PingpongDest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID [16]byte
}

const hexDigits = "0123456789abcdef"

func appendHex(b []byte, v uint64, width int) []byte {
	for i := width - 1; i >= 0; i-- {
		b = append(b, hexDigits[v>>(4*uint(i))&15])
	}
	return b
}

// Append appends the 52-byte message for d. QPN and PSN are masked to 24 bits.
func (d *PingpongDest) Append(b []byte) []byte {
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN&0xFFFFFF), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN&0xFFFFFF), 6)
	b = append(b, ':')
	for _, g := range d.GID {
		b = append(b, hexDigits[g>>4], hexDigits[g&15])
	}
	return append(b, 0)
}

// String returns the message text without the NUL.
func (d PingpongDest) String() string {
	b := d.Append(make([]byte, 0, PingpongMsgLen))
	return string(b[:len(b)-1])
}

// unhex parses 1..max hex digits (either case).
func unhex(s []byte, max int) (uint64, bool) {
	if len(s) == 0 || len(s) > max {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

// cut returns the bytes of s before the first sep and the rest after it.
func cut(s []byte, sep byte) (before, after []byte, ok bool) {
	for i, c := range s {
		if c == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, nil, false
}

// ParsePingpongDest decodes one message (the 52 bytes read from the socket,
// or the text up to its NUL). Like the tools' sscanf("%x:%x:%x:%s") it
// accepts hex fields of any width up to the field size and either case; the
// GID must be 32 hex digits.
func ParsePingpongDest(b []byte) (PingpongDest, error) {
	var d PingpongDest
	text, _, _ := cut(b, 0)
	lid, rest, ok1 := cut(text, ':')
	qpn, rest, ok2 := cut(rest, ':')
	psn, gid, ok3 := cut(rest, ':')
	l, ok4 := unhex(lid, 4)
	q, ok5 := unhex(qpn, 6)
	p, ok6 := unhex(psn, 6)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || len(gid) != 32 {
		return d, ErrPingpongMsg
	}
	for i := range d.GID {
		v, ok := unhex(gid[2*i:2*i+2], 2)
		if !ok {
			return d, ErrPingpongMsg
		}
		d.GID[i] = byte(v)
	}
	d.LID, d.QPN, d.PSN = uint16(l), uint32(q), uint32(p)
	return d, nil
}

func readDest(r io.Reader, buf []byte) (PingpongDest, error) {
	if _, err := io.ReadFull(r, buf[:PingpongMsgLen]); err != nil {
		return PingpongDest{}, fmt.Errorf("oob: reading remote address: %w", err)
	}
	d, err := ParsePingpongDest(buf[:PingpongMsgLen])
	if err != nil {
		return d, fmt.Errorf("%w: got %q", err, buf[:PingpongMsgLen])
	}
	return d, nil
}

// encodeDests builds count messages: local, then zero addresses.
func encodeDests(local []PingpongDest, count int) ([]byte, error) {
	if len(local) > count {
		return nil, ErrCount
	}
	out := make([]byte, 0, count*PingpongMsgLen)
	var zero PingpongDest
	for i := range count {
		d := &zero
		if i < len(local) {
			d = &local[i]
		}
		out = d.Append(out)
	}
	return out, nil
}

// ClientExchange runs the client side of ibv_rc/uc/ud_pingpong's exchange on
// a connected conn: write the local 52-byte message, read the server's 52
// bytes, write "done" and its NUL (5 bytes). The caller moves its QP to
// RTR/RTS with the returned address and closes conn.
func ClientExchange(ctx context.Context, conn net.Conn, local PingpongDest) (PingpongDest, error) {
	r, err := ClientExchangeMulti(ctx, conn, []PingpongDest{local}, 1)
	if err != nil {
		return PingpongDest{}, err
	}
	return r[0], nil
}

// ClientExchangeMulti is ClientExchange for ibv_srq_pingpong: it writes count
// messages (local followed by zero addresses; the real tool uses count =
// SRQPingpongMaxQP), reads count messages back, then writes "done". It
// returns all count remote addresses; the first len(local) are the QPs.
func ClientExchangeMulti(ctx context.Context, conn net.Conn, local []PingpongDest, count int) ([]PingpongDest, error) {
	out, err := encodeDests(local, count)
	if err != nil {
		return nil, err
	}
	remote := make([]PingpongDest, count)
	err = bind(ctx, conn, func() error {
		// One write per message, as the tools do.
		for i := range count {
			if _, err := conn.Write(out[i*PingpongMsgLen : (i+1)*PingpongMsgLen]); err != nil {
				return fmt.Errorf("oob: sending local address: %w", err)
			}
		}
		var buf [PingpongMsgLen]byte
		for i := range remote {
			d, err := readDest(conn, buf[:])
			if err != nil {
				return err
			}
			remote[i] = d
		}
		if _, err := conn.Write(doneMsg); err != nil {
			return fmt.Errorf("oob: sending done: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return remote, nil
}

// ServerExchange runs the server side on an accepted conn: read the client's
// 52-byte message, call ready (may be nil) with it — the real server moves its
// QP to RTR/RTS here, before answering — then write the local message and
// read the client's "done". If ready fails, nothing is written and its error
// is returned.
func ServerExchange(ctx context.Context, conn net.Conn, local PingpongDest, ready func(remote PingpongDest) error) (PingpongDest, error) {
	var hook func([]PingpongDest) error
	if ready != nil {
		hook = func(r []PingpongDest) error { return ready(r[0]) }
	}
	r, err := ServerExchangeMulti(ctx, conn, []PingpongDest{local}, 1, hook)
	if err != nil {
		return PingpongDest{}, err
	}
	return r[0], nil
}

// ServerExchangeMulti is ServerExchange for ibv_srq_pingpong: it reads count
// messages, calls ready with all of them, writes count messages (local then
// zero addresses) and reads "done".
func ServerExchangeMulti(ctx context.Context, conn net.Conn, local []PingpongDest, count int, ready func(remote []PingpongDest) error) ([]PingpongDest, error) {
	out, err := encodeDests(local, count)
	if err != nil {
		return nil, err
	}
	remote := make([]PingpongDest, count)
	err = bind(ctx, conn, func() error {
		var buf [PingpongMsgLen]byte
		for i := range remote {
			d, err := readDest(conn, buf[:])
			if err != nil {
				return err
			}
			remote[i] = d
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if ready != nil {
		if err := ready(remote); err != nil {
			return nil, err
		}
	}
	err = bind(ctx, conn, func() error {
		for i := range count {
			if _, err := conn.Write(out[i*PingpongMsgLen : (i+1)*PingpongMsgLen]); err != nil {
				return fmt.Errorf("oob: sending local address: %w", err)
			}
		}
		var done [5]byte
		if _, err := io.ReadFull(conn, done[:]); err != nil {
			return fmt.Errorf("%w: %w", ErrDone, err)
		}
		if string(done[:]) != string(doneMsg) {
			return fmt.Errorf("%w: got %q", ErrDone, done[:])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return remote, nil
}
