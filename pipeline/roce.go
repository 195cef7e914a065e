package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/verbs"
)

// RoCERecvConfig controls a RoCEReceiver.
type RoCERecvConfig struct {
	// Credits is how many ring blocks the sender may hold at once (default
	// min(4, NBufs-1)).
	Credits int
	// Register chooses how the ring is registered (default Auto).
	Register RegisterOptions
	// Stats receives the live counters (may be nil).
	Stats *Stats
	// Logger receives progress messages; nil is silent.
	Logger *slog.Logger
}

// RoCEReceiver receives RoCE streams into a ring: the ring is registered
// once, and each Receive takes one observation from one sender.
type RoCEReceiver struct {
	cfg RoCERecvConfig
	dev *verbs.Device
	pd  *verbs.PD
	hdu *dada.HDU
	mrs *RingMRs
}

// NewRoCEReceiver allocates a PD on dev and registers the data blocks of hdu
// (see RegisterRing).
func NewRoCEReceiver(dev *verbs.Device, hdu *dada.HDU, cfg RoCERecvConfig) (*RoCEReceiver, error) {
	if bs := hdu.Data.BufSize(); int64(bs) > 1<<31 {
		return nil, fmt.Errorf("%w: %d-byte blocks: an RDMA message carries at most 2 GiB", ErrConfig, bs)
	}
	n := hdu.Data.NBufs()
	if cfg.Credits <= 0 {
		cfg.Credits = 4
	}
	cfg.Credits = max(min(cfg.Credits, n-1), 1)
	if cfg.Stats == nil {
		cfg.Stats = new(Stats)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	if cfg.Register.Logger == nil {
		cfg.Register.Logger = cfg.Logger
	}
	mrs, err := RegisterRing(pd, hdu.Data, cfg.Register)
	if err != nil {
		pd.Dealloc()
		return nil, err
	}
	return &RoCEReceiver{cfg: cfg, dev: dev, pd: pd, hdu: hdu, mrs: mrs}, nil
}

// Registration returns the ring's memory regions.
func (rr *RoCEReceiver) Registration() *RingMRs { return rr.mrs }

// Close deregisters the ring and frees the PD.
func (rr *RoCEReceiver) Close() error {
	err := rr.mrs.Close()
	return errors.Join(err, rr.pd.Dealloc())
}

// Receive takes one observation from the sender at the other end of the
// control connection ctrlConn: it connects an RC QP, writes the sender's
// header to the header block, grants ring blocks as dada frees them and
// marks each block filled when its RDMA WRITE WITH IMMEDIATE completes; a
// short block ends the transfer. If the sender fails or ctx ends, the
// transfer is ended after the last complete block. Receive does not close
// ctrlConn.
func (rr *RoCEReceiver) Receive(ctx context.Context, ctrlConn net.Conn) (Summary, error) {
	x := &roceRecv{rr: rr, ctx: ctx, c: newCtrl(ctrlConn), st: rr.cfg.Stats, bufsz: rr.hdu.Data.BufSize()}
	defer x.close()
	err := x.run()
	return x.sum, err
}

// roceRecv is the state of one Receive: set up (hello, QPs, header,
// accept), then a granter goroutine grants blocks while the completion loop
// marks them filled (relay), then finish.
type roceRecv struct {
	rr   *RoCEReceiver
	ctx  context.Context
	c    *ctrl
	st   *Stats
	conn *rcGroup
	w    *dada.Writer

	useSend bool
	chunk   int // SEND size
	chunks  int // receives per block
	bufsz   int // block size
	nqp     int

	// The granter opens blocks (waiting for readers: backpressure), posts
	// a receive for each and grants it; the completion loop marks them
	// filled. mu serialises the dada writer between the two.
	mu        sync.Mutex
	opened    []uint64       // block numbers opened, oldest first (guarded by mu)
	rwr       []verbs.RecvWR // the granter's receive work requests, reused
	rsge      []verbs.SGE
	tokens    chan struct{}
	gctx      context.Context
	stopGrant context.CancelFunc
	gerr      chan error

	// The sender's control messages: only an error (or a close) is expected
	// during the transfer; it stops the completion loop.
	peerErr  chan error
	pctx     context.Context
	stopPoll context.CancelFunc
	perr     atomic.Value

	// Blocks complete in order on each QP but not across QPs: a completed
	// block waits in pend until every earlier one is marked filled.
	pend   []int // bytes of block b at b%C, -1: not complete
	part   []int // SEND: bytes of block b received so far
	expect uint64
	ended  bool
	eod    bool // the end of data (a short block) was marked filled
	xerr   error

	t0  time.Time
	sum Summary
}

func (x *roceRecv) close() {
	if x.stopPoll != nil {
		x.stopPoll()
	}
	if x.conn != nil {
		x.conn.close()
	}
}

// fail tells the sender about e and returns it.
func (x *roceRecv) fail(e error) error {
	x.c.send(msgError, []byte(e.Error()))
	return e
}

func (x *roceRecv) run() error {
	remote, hdr, err := x.hello()
	if err != nil {
		return err
	}
	if err := x.setup(remote, hdr); err != nil {
		return err
	}
	x.t0 = time.Now()
	x.startGranter()
	x.watchPeer()
	x.relay()
	return x.finish()
}

// hello reads and checks the sender's hello: version, verb, chunk size,
// QPs and the observation header.
func (x *roceRecv) hello() ([]qpInfo, *dada.Header, error) {
	hello, err := x.c.expect(msgHello, helloFixed)
	if err != nil {
		return nil, nil, fmt.Errorf("pipeline: waiting for the sender's hello: %w", err)
	}
	if v := binary.BigEndian.Uint16(hello); v != protoVersion {
		return nil, nil, x.fail(fmt.Errorf("%w: sender speaks version %d, this receiver %d", ErrProtocol, v, protoVersion))
	}
	x.useSend, x.chunk = hello[2] == verbSend, int(binary.BigEndian.Uint32(hello[3:]))
	if x.useSend && x.chunk <= 0 {
		return nil, nil, x.fail(fmt.Errorf("%w: SEND chunk of %d bytes", ErrProtocol, x.chunk))
	}
	x.chunk = min(x.chunk, x.bufsz)
	x.chunks = 1
	if x.useSend {
		x.chunks = (x.bufsz + x.chunk - 1) / x.chunk
	}
	remote, rest, err := parseQPInfos(hello[helloFixed:])
	if err != nil {
		return nil, nil, x.fail(err)
	}
	hdr := dada.ParseHeader(rest)
	if err := hdr.Validate(x.rr.hdu.Header.BufSize()); err != nil {
		return nil, nil, x.fail(fmt.Errorf("pipeline: the sender's header: %w", err))
	}
	return remote, hdr, nil
}

// setup connects the QPs, opens the ring for writing, writes the header
// and sends the accept (QPs, block size and count, registration mode).
func (x *roceRecv) setup(remote []qpInfo, hdr *dada.Header) error {
	rr := x.rr
	x.nqp = len(remote)
	conn, err := newRCGroup(rr.pd, x.nqp, 4, ((rr.cfg.Credits+x.nqp-1)/x.nqp+1)*x.chunks)
	if err != nil {
		return x.fail(err)
	}
	x.conn = conn
	if err := conn.connect(remote); err != nil {
		return x.fail(err)
	}
	local, err := conn.infos()
	if err != nil {
		return x.fail(err)
	}
	w, err := rr.hdu.OpenWriter(x.ctx, dada.WriterOptions{})
	if err != nil {
		return x.fail(err)
	}
	if err := w.WriteHeader(hdr); err != nil {
		w.Close()
		return x.fail(err)
	}
	acc := appendQPInfos(nil, local)
	acc = binary.BigEndian.AppendUint64(acc, uint64(x.bufsz))
	acc = binary.BigEndian.AppendUint32(acc, uint32(rr.hdu.Data.NBufs()))
	acc = append(acc, byte(rr.mrs.Mode))
	if err := x.c.send(msgAccept, acc); err != nil {
		w.Close()
		return err
	}
	x.w = w
	x.sum.Header = hdr
	x.sum.Via = fmt.Sprintf("RDMA WRITE WITH IMM over %d QPs", x.nqp)
	if x.useSend {
		x.sum.Via = fmt.Sprintf("SEND of %d-byte chunks over %d QPs", x.chunk, x.nqp)
	}
	return nil
}

// startGranter starts the goroutine that grants blocks, one per token.
func (x *roceRecv) startGranter() {
	x.tokens = make(chan struct{}, x.rr.cfg.Credits)
	for range x.rr.cfg.Credits {
		x.tokens <- struct{}{}
	}
	x.gctx, x.stopGrant = context.WithCancel(x.ctx)
	x.gerr = make(chan error, 1)
	go x.grantLoop()
}

// grantLoop opens, arms and grants a block per token until stopped; its
// result goes to gerr.
func (x *roceRecv) grantLoop() {
	for next := uint64(0); ; next++ {
		select {
		case <-x.gctx.Done():
			x.gerr <- nil
			return
		case <-x.tokens:
		}
		b, err := x.openBlock(next)
		if err != nil {
			if x.gctx.Err() != nil {
				err = nil
			}
			x.gerr <- err
			return
		}
		if err := x.grant(next, b); err != nil {
			x.gerr <- err
			return
		}
	}
}

// openBlock opens the ring's next block as block next, waiting for readers.
func (x *roceRecv) openBlock(next uint64) (dada.Block, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := time.Now()
	b, err := x.w.OpenBlockContext(x.gctx)
	x.st.WaitNanos.Add(int64(time.Since(t)))
	if err == nil {
		x.opened = append(x.opened, next)
	}
	return b, err
}

// grant posts the receives of block next and sends the sender its credit.
func (x *roceRecv) grant(next uint64, b dada.Block) error {
	bm, addr, ok := x.rr.mrs.Lookup(b.Data)
	if !ok {
		return fmt.Errorf("pipeline: block %d is not in the registered ring", b.Index)
	}
	// RDMA WRITE WITH IMMEDIATE consumes one receive (no buffer); SENDs
	// land in receives whose buffers are the block's chunks, with the
	// block's lkey (one MR, or the block's own).
	// The work requests and SGEs are reused: PostRecv copies them.
	if x.rwr == nil {
		x.rwr, x.rsge = make([]verbs.RecvWR, x.chunks), make([]verbs.SGE, x.chunks)
	}
	rwr := x.rwr
	rwr[0] = verbs.RecvWR{WRID: next}
	if x.useSend {
		for k := range rwr {
			l := min(x.chunk, x.bufsz-k*x.chunk)
			x.rsge[k] = verbs.SGE{Addr: addr + uint64(k*x.chunk), Length: uint32(l), LKey: bm.LKey}
			rwr[k] = verbs.RecvWR{WRID: next, SGList: x.rsge[k : k+1]}
		}
	}
	if _, err := x.conn.qps[next%uint64(x.nqp)].PostRecv(rwr); err != nil {
		return fmt.Errorf("pipeline: posting a receive: %w", err)
	}
	var cb [creditLen]byte
	return x.c.send(msgCredit, credit{Block: next, Addr: addr, RKey: bm.RKey, Len: uint32(x.bufsz)}.append(cb[:0]))
}

// watchPeer starts watching the control connection: a message from the
// sender now is an error, and stops the completion loop.
func (x *roceRecv) watchPeer() {
	x.peerErr = make(chan error, 1)
	go func() {
		_, _, err := x.c.recv()
		if err == nil {
			err = fmt.Errorf("%w: unexpected message during the transfer", ErrProtocol)
		}
		x.peerErr <- err
	}()
	x.pctx, x.stopPoll = context.WithCancel(x.ctx)
	go func() {
		select {
		case e := <-x.peerErr:
			x.perr.Store(e)
			x.stopPoll()
		case <-x.pctx.Done():
		}
	}()
}

// relay takes receive completions and marks the blocks filled in order
// until the end of data, an error or a stop.
func (x *roceRecv) relay() {
	wcs := make([]verbs.WC, 16)
	C := x.rr.cfg.Credits
	x.pend, x.part = make([]int, C), make([]int, C)
	for i := range x.pend {
		x.pend[i] = -1
	}
	for !x.ended {
		n, err := x.conn.poll(x.pctx, wcs)
		if err != nil {
			break
		}
		for _, wc := range wcs[:n] {
			if err := x.complete(wc); err != nil {
				x.xerr, x.ended = err, true
				break
			}
		}
		for !x.ended && x.pend[x.expect%uint64(C)] >= 0 {
			x.fillNext()
		}
	}
}

// complete accounts for one receive completion; a block is complete with
// its last message (the one with the immediate).
func (x *roceRecv) complete(wc verbs.WC) error {
	C := uint64(x.rr.cfg.Credits)
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("%w: receive completion %v", ErrTransfer, wc.Status)
	}
	b := wc.WRID
	want := verbs.WCRecvRDMAWithImm
	if x.useSend {
		want = verbs.WCRecv
	}
	imm := wc.Flags&verbs.WCWithImm != 0
	if wc.Opcode != want || (imm || !x.useSend) && wc.ImmData != uint32(b) || b < x.expect || b >= x.expect+C ||
		x.part[b%C]+int(wc.ByteLen) > x.bufsz {
		return fmt.Errorf("%w: completion %v imm %d for block %d (%d bytes), want %v for blocks %d..%d",
			ErrProtocol, wc.Opcode, wc.ImmData, b, wc.ByteLen, want, x.expect, x.expect+C-1)
	}
	x.part[b%C] += int(wc.ByteLen)
	if imm || !x.useSend { // the block's last message
		x.pend[b%C], x.part[b%C] = x.part[b%C], 0
	}
	return nil
}

