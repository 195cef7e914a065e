package rsocket

import (
	"encoding/binary"
	"syscall"
)

// The rsocket wire protocol of librdmacm (rdma-core's librdmacm/rsocket.c),
// byte for byte. A stream rsocket is an RC QP; each side exposes a receive
// buffer (its "data buffer", a ring of two halves) and a small "target
// buffer list" (two SGEs, then the iomap entries) that the peer updates with
// RDMA WRITEs. Every message is an RDMA WRITE WITH IMMEDIATE whose 32-bit
// immediate carries the operation in bits 31..29 and its argument in 28..0.

// Operations in the immediate data (rs_msg_op).
const (
	OpData         = 0 // RS_OP_DATA: bits 28..0 bytes written into the data buffer
	OpRsvdDataMore = 1 // RS_OP_RSVD_DATA_MORE (reserved)
	OpWrite        = 2 // RS_OP_WRITE: a direct write (riowrite), never on the wire
	OpRsvdDRAMore  = 3 // RS_OP_RSVD_DRA_MORE (reserved)
	OpSGL          = 4 // RS_OP_SGL: bits 28..0 the peer's new receive sequence limit; maybe an SGE written
	OpRsvd         = 5 // RS_OP_RSVD (reserved)
	OpIOMapSGL     = 6 // RS_OP_IOMAP_SGL: bits 15..0 the iomap index written
	OpCtrl         = 7 // RS_OP_CTRL: bits 28..0 one of CtrlDisconnect, CtrlKeepalive, CtrlShutdown
)

// Control messages (RS_OP_CTRL's argument).
const (
	CtrlDisconnect = 0 // RS_CTRL_DISCONNECT: the peer closed both directions
	CtrlKeepalive  = 1 // RS_CTRL_KEEPALIVE (sent as a 0-byte RDMA WRITE, not received)
	CtrlShutdown   = 2 // RS_CTRL_SHUTDOWN: the peer will send no more
)

// Msg is an rsocket message: the immediate data of its RDMA WRITE WITH IMM,
// in host order.
type Msg uint32

// MakeMsg builds a message (rs_msg_set).
func MakeMsg(op, data uint32) Msg { return Msg(op<<29 | data&0x1FFFFFFF) }

// Op returns the operation (rs_msg_op).
func (m Msg) Op() uint32 { return uint32(m) >> 29 }

// Data returns the argument (rs_msg_data).
func (m Msg) Data() uint32 { return uint32(m) & 0x1FFFFFFF }

// Protocol constants (rsocket.c).
const (
	Version        = 1       // rs_conn_data.version
	ConnFlagNet    = 1 << 0  // RS_CONN_FLAG_NET: the sender's host is big-endian
	ConnFlagIOMap  = 1 << 1  // RS_CONN_FLAG_IOMAP: iomap entries follow the SGL
	ConnDataLen    = 40      // sizeof(struct rs_conn_data)
	SGELen         = 16      // sizeof(struct rs_sge)
	IOMapLen       = 24      // sizeof(struct rs_iomap)
	sglSize        = 2       // RS_SGL_SIZE
	sndLowat       = 2048    // RS_SNDLOWAT
	olapStart      = 2048    // RS_OLAP_START_SIZE
	maxTransfer    = 65536   // RS_MAX_TRANSFER
	qpMinSize      = 16      // RS_QP_MIN_SIZE
	qpMaxSize      = 0xFFFE  // RS_QP_MAX_SIZE
	qpCtrlSize     = 4       // RS_QP_CTRL_SIZE
	defaultInline  = 64      // def_inline
	defaultQPSize  = 384     // def_sqsize, def_rqsize
	defaultBufSize = 1 << 17 // def_mem, def_wmem
)

// SGE is struct rs_sge: a remote buffer.
type SGE struct {
	Addr   uint64
	Key    uint32
	Length uint32
}

// ConnData is struct rs_conn_data, the private data of the connection
// request and reply: the multi-byte fields are big-endian on the wire.
type ConnData struct {
	Version uint8
	Flags   uint8
	// Credits is the sender's receive queue size: how many messages the
	// peer may send before it hears of more.
	Credits uint16
	// TargetIOMapSize is the number of iomap entries, scaled as
	// rs_value_to_scale(n, 8) does.
	TargetIOMapSize uint8
	// TargetSGL is the sender's target buffer list (Length: its number of
	// SGEs, 2), where the peer writes receive buffer grants.
	TargetSGL SGE
	// DataBuf is the first half of the sender's receive buffer.
	DataBuf SGE
}

