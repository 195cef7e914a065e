package rsocket

import (
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/verbs"
)

// Config sizes and tunes a stream rsocket, as rsetsockopt does before the
// connection (SO_SNDBUF, SO_RCVBUF, SOL_RDMA's RDMA_SQSIZE, RDMA_RQSIZE,
// RDMA_INLINE, RDMA_IOMAPSIZE). The zero value gives librdmacm's defaults.
type Config struct {
	// SendBuf and RecvBuf are the send staging and receive buffer sizes in
	// bytes (default 128 KiB each; librdmacm's SO_SNDBUF/SO_RCVBUF set
	// twice the value given). The peer may have half of RecvBuf in flight.
	SendBuf, RecvBuf int
	// SQSize and RQSize are the QP's send and receive queue sizes (default
	// 384, bounded to 16..65534).
	SQSize, RQSize int
	// Inline is the largest write sent inline (default 64; negative: none).
	Inline int
	// IOMapSize is the number of riomap entries the peer may fill in
	// (default 0: IOMap cannot be used by the peer).
	IOMapSize int
	// KeepAlive, if positive, sends a keepalive (a 0-byte RDMA WRITE)
	// after each such idle period, so that a dead peer is noticed.
	KeepAlive time.Duration
	// Src is the local address to dial from (zero: the device that
	// reaches the destination).
	Src netip.Addr
	// Logger receives debug logs (nil: silent).
	Logger *slog.Logger
}

func (cfg *Config) norm() Config {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.SendBuf <= 0 {
		c.SendBuf = defaultBufSize
	}
	if c.SendBuf < 2*sndLowat {
		c.SendBuf = 2 * sndLowat
	}
	if c.RecvBuf <= 0 {
		c.RecvBuf = defaultBufSize
	}
	if c.RecvBuf < 2*sndLowat {
		c.RecvBuf = 2 * sndLowat
	}
	c.RecvBuf &^= 1
	c.SQSize = clampQP(c.SQSize)
	c.RQSize = clampQP(c.RQSize)
	switch {
	case c.Inline == 0:
		c.Inline = defaultInline
	case c.Inline < 0:
		c.Inline = 0
	case c.Inline > verbs.MaxInline:
		c.Inline = verbs.MaxInline
	}
	if c.IOMapSize < 0 {
		c.IOMapSize = 0
	}
	c.IOMapSize = scaleToValue(valueToScale(min(c.IOMapSize, 0xFFFF), 8), 8)
	return c
}

func clampQP(n int) int {
	if n == 0 {
		n = defaultQPSize
	}
	return min(max(n, qpMinSize), qpMaxSize)
}

// Connection states, as rsocket.c's rs_state bits.
const (
	stConnected    = 0x0100
	stWritable     = 0x0200
	stReadable     = 0x0400
	stConnectRDWR  = stConnected | stReadable | stWritable
	stDisconnected = 0x1000
	stError        = 0x2000
)

const recvWRID = uint64(1) << 63

// Poll events (poll(2)'s values), for Conn.Poll and Listener.Poll.
const (
	PollIn  = 0x001
	PollOut = 0x004
	PollErr = 0x008
	PollHup = 0x010
)

// Stats count a connection's traffic.
type Stats struct {
	BytesSent, BytesReceived atomic.Uint64
	// DataMsgs counts data messages sent (RDMA WRITE WITH IMM), Credits
	// credit updates sent, DirectWrites riowrite RDMA WRITEs.
	DataMsgs, Credits, DirectWrites atomic.Uint64
	// Parks counts calls that slept waiting for a completion event (wait):
	// blocking ones, and non-blocking ones on a device whose link cannot
	// be polled (nbPark).
	Parks atomic.Uint64
}