// fillNext marks the next complete block filled and returns its token to
// the granter; a short block is the end of data.
func (x *roceRecv) fillNext() {
	C := uint64(x.rr.cfg.Credits)
	nb := x.pend[x.expect%C]
	x.pend[x.expect%C] = -1
	x.mu.Lock()
	err := x.w.MarkFilled(nb)
	x.opened = append(x.opened[:0], x.opened[1:]...) // in place: no allocation per block
	if err == nil {
		x.st.Full.Store(fullBlocks(x.rr.hdu.Data))
	}
	x.mu.Unlock()
	if err != nil {
		x.xerr, x.ended = err, true
		return
	}
	x.expect++
	x.st.Blocks.Add(1)
	x.st.Packets.Add(1)
	x.st.Bytes.Add(uint64(nb))
	x.sum.Blocks++
	x.sum.Bytes += uint64(nb)
	if nb < x.bufsz {
		x.ended, x.eod = true, true
		return
	}
	x.tokens <- struct{}{}
}

// finish stops the granter, explains an early end, ends the transfer and
// tells the sender the outcome.
func (x *roceRecv) finish() error {
	x.stopGrant()
	if e := <-x.gerr; x.xerr == nil && e != nil && !x.eod {
		x.xerr = e // after the end of data the granter may fail to open one more block: harmless
	}
	if !x.eod {
		x.blamePeer()
	}
	x.sum.Elapsed = time.Since(x.t0)
	x.mu.Lock()
	if !x.eod && len(x.opened) > 0 {
		// aborted: end the transfer after the last complete block
		x.w.MarkFilled(0)
	}
	x.mu.Unlock()
	if err := x.w.Close(); x.xerr == nil && err != nil {
		x.xerr = err
	}
	if x.xerr == nil && !x.eod {
		if x.xerr = x.ctx.Err(); x.xerr == nil {
			x.xerr = fmt.Errorf("%w: the transfer stopped before its end", ErrTransfer)
		}
	}
	if x.xerr != nil {
		return x.fail(x.xerr)
	}
	x.st.Transfers.Add(1)
	done := binary.BigEndian.AppendUint64(nil, x.sum.Bytes)
	done = binary.BigEndian.AppendUint64(done, x.sum.Blocks)
	return x.c.send(msgDone, done)
}

// blamePeer lets a sender that gave up explain the rest (flushed
// completions, a closed socket); its message may be just behind.
func (x *roceRecv) blamePeer() {
	x.stopPoll()
	peer, _ := x.perr.Load().(error)
	if peer == nil && x.xerr != nil {
		select {
		case peer = <-x.peerErr:
		case <-time.After(100 * time.Millisecond):
			peer, _ = x.perr.Load().(error)
		}
	}
	if peer != nil && (x.xerr == nil || errors.Is(peer, ErrPeer)) {
		x.xerr = fmt.Errorf("pipeline: sender: %w", peer)
	}
}
