package pipeline

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"

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

// ctrl frames messages on a control connection.
type ctrl struct {
	c net.Conn
	r *bufio.Reader
}

func newCtrl(c net.Conn) *ctrl { return &ctrl{c: c, r: bufio.NewReader(c)} }

func (c *ctrl) send(typ byte, body []byte) error {
	b := make([]byte, 5, 5+len(body))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
	_, err := c.c.Write(append(b, body...))
	return err
}

// recv reads one message. A peer's error message is returned as an error
// wrapping ErrPeer.
func (c *ctrl) recv() (byte, []byte, error) { return readMsg(c.r) }

// readMsg reads one framed message from r.
func readMsg(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxMsg {
		return 0, nil, fmt.Errorf("%w: %d-byte message", ErrProtocol, n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the header promised a body
		}
		return 0, nil, err
	}
	if h[0] == msgError {
		return 0, nil, fmt.Errorf("%w: %s", ErrPeer, body)
	}
	return h[0], body, nil
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