// Conn is a connected stream rsocket. It is a net.Conn; Read and Write may
// be called concurrently with each other, each from one goroutine at a
// time (concurrent Reads are serialized, as are Writes).
type Conn struct {
	cc  *cm.Conn
	cfg Config
	log *slog.Logger

	// Stats counts traffic.
	Stats Stats

	rmu, wmu sync.Mutex // serialize readers, writers

	mu    sync.Mutex // everything below
	state int
	err   error
	armed bool
	wake  chan struct{} // closed and replaced on every event
	// pollArmed: Poll armed the CQs for the notify function; kick tells
	// the pump so.
	pollArmed bool
	kick      chan struct{}
	notify    func()
	nonblk    bool
	rdl       time.Time
	wdl       time.Time
	closing   bool

	qp   *verbs.QP
	scq  *verbs.CQ
	rcq  *verbs.CQ
	wcs  [32]verbs.WC
	swr  [1]verbs.SendWR
	sges [2]verbs.SGE
	// ctrlBuf holds an SGE or iomap entry sent inline (copied at post).
	ctrlBuf [IOMapLen]byte
	rwrs    []verbs.RecvWR

	// Memory: rbuf is the receive ring, sbuf the send staging ring, tbuf
	// the target buffer list (2 SGEs, then the iomap entries) the peer
	// writes.
	rbuf, sbuf, tbuf []byte
	rmr, smr, tmr    *verbs.MR
	rAddr, sAddr     uint64
	tAddr            uint64
	rKey, sKey, tKey uint32

	// Send side (rsocket.c's names).
	sqeAvail     int
	sbufAvail    int
	sHead        int // ssgl[0].addr - sbuf
	sseqNo       uint16
	sseqComp     uint16
	ctrlSeqNo    uint32
	ctrlMaxSeqNo uint32
	targetSGL    [sglSize]SGE // local copies of the peer's grants
	targetSGE    int
	peerSlot     int // the target SGL slot the peer writes next
	remoteSGL    SGE
	remoteSGE    int
	remoteIOMap  SGE
	peerOrder    binary.ByteOrder // the order the peer reads its target list in
	targetIOMap  []ioMap

	// Receive side.
	rbufOffset     int
	rbufFreeOffset int
	rbufAvail      int
	rseqNo         uint16
	rseqComp       uint16
	rmsg           []uint32 // lengths of data messages received, a ring of RQSize+1
	rmsgHead       int
	rmsgTail       int
	rqueued        int // bytes in rmsg

	// iomaps: local buffers open to the peer's IOWrite.
	iomaps   []*ioMapping // by remote index; nil slots free
	iomapQ   []*ioMapping // waiting to be sent
	localMap []*ioMapping // mappings without a remote slot

	stop    chan struct{}
	done    chan struct{}
	kaStop  chan struct{}
	closeMu sync.Mutex
	closed  bool
}

type ioMapping struct {
	buf    []byte
	mr     *verbs.MR
	offset uint64
	index  int
}

// Addr is an rsocket address (net.Addr).
type Addr struct{ netip.AddrPort }

// Network returns "rsocket".
func (Addr) Network() string { return "rsocket" }

func newConn(cfg *Config) *Conn {
	c := &Conn{cfg: cfg.norm(), wake: make(chan struct{}), kick: make(chan struct{}), peerOrder: binary.LittleEndian,
		stop: make(chan struct{}), done: make(chan struct{})}
	c.log = c.cfg.Logger
	return c
}

// options are the cm options of a connection with config cfg; prep and
// rel are the connection's Prepare and Release.
func cmOptions(cfg Config) cm.Options {
	return cm.Options{
		Src:         cfg.Src,
		CompChannel: true,
		Cap: verbs.QPCap{MaxSendWR: uint32(cfg.SQSize), MaxRecvWR: uint32(cfg.RQSize), MaxSendSGE: 2, MaxRecvSGE: 1,
			MaxInlineData: verbs.MaxInline},
	}
}