// Marshal writes the 40 bytes of c into b.
func (c *ConnData) Marshal(b []byte) {
	_ = b[ConnDataLen-1]
	b[0], b[1] = c.Version, c.Flags
	binary.BigEndian.PutUint16(b[2:], c.Credits)
	b[4], b[5], b[6] = 0, 0, 0
	b[7] = c.TargetIOMapSize
	putSGE(b[8:], c.TargetSGL, binary.BigEndian)
	putSGE(b[24:], c.DataBuf, binary.BigEndian)
}

// ErrProtocol reports a message from the peer that breaks the rsocket
// protocol (EPROTO).
var ErrProtocol = &Error{Op: "rsocket", Reason: "the peer broke the rsocket protocol", Errno: syscall.EPROTO}

// ParseConnData decodes rs_conn_data. It fails (ENOTSUP, as rsocket.c's
// version check) on a version other than 1 and on short data.
func ParseConnData(b []byte) (ConnData, error) {
	var c ConnData
	if len(b) < ConnDataLen {
		return c, &Error{Op: "connect", Reason: "private data shorter than rs_conn_data: the peer is no rsocket", Errno: syscall.EPROTO}
	}
	c.Version, c.Flags = b[0], b[1]
	c.Credits = binary.BigEndian.Uint16(b[2:])
	c.TargetIOMapSize = b[7]
	c.TargetSGL = getSGE(b[8:], binary.BigEndian)
	c.DataBuf = getSGE(b[24:], binary.BigEndian)
	if c.Version != Version {
		return c, &Error{Op: "connect", Reason: "rsocket version " + itoa(int(c.Version)) + ", want 1", Errno: syscall.ENOTSUP}
	}
	return c, nil
}

func putSGE(b []byte, s SGE, o binary.ByteOrder) {
	_ = b[SGELen-1]
	o.PutUint64(b, s.Addr)
	o.PutUint32(b[8:], s.Key)
	o.PutUint32(b[12:], s.Length)
}

func getSGE(b []byte, o binary.ByteOrder) SGE {
	_ = b[SGELen-1]
	return SGE{Addr: o.Uint64(b), Key: o.Uint32(b[8:]), Length: o.Uint32(b[12:])}
}

// ioMap is struct rs_iomap: a peer's buffer open to riowrite at offset.
type ioMap struct {
	Offset uint64
	SGE    SGE
}

func putIOMap(b []byte, m ioMap, o binary.ByteOrder) {
	_ = b[IOMapLen-1]
	o.PutUint64(b, m.Offset)
	putSGE(b[8:], m.SGE, o)
}

func getIOMap(b []byte, o binary.ByteOrder) ioMap {
	_ = b[IOMapLen-1]
	return ioMap{Offset: o.Uint64(b), SGE: getSGE(b[8:], o)}
}

// valueToScale and scaleToValue are rs_value_to_scale and
// rs_scale_to_value: how rs_conn_data carries the iomap size in 8 bits.
func valueToScale(v, bits int) int {
	if v <= 1<<(bits-1) {
		return v
	}
	return 1<<(bits-1) | v>>bits
}

func scaleToValue(v, bits int) int {
	if v <= 1<<(bits-1) {
		return v
	}
	return (v &^ (1 << (bits - 1))) << bits
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// Error is an rsocket call failure; Errno is what librdmacm's r* call sets
// errno to, so errors.Is(err, syscall.EAGAIN) and the like work.
type Error struct {
	Op     string
	Reason string
	Errno  syscall.Errno
}

// Error formats the failure as "rsocket: op: reason (errno text)".
func (e *Error) Error() string {
	return "rsocket: " + e.Op + ": " + e.Reason + " (" + e.Errno.Error() + ")"
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

// Timeout reports whether the error is EAGAIN (a deadline or a
// non-blocking call), for net.Error users.
func (e *Error) Timeout() bool { return e.Errno == syscall.EAGAIN }

// Temporary is Timeout (net.Error).
func (e *Error) Temporary() bool { return e.Timeout() }
