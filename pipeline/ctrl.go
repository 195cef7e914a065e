package pipeline

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/softroce/softroce/verbs"
)

// The control connection (TCP) carries framed messages: a type byte, a
// 4-byte big-endian length and the body.
const (
	msgHello  = 'H' // sender -> receiver: version, QP info, observation header
	msgAccept = 'A' // receiver -> sender: QP info, block size, number of blocks
	msgCredit = 'C' // receiver -> sender: a granted block
	msgDone   = 'D' // receiver -> sender: transfer complete (bytes, blocks)
	msgError  = 'E' // either way: the text of a fatal error
)

const protoVersion = 1

// The hello starts with the version, the verb the data travel with and the
// SEND chunk size, then the QPs and the header.
const (
	helloFixed = 2 + 1 + 4
	verbWrite  = 0 // RDMA WRITE WITH IMMEDIATE into the granted block
	verbSend   = 1 // SENDs into receives posted on the block's chunks
)

// maxMsg bounds a control message body (the largest is a header).
const maxMsg = 1 << 20

// ctrl frames messages on a control connection. Sending may happen from
// several goroutines (credits, an error); each message is one Write from a
// buffer reused under wmu, so a credit per block allocates nothing.
type ctrl struct {
	c    net.Conn
	r    *bufio.Reader
	wmu  sync.Mutex
	wbuf []byte
	rbuf []byte // recvReuse's body
}

func newCtrl(c net.Conn) *ctrl { return &ctrl{c: c, r: bufio.NewReader(c)} }

func (c *ctrl) send(typ byte, body []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := append(c.wbuf[:0], typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
	b = append(b, body...)
	if cap(b) <= 4096 {
		c.wbuf = b // keep small buffers (credits); a header-sized one may go
	}
	_, err := c.c.Write(b)
	return err
}

// recv reads one message. A peer's error message is returned as an error
// wrapping ErrPeer.
func (c *ctrl) recv() (byte, []byte, error) { return readMsg(c.r, nil) }

// recvReuse is recv with the body in a buffer of c's, valid until the next
// recvReuse: the steady-state reader (credits) allocates nothing. Only one
// goroutine may call it.
func (c *ctrl) recvReuse() (byte, []byte, error) {
	t, b, err := readMsg(c.r, c.rbuf)
	if err == nil && cap(b) <= 4096 {
		c.rbuf = b[:0]
	}
	return t, b, err
}

// readMsg reads one framed message from r, into buf if it has room (the
// type and length go there first: a header array of readMsg's own would
// escape through io.ReadFull).
func readMsg(r io.Reader, buf []byte) (byte, []byte, error) {
	if cap(buf) < 5 {
		buf = make([]byte, 5, 64)
	}
	h := buf[:5]
	if _, err := io.ReadFull(r, h); err != nil {
		return 0, nil, err
	}
	typ, n := h[0], binary.BigEndian.Uint32(h[1:])
	if n > maxMsg {
		return 0, nil, fmt.Errorf("%w: %d-byte message", ErrProtocol, n)
	}
	var body []byte
	if int(n) <= cap(buf) {
		body = buf[:n]
	} else {
		body = make([]byte, n)
	}
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the header promised a body
		}
		return 0, nil, err
	}
	if typ == msgError {
		return 0, nil, fmt.Errorf("%w: %s", ErrPeer, body)
	}
	return typ, body, nil
}

// expect reads one message of type typ with at least min bytes.
func (c *ctrl) expect(typ byte, min int) ([]byte, error) {
	t, b, err := c.recv()
	if err != nil {
		return nil, err
	}
	if t != typ || len(b) < min {
		return nil, fmt.Errorf("%w: got message %q of %d bytes, want %q", ErrProtocol, t, len(b), typ)
	}
	return b, nil
}

const qpInfoLen = 4 + 4 + 16 + 2 + 1

func appendQPInfo(b []byte, q qpInfo) []byte {
	b = binary.BigEndian.AppendUint32(b, q.QPN)
	b = binary.BigEndian.AppendUint32(b, q.PSN)
	b = append(b, q.GID[:]...)
	b = binary.BigEndian.AppendUint16(b, q.Port)
	return append(b, byte(q.MTU))
}

// maxQPs bounds the QPs of one stream.
const maxQPs = 16

// appendQPInfos appends a count byte and the QP descriptions.
func appendQPInfos(b []byte, qs []qpInfo) []byte {
	b = append(b, byte(len(qs)))
	for _, q := range qs {
		b = appendQPInfo(b, q)
	}
	return b
}

// parseQPInfos decodes appendQPInfos' encoding and returns the rest of b.
func parseQPInfos(b []byte) ([]qpInfo, []byte, error) {
	if len(b) < 1 || b[0] == 0 || b[0] > maxQPs || len(b) < 1+int(b[0])*qpInfoLen {
		return nil, nil, fmt.Errorf("%w: bad QP list", ErrProtocol)
	}
	n := int(b[0])
	b = b[1:]
	qs := make([]qpInfo, n)
	for i := range qs {
		qs[i] = parseQPInfo(b)
		b = b[qpInfoLen:]
	}
	return qs, b, nil
}

func parseQPInfo(b []byte) qpInfo {
	var q qpInfo
	q.QPN = binary.BigEndian.Uint32(b)
	q.PSN = binary.BigEndian.Uint32(b[4:])
	copy(q.GID[:], b[8:24])
	q.Port = binary.BigEndian.Uint16(b[24:])
	q.MTU = verbs.MTU(b[26])
	return q
}

// credit grants the sender one ring block.
type credit struct {
	Block uint64 // block number in the transfer (0, 1, ...)
	Addr  uint64
	RKey  uint32
	Len   uint32
}

const creditLen = 8 + 8 + 4 + 4

func (c credit) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, c.Block)
	b = binary.BigEndian.AppendUint64(b, c.Addr)
	b = binary.BigEndian.AppendUint32(b, c.RKey)
	return binary.BigEndian.AppendUint32(b, c.Len)
}

func parseCredit(b []byte) credit {
	return credit{Block: binary.BigEndian.Uint64(b), Addr: binary.BigEndian.Uint64(b[8:]),
		RKey: binary.BigEndian.Uint32(b[16:]), Len: binary.BigEndian.Uint32(b[20:])}
}