// prepare registers the buffers and posts the receives on cc's QP (in
// INIT): cm's Options.Prepare.
func (c *Conn) prepare(cc *cm.Conn) error {
	c.cc, c.qp, c.scq, c.rcq = cc, cc.QP, cc.SendCQ, cc.RecvCQ
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	var err error
	c.rbuf = make([]byte, c.cfg.RecvBuf)
	if c.rmr, err = cc.PD.RegMR(c.rbuf, acc); err != nil {
		return err
	}
	c.sbuf = make([]byte, c.cfg.SendBuf)
	if c.smr, err = cc.PD.RegMR(c.sbuf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	c.tbuf = make([]byte, SGELen*sglSize+IOMapLen*c.cfg.IOMapSize)
	if c.tmr, err = cc.PD.RegMR(c.tbuf, acc); err != nil {
		return err
	}
	c.rAddr, c.rKey = c.rmr.Addr(), c.rmr.RKey()
	c.sAddr, c.sKey = c.smr.Addr(), c.smr.LKey()
	c.tAddr, c.tKey = c.tmr.Addr(), c.tmr.RKey()
	c.targetIOMap = make([]ioMap, c.cfg.IOMapSize)
	c.rmsg = make([]uint32, c.cfg.RQSize+1)
	c.rbufFreeOffset = c.cfg.RecvBuf / 2
	c.rbufAvail = c.cfg.RecvBuf / 2
	c.ctrlMaxSeqNo = qpCtrlSize
	c.sqeAvail = c.cfg.SQSize - qpCtrlSize
	c.sbufAvail = c.cfg.SendBuf
	c.rseqComp = uint16(c.cfg.RQSize / 2)
	c.rwrs = make([]verbs.RecvWR, c.cfg.RQSize)
	for i := range c.rwrs {
		c.rwrs[i].WRID = recvWRID
	}
	if _, err := c.qp.PostRecv(c.rwrs); err != nil {
		return err
	}
	return nil
}

// release deregisters the buffers (cm's Options.Release).
func (c *Conn) release(*cm.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, mr := range []*verbs.MR{c.rmr, c.smr, c.tmr} {
		if mr != nil {
			mr.Deregister()
		}
	}
	for _, m := range append(append(c.iomaps, c.iomapQ...), c.localMap...) {
		if m != nil && m.mr != nil {
			m.mr.Deregister()
			m.mr = nil
		}
	}
}

// connData is this side's rs_conn_data.
func (c *Conn) connData() ConnData {
	return ConnData{Version: Version, Flags: ConnFlagIOMap, Credits: uint16(c.cfg.RQSize),
		TargetIOMapSize: uint8(valueToScale(c.cfg.IOMapSize, 8)),
		TargetSGL:       SGE{Addr: c.tAddr, Key: c.tKey, Length: sglSize},
		DataBuf:         SGE{Addr: c.rAddr, Key: c.rKey, Length: uint32(c.cfg.RecvBuf / 2)}}
}

func (c *Conn) marshalConnData() []byte {
	b := make([]byte, ConnDataLen)
	cd := c.connData()
	cd.Marshal(b)
	return b
}

// save takes in the peer's rs_conn_data (rs_save_conn_data).
func (c *Conn) save(p ConnData) error {
	if p.TargetSGL.Length == 0 || p.TargetSGL.Length > 64 {
		return &Error{Op: "connect", Reason: "the peer's target SGL has " + itoa(int(p.TargetSGL.Length)) + " entries", Errno: syscall.EPROTO}
	}
	c.remoteSGL = p.TargetSGL
	c.remoteSGE = 1
	if p.Flags&ConnFlagNet != 0 {
		c.peerOrder = binary.BigEndian
	}
	if p.Flags&ConnFlagIOMap != 0 {
		c.remoteIOMap = SGE{Addr: p.TargetSGL.Addr + SGELen*uint64(p.TargetSGL.Length),
			Length: uint32(scaleToValue(int(p.TargetIOMapSize), 8)), Key: p.TargetSGL.Key}
		c.iomaps = make([]*ioMapping, c.remoteIOMap.Length)
	}
	c.targetSGL[0] = p.DataBuf
	c.peerSlot = 1
	c.sseqComp = p.Credits
	c.state = stConnectRDWR
	return nil
}

// start runs the connection's event pump and keepalive.
func (c *Conn) start() {
	go c.pump()
	if c.cfg.KeepAlive > 0 {
		c.SetKeepAlive(c.cfg.KeepAlive)
	}
}

// pump turns the CM's disconnect, and CQ events while Poll armed the
// connection for its notify function, into wake-ups. A Read or Write that
// waits takes CQ events itself (one goroutine hop fewer).
func (c *Conn) pump() {
	defer close(c.done)
	disc := c.cc.Disconnected()
	compCh := c.cc.CompChannel.C()
	for {
		c.mu.Lock()
		var ch <-chan *verbs.CQ
		if c.pollArmed {
			ch = compCh
		}
		kick := c.kick
		c.mu.Unlock()
		select {
		case cq := <-ch:
			cq.AckEvents(1)
			c.mu.Lock()
			c.armed = false
			c.signal()
		case <-kick:
			continue
		case <-disc:
			disc = nil
			c.mu.Lock()
			if c.state&stConnected != 0 {
				c.state = stDisconnected
			}
			c.signal()
		case <-c.stop:
			return
		}
		c.pollArmed = false
		f := c.notify
		c.mu.Unlock()
		if f != nil {
			f()
		}
	}
}

// signal wakes the waiters (under c.mu).
func (c *Conn) signal() {
	close(c.wake)
	c.wake = make(chan struct{})
}

// WaitLink waits on the calling thread until the connection's device link
// holds a datagram or fd (-1: none) is readable, at most timeout
// (verbs.Device.WaitLink): for a caller that waits itself between calls
// with MsgNoPark (the C library's blocking rrecv and rsend), whose next
// call then handles the datagram on its own thread. It fails as
// verbs.Device.WaitLink does: the link cannot be waited on, or
// verbs.ErrInterrupted (EINTR) when a signal reached the thread.
func (c *Conn) WaitLink(fd int, timeout time.Duration) (link, other bool, err error) {
	return c.qp.Device().WaitLink(fd, timeout)
}

// SetNotify sets a function called (from another goroutine) after every
// event that may change what Poll reports: CQ events once armed by Poll,
// the peer's disconnect, Close. The C library writes an eventfd there.
//
// f is also the connection's completion channel's notify function
// (verbs.CompChannel.SetNotify), called on the device's goroutine as soon
// as an armed CQ gets a completion: a call with MsgNoPark that returned
// EAGAIN may be retried once f was called.
func (c *Conn) SetNotify(f func()) {
	c.mu.Lock()
	c.notify = f
	c.mu.Unlock()
	if ch := c.cc.CompChannel; ch != nil {
		ch.SetNotify(f)
	}
}

// --- completion processing (rs_poll_cq) ---

// progress processes completions and sends credits (rs_process_cq's
// body), under c.mu.
func (c *Conn) progress() {
	if c.closing {
		return // the QP and CQs are being freed
	}
	c.updateCredits()
	c.pollCQ()
	c.updateCredits()
}

func (c *Conn) pollCQ() {
	rcnt := 0
	for {
		n := c.rcq.Poll(c.wcs[:])
		for i := 0; i < n; i++ {
			wc := &c.wcs[i]
			if wc.Status != verbs.WCSuccess {
				continue
			}
			rcnt++
			if wc.Flags&verbs.WCWithImm == 0 {
				c.fail(ErrProtocol) // rsocket over RC sends nothing but WRITE WITH IMM
				continue
			}
			c.onMsg(Msg(wc.ImmData), wc.ByteLen)
		}
		if n < len(c.wcs) {
			break
		}
	}
	for {
		n := c.scq.Poll(c.wcs[:])
		for i := 0; i < n; i++ {
			c.onSendDone(&c.wcs[i])
		}
		if n < len(c.wcs) {
			break
		}
	}
	if c.state&stConnected != 0 && rcnt > 0 {
		if _, err := c.qp.PostRecv(c.rwrs[:rcnt]); err != nil {
			c.fail(err)
		}
	}
}

// onMsg handles one message received.
func (c *Conn) onMsg(m Msg, n uint32) {
	switch m.Op() {
	case OpSGL:
		c.sseqComp = uint16(m.Data())
		if n >= SGELen {
			s := c.peerSlot
			c.targetSGL[s] = getSGE(c.tbuf[s*SGELen:], binary.LittleEndian)
			c.peerSlot = (s + 1) % sglSize
		}
	case OpIOMapSGL:
		if i := int(m.Data() & 0xFFFF); i < len(c.targetIOMap) && n >= IOMapLen {
			c.targetIOMap[i] = getIOMap(c.tbuf[sglSize*SGELen+i*IOMapLen:], binary.LittleEndian)
		}
	case OpCtrl:
		switch m.Data() {
		case CtrlDisconnect:
			c.state = stDisconnected
		case CtrlShutdown:
			if c.state&stWritable != 0 {
				c.state &^= stReadable
			} else {
				c.state = stDisconnected
			}
		}
	case OpWrite:
	default: // data (and the reserved operations, as rsocket.c)
		l := m.Data()
		next := c.rmsgTail + 1
		if next == len(c.rmsg) {
			next = 0
		}
		if next == c.rmsgHead || int(l) > len(c.rbuf)-c.rqueued {
			c.fail(ErrProtocol) // more messages or bytes than granted
			return
		}
		c.rmsg[c.rmsgTail] = l
		c.rmsgTail = next
		c.rqueued += int(l)
		c.Stats.BytesReceived.Add(uint64(l))
	}
}

func (c *Conn) onSendDone(wc *verbs.WC) {
	m := Msg(uint32(wc.WRID))
	switch m.Op() {
	case OpSGL:
		c.ctrlMaxSeqNo++
	case OpCtrl:
		c.ctrlMaxSeqNo++
		if m.Data() == CtrlDisconnect {
			c.state = stDisconnected
		}
	case OpIOMapSGL:
		c.sqeAvail++
		c.sbufAvail += IOMapLen
	default:
		c.sqeAvail++
		c.sbufAvail += int(m.Data())
	}
	if wc.Status != verbs.WCSuccess && c.state&stConnected != 0 {
		c.state = stError
		c.err = &Error{Op: "send", Reason: "the connection failed: " + wc.Status.String(), Errno: syscall.ECONNRESET}
	}
}

// fail moves the connection to the error state.
func (c *Conn) fail(err error) {
	if c.state&stError == 0 {
		if c.log != nil {
			c.log.Debug("rsocket: connection failed", "err", err)
		}
		c.state = stError
		c.err = err
	}
}

// --- credits (rs_send_credits, rs_give_credits) ---

func (c *Conn) ctrlAvail() bool { return c.ctrlSeqNo != c.ctrlMaxSeqNo }

func (c *Conn) updateCredits() {
	half := len(c.rbuf) / 2
	if (c.rbufAvail >= half || int16(c.rseqNo-c.rseqComp) >= 0) && c.ctrlAvail() && c.state&stConnected != 0 {
		c.sendCredits()
	}
}

func (c *Conn) sendCredits() {
	half := len(c.rbuf) / 2
	c.ctrlSeqNo++
	c.rseqComp = c.rseqNo + uint16(c.cfg.RQSize/2)
	msg := MakeMsg(OpSGL, uint32(c.rseqNo)+uint32(c.cfg.RQSize))
	wr := &c.swr[0]
	*wr = verbs.SendWR{WRID: uint64(msg), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		ImmData: uint32(msg), RemoteAddr: c.remoteSGL.Addr + uint64(c.remoteSGE)*SGELen, RKey: c.remoteSGL.Key}
	if c.rbufAvail >= half {
		putSGE(c.ctrlBuf[:SGELen], SGE{Addr: c.rAddr + uint64(c.rbufFreeOffset), Key: c.rKey, Length: uint32(half)}, c.peerOrder)
		wr.Flags |= verbs.SendInline
		wr.Inline = c.ctrlBuf[:SGELen]
		c.post()
		c.rbufAvail -= half
		c.rbufFreeOffset += half
		if c.rbufFreeOffset >= len(c.rbuf) {
			c.rbufFreeOffset = 0
		}
		if c.remoteSGE++; c.remoteSGE == int(c.remoteSGL.Length) {
			c.remoteSGE = 0
		}
	} else {
		c.post()
	}
	c.Stats.Credits.Add(1)
}

// post posts c.swr[0].
func (c *Conn) post() {
	_, err := c.qp.PostSend(c.swr[:])
	c.swr[0] = verbs.SendWR{}
	if err != nil {
		c.fail(err)
	}
}

// canSend is rs_can_send.
func (c *Conn) canSend() bool {
	return c.sqeAvail > 0 && c.sbufAvail >= sndLowat && c.sseqNo != c.sseqComp && c.targetSGL[c.targetSGE].Length != 0
}

func (c *Conn) haveData() bool { return c.rmsgHead != c.rmsgTail }

// --- waiting ---

// waitState is one call's progress through wait.
type waitState struct {
	parked     bool
	noPark     bool // MsgNoPark
	polls      int  // times the call polled the device's link (PollLink)
	progressed bool // the last poll received something
}

// maxLinkPolls bounds the link polls of one non-blocking call: a stream of
// datagrams for other connections must not hold a caller that asked not to
// wait.
const maxLinkPolls = 16

// takeEvents takes the completion events waiting on the channel (under
// c.mu): the CQs need arming again.
func (c *Conn) takeEvents() {
	ch := c.cc.CompChannel.C()
	for {
		select {
		case cq := <-ch:
			cq.AckEvents(1)
			c.armed = false
		default:
			return
		}
	}
}

// nbPark bounds how long a non-blocking call that finds nothing to do
// waits for the device before it fails with EAGAIN, on a device whose link
// cannot be polled (the in-memory pipe; a UDP device's is polled instead,
// see wait). A program that spins on EAGAIN (rstream does) would otherwise
// take from a software device the CPU it needs to move the data: a
// spinning caller measured 30 times slower than a blocking one.
const nbPark = time.Millisecond

// wait blocks (releasing c.mu) until an event may have changed the
// connection or the deadline passes. Callers loop: progress, test, wait.
// A non-blocking call on a device whose link can be polled polls it while
// polls bring something (poll mode) and then fails with EAGAIN, never
// parking; otherwise wait arms the CQs and
// sleeps, a non-blocking call at most nbPark once, then fails with EAGAIN.
// It does not spin first as rsocket.c does (polling_time): on a software
// device the spinning caller takes the processor the device needs (a
// 64-byte ping-pong in one process took 44 µs without a spin, 66 µs with
// 20 µs of spinning, 341 µs with 100).
func (c *Conn) wait(deadline time.Time, nonblock bool, ws *waitState) error {
	nb := nonblock || c.nonblk
	if nb && ws.parked {
		return errWouldBlock
	}
	if c.closing {
		return net.ErrClosed
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return os.ErrDeadlineExceeded
	}
	if nb && c.qp.Device().CanPollLink() {
		// Poll mode: a call that may not wait receives what the device's
		// socket holds on the caller's thread (verbs.Device.PollLink), as
		// the C library's ibv_poll_cq does, for as long as each poll
		// brings something (at most maxLinkPolls times); when one brings
		// nothing it fails with EAGAIN at once, as a TCP socket does. A
		// program that spins on EAGAIN (rstream) then drives the device
		// itself instead of parking until the device's goroutine hands it
		// a completion (three thread wake-ups a message). It never parks:
		// a poll that brought part of a message used to arm the CQs and
		// park up to nbPark for the rest, which halved a non-blocking
		// stream's receiver.
		if ws.polls < maxLinkPolls && (ws.polls == 0 || ws.progressed) {
			ws.polls++
			dev := c.qp.Device()
			c.mu.Unlock()
			n := dev.PollLink()
			c.mu.Lock()
			ws.progressed = n > 0
			if n > 0 {
				return nil // progress again
			}
		}
		if !ws.noPark {
			return errWouldBlock
		}
	}
	if nb && ws.noPark {
		c.takeEvents()
		if c.armed {
			return errWouldBlock
		}
	}
	if !c.armed {
		c.rcq.ReqNotify(false)
		c.scq.ReqNotify(false)
		c.armed = true
		return nil // poll once more: completions before the arming raise no event
	}
	w := c.wake
	c.mu.Unlock()
	var tc <-chan time.Time
	if nb {
		ws.parked = true
		if deadline.IsZero() || time.Until(deadline) > nbPark {
			deadline = time.Now().Add(nbPark)
		}
	}
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		tc = t.C
	}
	c.Stats.Parks.Add(1)
	select {
	case cq := <-c.cc.CompChannel.C():
		cq.AckEvents(1)
		c.mu.Lock()
		c.armed = false
		c.signal()
		if c.pollArmed {
			c.pollArmed = false
			if f := c.notify; f != nil {
				c.mu.Unlock()
				f()
				c.mu.Lock()
			}
		}
		return nil
	case <-w:
	case <-tc:
	}
	c.mu.Lock()
	return nil
}

// --- the net.Conn API ---

// Read reads data (rrecv). It returns io.EOF once the peer shut down its
// sending side and everything it sent was read.
func (c *Conn) Read(p []byte) (int, error) { return c.Recv(p, 0) }

// Recv flags.
const (
	MsgPeek     = 0x2  // MSG_PEEK
	MsgDontWait = 0x40 // MSG_DONTWAIT
	MsgWaitAll  = 0x100
	// MsgNoPark, with MsgDontWait or in non-blocking mode, makes a call
	// that finds nothing to do arm the completion events and fail with
	// EAGAIN at once, instead of waiting up to a millisecond for the
	// device first: for a caller that waits itself until the SetNotify
	// function is called, then calls again (the C library's blocking
	// rrecv and rsend wait in poll(2) on the socket's eventfd: a thread
	// parked inside Go is woken through a goroutine and a hand-off of the
	// processor, two thread wake-ups where the kernel's socket takes one).
	MsgNoPark = 0x40000000
)

// Recv reads as rrecv does, with flags MsgPeek, MsgDontWait, MsgWaitAll.
func (c *Conn) Recv(p []byte, flags int) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	n := 0
	ws := waitState{noPark: flags&MsgNoPark != 0}
	for {
		for !c.haveData() {
			c.progress()
			if c.haveData() {
				break
			}
			if c.state&stReadable == 0 {
				if n > 0 {
					return n, nil
				}
				if c.state&stError != 0 && c.err != nil {
					return 0, c.err
				}
				if c.closing {
					return 0, net.ErrClosed
				}
				return 0, io.EOF
			}
			if err := c.wait(c.rdl, flags&MsgDontWait != 0, &ws); err != nil {
				if n > 0 {
					return n, nil
				}
				return 0, err
			}
		}
		if flags&MsgPeek != 0 {
			return c.peek(p), nil
		}
		n += c.consume(p[n:])
		c.updateCredits()
		if n == len(p) || flags&MsgWaitAll == 0 {
			return n, nil
		}
	}
}

// consume copies queued data into p (rrecv's loop).
func (c *Conn) consume(p []byte) int {
	left := len(p)
	off := 0
	for left > 0 && c.haveData() {
		var rsize int
		if l := int(c.rmsg[c.rmsgHead]); left < l {
			rsize = left
			c.rmsg[c.rmsgHead] -= uint32(left)
		} else {
			c.rseqNo++
			rsize = l
			if c.rmsgHead++; c.rmsgHead == len(c.rmsg) {
				c.rmsgHead = 0
			}
		}
		c.rqueued -= rsize
		for rsize > 0 {
			k := copy(p[off:off+rsize], c.rbuf[c.rbufOffset:])
			off += k
			rsize -= k
			left -= k
			c.rbufAvail += k
			if c.rbufOffset += k; c.rbufOffset == len(c.rbuf) {
				c.rbufOffset = 0
			}
		}
	}
	return off
}

func (c *Conn) peek(p []byte) int {
	off, head, roff := 0, c.rmsgHead, c.rbufOffset
	for off < len(p) && head != c.rmsgTail {
		rsize := min(int(c.rmsg[head]), len(p)-off)
		if head++; head == len(c.rmsg) {
			head = 0
		}
		for rsize > 0 {
			k := copy(p[off:off+rsize], c.rbuf[roff:])
			off += k
			rsize -= k
			if roff += k; roff == len(c.rbuf) {
				roff = 0
			}
		}
	}
	return off
}

// Write writes p (rsend): all of it, unless the connection fails, a
// deadline passes or the socket is non-blocking (then what was sent, and
// EAGAIN).
func (c *Conn) Write(p []byte) (int, error) { return c.Send(p, 0) }

var errConnReset = &Error{Op: "send", Reason: "the connection is not writable (the peer closed it, or it was shut down)", Errno: syscall.ECONNRESET}

// Send writes as rsend does, with flags MsgDontWait.
func (c *Conn) Send(p []byte, flags int) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.sendIOMaps(flags, &waitState{noPark: flags&MsgNoPark != 0}); err != nil {
		return 0, err
	}
	olen := olapStart
	off := 0
	ws := waitState{noPark: flags&MsgNoPark != 0}
	for off < len(p) {
		if err := c.waitSend(flags, &ws); err != nil {
			if off > 0 {
				return off, nil
			}
			return 0, err
		}
		left := len(p) - off
		xfer := left
		if olen < left {
			xfer = olen
			if olen < maxTransfer {
				olen <<= 1
			}
		}
		xfer = min(xfer, c.sbufAvail, int(c.targetSGL[c.targetSGE].Length))
		c.writeData(p[off : off+xfer])
		off += xfer
		if c.state&stError != 0 {
			break
		}
	}
	if c.state&stError != 0 && c.err != nil && off == 0 {
		return 0, c.err
	}
	return off, nil
}

// waitSend waits until a message may be sent (rs_conn_can_send).
func (c *Conn) waitSend(flags int, ws *waitState) error {
	for !c.canSend() {
		if c.state&stWritable == 0 {
			break
		}
		c.progress()
		if c.canSend() || c.state&stWritable == 0 {
			break
		}
		if err := c.wait(c.wdl, flags&MsgDontWait != 0, ws); err != nil {
			return err
		}
	}
	if c.state&stWritable == 0 {
		if c.state&stError != 0 && c.err != nil {
			return c.err
		}
		if c.closing {
			return net.ErrClosed
		}
		return errConnReset
	}
	return nil
}

// stage puts p into the send ring and fills c.sges (1 or 2 of them).
func (c *Conn) stage(p []byte) []verbs.SGE {
	n := len(p)
	left := len(c.sbuf) - c.sHead
	if n <= left {
		copy(c.sbuf[c.sHead:], p)
		c.sges[0] = verbs.SGE{Addr: c.sAddr + uint64(c.sHead), Length: uint32(n), LKey: c.sKey}
		if c.sHead += n; c.sHead == len(c.sbuf) {
			c.sHead = 0
		}
		return c.sges[:1]
	}
	copy(c.sbuf[c.sHead:], p[:left])
	copy(c.sbuf, p[left:])
	c.sges[0] = verbs.SGE{Addr: c.sAddr + uint64(c.sHead), Length: uint32(left), LKey: c.sKey}
	c.sges[1] = verbs.SGE{Addr: c.sAddr, Length: uint32(n - left), LKey: c.sKey}
	c.sHead = n - left
	return c.sges[:2]
}

// writeData sends p into the peer's current target SGE (rs_write_data).
func (c *Conn) writeData(p []byte) {
	n := len(p)
	c.sseqNo++
	c.sqeAvail--
	c.sbufAvail -= n
	t := &c.targetSGL[c.targetSGE]
	addr, rkey := t.Addr, t.Key
	t.Addr += uint64(n)
	t.Length -= uint32(n)
	if t.Length == 0 {
		if c.targetSGE++; c.targetSGE == sglSize {
			c.targetSGE = 0
		}
	}
	msg := MakeMsg(OpData, uint32(n))
	wr := &c.swr[0]
	*wr = verbs.SendWR{WRID: uint64(msg), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		ImmData: uint32(msg), RemoteAddr: addr, RKey: rkey}
	if n <= c.cfg.Inline {
		wr.Flags |= verbs.SendInline
		wr.Inline = p
	} else {
		wr.SGList = c.stage(p)
	}
	c.post()
	c.Stats.BytesSent.Add(uint64(n))
	c.Stats.DataMsgs.Add(1)
}

// Close shuts the connection down (RS_CTRL_DISCONNECT, waiting a bounded
// time for the sends in flight) and frees it (rclose).
func (c *Conn) Close() error {
	c.closeMu.Lock()
	if c.closed {
		c.closeMu.Unlock()
		return net.ErrClosed
	}
	c.closed = true
	c.closeMu.Unlock()
	c.mu.Lock()
	if c.state&stConnected != 0 {
		c.shutdown(syscall.SHUT_RDWR)
	}
	c.closing = true
	c.state &^= stConnected | stReadable | stWritable
	if c.state == 0 {
		c.state = stDisconnected
	}
	c.signal()
	if c.kaStop != nil {
		close(c.kaStop)
		c.kaStop = nil
	}
	f := c.notify
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	if f != nil {
		f()
	}
	return c.cc.Close()
}

// closeWait bounds how long a shutdown waits to send its control message
// and for the sends in flight.
const closeWait = 2 * time.Second

// Shutdown shuts down reading (SHUT_RD), writing (SHUT_WR: the peer reads
// EOF) or both (rshutdown).
func (c *Conn) Shutdown(how int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state&stConnected == 0 {
		return &Error{Op: "shutdown", Reason: "not connected", Errno: syscall.ENOTCONN}
	}
	c.shutdown(how)
	return nil
}

// CloseWrite shuts down the writing side (the peer reads EOF).
func (c *Conn) CloseWrite() error { return c.Shutdown(syscall.SHUT_WR) }

// CloseRead shuts down the reading side.
func (c *Conn) CloseRead() error { return c.Shutdown(syscall.SHUT_RD) }

// shutdown is rshutdown (under c.mu, connected).
func (c *Conn) shutdown(how int) {
	var ctrl uint32
	switch how {
	case syscall.SHUT_RDWR:
		ctrl = CtrlDisconnect
		c.state &^= stReadable | stWritable
	case syscall.SHUT_WR:
		c.state &^= stWritable
		ctrl = CtrlDisconnect
		if c.state&stReadable != 0 {
			ctrl = CtrlShutdown
		}
	default:
		c.state &^= stReadable
		if c.state&stWritable != 0 {
			return
		}
		ctrl = CtrlDisconnect
	}
	dl := time.Now().Add(closeWait)
	for !c.ctrlAvail() && c.state&stConnected != 0 && time.Now().Before(dl) {
		c.progress()
		if !c.ctrlAvail() {
			c.waitClose(dl)
		}
	}
	if c.state&stConnected != 0 && c.ctrlAvail() {
		c.ctrlSeqNo++
		msg := MakeMsg(OpCtrl, ctrl)
		c.swr[0] = verbs.SendWR{WRID: uint64(msg), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
			ImmData: uint32(msg), RemoteAddr: c.remoteSGL.Addr, RKey: c.remoteSGL.Key}
		c.post()
	}
	// rs_conn_all_sends_done
	for c.state&stConnected != 0 && int(c.ctrlMaxSeqNo-c.ctrlSeqNo)+c.sqeAvail != c.cfg.SQSize && time.Now().Before(dl) {
		c.progress()
		if int(c.ctrlMaxSeqNo-c.ctrlSeqNo)+c.sqeAvail != c.cfg.SQSize {
			c.waitClose(dl)
		}
	}
	c.signal()
}

// waitClose waits for an event (ignoring non-blocking mode) until dl.
func (c *Conn) waitClose(dl time.Time) {
	nb := c.nonblk
	c.nonblk = false
	c.wait(dl, false, &waitState{})
	c.nonblk = nb
}

// LocalAddr returns the local address.
func (c *Conn) LocalAddr() net.Addr { return Addr{c.cc.LocalAddr()} }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return Addr{c.cc.RemoteAddr()} }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl, c.wdl = t, t
	c.signal()
	c.mu.Unlock()
	return nil
}

// SetReadDeadline sets the read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	c.signal()
	c.mu.Unlock()
	return nil
}

// SetWriteDeadline sets the write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	c.signal()
	c.mu.Unlock()
	return nil
}

// SetNonblock makes Read, Write and IOWrite return EAGAIN instead of
// waiting (O_NONBLOCK).
func (c *Conn) SetNonblock(on bool) {
	c.mu.Lock()
	c.nonblk = on
	c.mu.Unlock()
}

// Err returns the connection's error (SO_ERROR), if it failed.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Poll reports which of events (PollIn, PollOut) are ready, and PollHup or
// PollErr once the connection is down (rpoll's rs_poll_rs; PollHup only
// once the data received is read). A call that finds nothing ready first
// receives what the device's socket holds on the caller's thread
// (verbs.Device.PollLink), as a non-blocking call does. With arm, a call
// that still finds nothing ready arms the connection so that the next
// change calls the SetNotify function.
func (c *Conn) Poll(events int, arm bool) int {
	rev, _ := c.PollLinked(events, arm, true)
	return rev
}

// PollLinked is Poll, receiving from the device's socket only with link;
// polled says it did. A caller checking many connections of one device
// (the C library's rpoll) polls the device once per round, not once per
// connection (a system call each).
func (c *Conn) PollLinked(events int, arm, link bool) (rev int, polled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.progress()
	rev = c.revents(events)
	if link && rev == 0 && !c.closing && c.qp.Device().CanPollLink() {
		// Poll mode, as a non-blocking call's wait: what the device's
		// socket holds is received on the caller's thread. A program
		// that spins on rpoll with a zero timeout (rstream -T a) would
		// otherwise take the processor from the device's goroutine, which
		// alone moved the data: 64-byte transfers took 211 µs instead of 14.
		dev := c.qp.Device()
		c.mu.Unlock()
		n := dev.PollLink()
		c.mu.Lock()
		polled = true
		if n > 0 {
			c.progress()
			rev = c.revents(events)
		}
	}
	if rev == 0 && arm {
		if !c.pollArmed {
			c.pollArmed = true
			close(c.kick)
			c.kick = make(chan struct{})
		}
		if !c.armed {
			c.rcq.ReqNotify(false)
			c.scq.ReqNotify(false)
			c.armed = true
			c.progress()
			rev = c.revents(events)
		}
	}
	return rev, polled
}

func (c *Conn) revents(events int) int {
	rev := 0
	if events&PollIn != 0 && (c.haveData() || c.state&stReadable == 0) {
		rev |= PollIn
	}
	if events&PollOut != 0 && c.canSend() {
		rev |= PollOut
	}
	if c.state&stConnected == 0 {
		switch {
		case c.state&stDisconnected == 0:
			rev |= PollErr
		case !c.haveData():
			// Hung up once the data is read, as a TCP socket whose peer
			// closed: a program that stops at POLLHUP (rstream -T a)
			// reads everything first.
			rev |= PollHup
		}
	}
	return rev
}

// SetKeepAlive sends a keepalive after each idle period d (0 stops).
func (c *Conn) SetKeepAlive(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kaStop != nil {
		close(c.kaStop)
		c.kaStop = nil
	}
	c.cfg.KeepAlive = d
	if d <= 0 || c.closing {
		return
	}
	stop := make(chan struct{})
	c.kaStop = stop
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				c.mu.Lock()
				c.progress()
				if c.ctrlAvail() && c.state&stConnected != 0 {
					c.ctrlSeqNo++
					msg := MakeMsg(OpCtrl, CtrlKeepalive)
					c.swr[0] = verbs.SendWR{WRID: uint64(msg), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
						RemoteAddr: c.remoteSGL.Addr, RKey: c.remoteSGL.Key}
					c.post()
				}
				c.mu.Unlock()
			}
		}
	}()
}

// KeepAlive returns the keepalive period (0: off).
func (c *Conn) KeepAlive() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.KeepAlive
}

// Config returns the connection's sizes.
func (c *Conn) Config() Config { return c.cfg }

// CM returns the connection's rdma_cm connection.
func (c *Conn) CM() *cm.Conn { return c.cc }
