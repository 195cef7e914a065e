package pipeline

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/verbs"
)

// RoCESendConfig controls SendRoCE.
type RoCESendConfig struct {
	// Header is the observation header sent ahead of the data (HDR_SIZE
	// required; default with Source: the local transfer's header).
	Header *dada.Header
	// Bytes is the size of the transfer of generated data.
	Bytes uint64
	// Source, if set, is a local ring to relay instead of generated data:
	// SendRoCE reads its next transfer (as one of its readers), registers
	// its blocks and writes each block straight from the ring, releasing it
	// once the write completes. Its block size must equal the receiver's.
	Source *dada.HDU
	// Rate is the data rate in bytes per second (0: as fast as possible).
	Rate float64
	// Fill fills a source buffer with the data at stream position pos
	// (default FillPattern).
	Fill func(dst []byte, pos uint64)
	// FillOnce fills each source buffer once, at the start, and sends it
	// again and again: the data are then only right for the first blocks,
	// but the sender spends no time generating them (for benchmarks).
	FillOnce bool
	// UseSend sends each block as SENDs of ChunkSize bytes (the last one
	// SEND WITH IMMEDIATE) into receives the receiver posts on the block's
	// chunks, as a classic verbs receive loop does (one receive per chunk),
	// instead of one RDMA WRITE WITH IMMEDIATE.
	UseSend bool
	// ChunkSize is the SEND size (default 1 MiB, at most the block size).
	ChunkSize int
	// QPs is the number of RC queue pairs (default 4): block b goes over QP
	// b mod QPs, so that several blocks are in flight at once.
	QPs int
	// Buffers is the number of source buffers of one block each (default
	// QPs+1, at most 254).
	Buffers int
	// Stats receives the live counters (may be nil).
	Stats *Stats
	// Logger receives progress messages; nil is silent.
	Logger *slog.Logger
}

// sendSQDepth is the send queue depth of SEND mode.
const sendSQDepth = 4096

// ringSlot is the source-buffer number (the low byte of a work request ID)
// of a block written straight from the relayed ring.
const ringSlot = 0xff

type srcBuf struct {
	mr   *verbs.MR
	buf  []byte
	busy bool
}

// SendRoCE sends one observation to the receiver at the other end of the
// control connection ctrlConn, from RC QPs on dev: the header first, then
// cfg.Bytes of data (or the next transfer of cfg.Source), each granted block
// with one RDMA WRITE WITH IMMEDIATE or a run of SENDs (the last block
// short, or empty when the data end on a block boundary). It returns when
// the receiver confirms the end of the transfer. SendRoCE does not close
// ctrlConn; close it afterwards.
func SendRoCE(ctx context.Context, ctrlConn net.Conn, dev *verbs.Device, cfg RoCESendConfig) (Summary, error) {
	s := &roceSender{ctx: ctx, cfg: cfg, c: newCtrl(ctrlConn)}
	defer s.close()
	err := s.run(dev)
	return s.sum, err
}

// roceSender is the state of one SendRoCE: set up (source, QPs, handshake,
// buffers), then per block wait for a grant and write (relay), then finish.
type roceSender struct {
	ctx  context.Context
	cfg  RoCESendConfig
	st   *Stats
	c    *ctrl
	rd   *dada.Reader // relay: the local ring's reader
	pd   *verbs.PD
	conn *rcGroup
	ring *RingMRs // relay: the local ring's registration
	srcs []srcBuf
	undo []func() // releases, in the order of acquisition

	bufsz int // the receiver's block size
	chunk int // SEND size
	cpb   int // work requests per block

	credits chan credit // grants from the receiver
	doneMsg chan error  // the receiver's final word (nil: done)
	quit    chan struct{}

	wcs       []verbs.WC
	sge       []verbs.SGE
	wr        []verbs.SendWR
	ringBusy  bool // relay: a ring block is being written
	haveBlock bool // relay: a ring block is held
	t0        time.Time
	pos       uint64 // stream bytes posted
	sum       Summary
}

// close releases what run acquired, the last first.
func (s *roceSender) close() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
}

// fail tells the receiver about e and returns it.
func (s *roceSender) fail(e error) error {
	s.c.send(msgError, []byte(e.Error()))
	return e
}

func (s *roceSender) run(dev *verbs.Device) error {
	if err := s.openSource(); err != nil {
		return err
	}
	local, err := s.setupQPs(dev)
	if err != nil {
		return err
	}
	if err := s.handshake(local); err != nil {
		return err
	}
	if err := s.setupBuffers(); err != nil {
		return err
	}
	s.sum.Header = s.cfg.Header
	s.listen()
	s.t0 = time.Now()
	for blk := uint64(0); ; blk++ {
		last, err := s.sendBlock(blk)
		if err != nil {
			return err
		}
		if last {
			break
		}
	}
	return s.finish()
}

// openSource opens the relayed ring's next transfer (if any) and applies
// the configuration's defaults.
func (s *roceSender) openSource() error {
	cfg := &s.cfg
	if cfg.Source != nil {
		rd, err := cfg.Source.OpenReader(s.ctx)
		if err != nil {
			return err
		}
		s.rd = rd
		s.undo = append(s.undo, func() { rd.Close() })
		h, err := rd.ReadHeader()
		if err != nil {
			return err
		}
		if cfg.Header == nil {
			cfg.Header = h
		}
	}
	if cfg.Header == nil {
		return fmt.Errorf("%w: SendRoCE needs an observation header", ErrConfig)
	}
	if cfg.Fill == nil {
		cfg.Fill = FillPattern
	}
	if cfg.QPs <= 0 {
		cfg.QPs = 4
	}
	if cfg.QPs > maxQPs {
		return fmt.Errorf("%w: %d QPs (at most %d)", ErrConfig, cfg.QPs, maxQPs)
	}
	if cfg.Buffers <= 0 {
		cfg.Buffers = cfg.QPs + 1
	}
	if cfg.Buffers >= ringSlot {
		// A work request ID carries the buffer number in its low byte, and
		// ringSlot there means the relayed ring.
		return fmt.Errorf("%w: %d source buffers (at most %d)", ErrConfig, cfg.Buffers, ringSlot-1)
	}
	if s.st = cfg.Stats; s.st == nil {
		s.st = new(Stats)
	}
	return nil
}

// setupQPs creates the PD and the RC QPs and describes them for the peer.
func (s *roceSender) setupQPs(dev *verbs.Device) ([]qpInfo, error) {
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	s.pd = pd
	s.undo = append(s.undo, func() { pd.Dealloc() })
	sqDepth := s.cfg.Buffers + 2
	if s.cfg.UseSend {
		sqDepth = sendSQDepth
	}
	if s.conn, err = newRCGroup(pd, s.cfg.QPs, sqDepth, 1); err != nil {
		return nil, err
	}
	s.undo = append(s.undo, s.conn.close)
	return s.conn.infos()
}

// handshake sends the hello (version, verb, chunk size, QPs, header), reads
// the receiver's accept (QPs, block size) and connects the QPs.
func (s *roceSender) handshake(local []qpInfo) error {
	cfg := &s.cfg
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 1 << 20
	}
	hello := binary.BigEndian.AppendUint16(nil, protoVersion)
	if cfg.UseSend {
		hello = append(hello, verbSend)
	} else {
		hello = append(hello, verbWrite)
	}
	hello = binary.BigEndian.AppendUint32(hello, uint32(cfg.ChunkSize))
	hello = appendQPInfos(hello, local)
	hello = append(hello, cfg.Header.Bytes()...)
	if err := s.c.send(msgHello, hello); err != nil {
		return err
	}
	acc, err := s.c.expect(msgAccept, 1)
	if err != nil {
		return fmt.Errorf("pipeline: waiting for the receiver: %w", err)
	}
	remote, acc, err := parseQPInfos(acc)
	if err != nil || len(acc) < 8+4+1 {
		return s.fail(fmt.Errorf("%w: bad accept message", ErrProtocol))
	}
	bufsz := int(binary.BigEndian.Uint64(acc))
	if bufsz <= 0 || int64(bufsz) > 1<<31 {
		return s.fail(fmt.Errorf("%w: receiver's block size %d", ErrProtocol, bufsz))
	}
	if err := s.conn.connect(remote); err != nil {
		return s.fail(err)
	}
	s.bufsz, s.chunk, s.cpb = bufsz, min(cfg.ChunkSize, bufsz), 1
	if cfg.UseSend {
		s.cpb = (bufsz + s.chunk - 1) / s.chunk
		if perQP := (max(cfg.Buffers, 1) + cfg.QPs - 1) / cfg.QPs; perQP*s.cpb > sendSQDepth {
			return s.fail(fmt.Errorf("%w: %d SENDs of %d bytes per %d-byte block, %d blocks in flight per QP: more than %d work requests; use a larger chunk",
				ErrConfig, s.cpb, s.chunk, bufsz, perQP, sendSQDepth))
		}
	}
	return nil
}

// setupBuffers registers the relayed ring, or allocates and registers the
// source buffers of generated data.
func (s *roceSender) setupBuffers() error {
	cfg := &s.cfg
	if cfg.Source != nil {
		if lb := cfg.Source.Data.BufSize(); lb != s.bufsz {
			return s.fail(fmt.Errorf("%w: the local ring's blocks are %d bytes, the receiver's %d: relaying needs equal block sizes", ErrConfig, lb, s.bufsz))
		}
		ring, err := RegisterRing(s.pd, cfg.Source.Data, RegisterOptions{Access: verbs.AccessLocalWrite, Logger: cfg.Logger})
		if err != nil {
			return s.fail(err)
		}
		s.ring = ring
		s.undo = append(s.undo, func() { ring.Close() })
		cfg.Buffers = 0
	}
	s.srcs = make([]srcBuf, cfg.Buffers)
	for i := range s.srcs {
		src := &s.srcs[i]
		src.buf = make([]byte, s.bufsz)
		mr, err := s.pd.RegMR(src.buf, verbs.AccessLocalWrite)
		if err != nil {
			return s.fail(err)
		}
		src.mr = mr
		s.undo = append(s.undo, func() { mr.Deregister() })
		if cfg.FillOnce {
			cfg.Fill(src.buf, uint64(i*s.bufsz))
		}
	}
	s.wcs = make([]verbs.WC, 8)
	s.sge = make([]verbs.SGE, s.cpb)
	s.wr = make([]verbs.SendWR, s.cpb)
	return nil
}

// listen starts the reader of the control connection: credits and the
// final confirmation arrive there.
func (s *roceSender) listen() {
	s.credits = make(chan credit, 64)
	s.doneMsg = make(chan error, 1)
	s.quit = make(chan struct{})
	s.undo = append(s.undo, func() { close(s.quit) })
	go func() {
		for {
			t, b, err := s.c.recvReuse() // b is used before the next call
			switch {
			case err != nil:
				s.doneMsg <- err
				return
			case t == msgCredit && len(b) >= creditLen:
				select {
				case s.credits <- parseCredit(b):
				case <-s.quit:
					return
				}
			case t == msgDone:
				s.doneMsg <- nil
				return
			default:
				s.doneMsg <- fmt.Errorf("%w: unexpected message %q", ErrProtocol, t)
				return
			}
		}
	}()
}

// sendBlock sends block blk: it takes the data (the next ring block, or a
// free source buffer filled), waits for the block's grant and posts the
// writes. last reports the end of the transfer (a short block).
func (s *roceSender) sendBlock(blk uint64) (last bool, err error) {
	n := 0
	if s.rd == nil {
		n = int(min(uint64(s.bufsz), s.cfg.Bytes-s.pos))
	}
	s.pace()
	var sg verbs.SGE
	si := ringSlot
	if s.rd != nil {
		if sg, n, err = s.nextRingBlock(); err != nil {
			return false, err
		}
	} else {
		if si, err = s.freeBuffer(); err != nil {
			return false, err
		}
		src := &s.srcs[si]
		if !s.cfg.FillOnce && n > 0 {
			s.cfg.Fill(src.buf[:n], s.pos)
		}
		sg = verbs.SGE{Addr: src.mr.Addr(), Length: uint32(n), LKey: src.mr.LKey()}
	}
	cr, err := s.grant(blk, n)
	if err != nil {
		return false, err
	}
	if err := s.post(blk, si, sg, n, cr); err != nil {
		return false, err
	}
	s.pos += uint64(n)
	s.st.Packets.Add(1)
	s.st.Blocks.Add(1)
	s.st.Bytes.Add(uint64(n))
	s.sum.Blocks++
	return n < s.bufsz, nil
}

// pace waits until the stream position is due at cfg.Rate.
func (s *roceSender) pace() {
	if s.cfg.Rate <= 0 {
		return
	}
	if ahead := float64(s.pos)/s.cfg.Rate - time.Since(s.t0).Seconds(); ahead > 0 {
		select {
		case <-s.ctx.Done():
		case <-time.After(time.Duration(ahead * float64(time.Second))):
		}
	}
}

// nextRingBlock waits until the previous ring block is written, releases
// it and takes the next one (none at the end of the transfer: n is 0).
func (s *roceSender) nextRingBlock() (sg verbs.SGE, n int, err error) {
	for s.ringBusy {
		if err := s.reap(true); err != nil {
			return sg, 0, s.fail(err)
		}
	}
	if s.haveBlock {
		if err := s.rd.MarkCleared(); err != nil {
			return sg, 0, s.fail(err)
		}
		s.haveBlock = false
	}
	b, err := s.rd.NextBlockContext(s.ctx)
	switch {
	case err == io.EOF:
		return sg, 0, nil
	case err != nil:
		return sg, 0, s.fail(err)
	}
	s.haveBlock, n = true, len(b.Data)
	if n > 0 {
		bm, addr, ok := s.ring.Lookup(b.Data)
		if !ok {
			return sg, 0, s.fail(fmt.Errorf("pipeline: local block %d is not in the registered ring", b.Index))
		}
		sg = verbs.SGE{Addr: addr, Length: uint32(n), LKey: bm.LKey}
	}
	return sg, n, nil
}

// freeBuffer returns a source buffer no write is using, reaping
// completions (waiting for one if all are busy).
func (s *roceSender) freeBuffer() (int, error) {
	for {
		if err := s.reap(false); err != nil {
			return 0, s.fail(err)
		}
		for i := range s.srcs {
			if !s.srcs[i].busy {
				return i, nil
			}
		}
		if err := s.reap(true); err != nil {
			return 0, s.fail(err)
		}
	}
}

// grant waits for the receiver's credit for block blk of n bytes.
func (s *roceSender) grant(blk uint64, n int) (credit, error) {
	var cr credit
	t := time.Now()
	select {
	case cr = <-s.credits:
	case err := <-s.doneMsg:
		if err == nil {
			err = fmt.Errorf("%w: the receiver ended the transfer early", ErrProtocol)
		}
		return cr, err
	case <-s.ctx.Done():
		return cr, s.fail(s.ctx.Err())
	}
	s.st.WaitNanos.Add(int64(time.Since(t)))
	if cr.Block != blk || int(cr.Len) < n {
		return cr, s.fail(fmt.Errorf("%w: credit for block %d of %d bytes, want block %d", ErrProtocol, cr.Block, cr.Len, blk))
	}
	return cr, nil
}

// post writes block blk of n bytes at sg (source buffer si) to the granted
// block: one RDMA WRITE WITH IMMEDIATE, or SENDs of chunk bytes into the
// receives posted on the block, the last carrying the block number and
// signaled.
func (s *roceSender) post(blk uint64, si int, sg verbs.SGE, n int, cr credit) error {
	nwr := 1
	wrid := blk<<8 | uint64(si)
	wr, sge := s.wr, s.sge
	if !s.cfg.UseSend {
		wr[0] = verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
			ImmData: uint32(blk), RemoteAddr: cr.Addr, RKey: cr.RKey}
		if n > 0 {
			sge[0] = sg
			wr[0].SGList = sge[:1]
		}
	} else {
		chunk := s.chunk
		nwr = max(1, (n+chunk-1)/chunk)
		for j := 0; j < nwr; j++ {
			wr[j] = verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend}
			if l := min(chunk, n-j*chunk); l > 0 {
				sge[j] = verbs.SGE{Addr: sg.Addr + uint64(j*chunk), Length: uint32(l), LKey: sg.LKey}
				wr[j].SGList = sge[j : j+1]
			}
		}
		wr[nwr-1].Opcode, wr[nwr-1].ImmData, wr[nwr-1].Flags = verbs.WRSendWithImm, uint32(blk), verbs.SendSignaled
	}
	if k, err := s.conn.qps[blk%uint64(s.cfg.QPs)].PostSend(wr[:nwr]); err != nil || k != nwr {
		return s.fail(fmt.Errorf("pipeline: posting block %d (%d of %d work requests): %w", blk, k, nwr, err))
	}
	if si == ringSlot {
		s.ringBusy = true
	} else {
		s.srcs[si].busy = true
	}
	return nil
}

// reap takes send completions (waiting for the first if block) and frees
// the buffers whose writes completed.
func (s *roceSender) reap(block bool) error {
	for {
		var n int
		if block {
			var err error
			if n, err = s.conn.poll(s.ctx, s.wcs); err != nil {
				return err
			}
		} else {
			n = s.conn.cq.Poll(s.wcs)
		}
		for _, wc := range s.wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("%w: RDMA WRITE of block %d: %v", ErrTransfer, wc.WRID>>8, wc.Status)
			}
			if i := wc.WRID & 0xff; i == ringSlot {
				s.ringBusy = false
			} else {
				s.srcs[i].busy = false
			}
		}
		if n < len(s.wcs) {
			return nil
		}
		block = false
	}
}

// inflight counts the writes not yet completed.
func (s *roceSender) inflight() int {
	k := 0
	if s.ringBusy {
		k++
	}
	for i := range s.srcs {
		if s.srcs[i].busy {
			k++
		}
	}
	return k
}

// finish waits for the last writes, releases the last ring block and waits
// for the receiver's confirmation.
func (s *roceSender) finish() error {
	for s.inflight() > 0 {
		if err := s.reap(true); err != nil {
			return s.fail(err)
		}
	}
	if s.haveBlock {
		if err := s.rd.MarkCleared(); err != nil {
			return s.fail(err)
		}
	}
	s.sum.Bytes = s.pos
	select {
	case err := <-s.doneMsg:
		s.sum.Elapsed = time.Since(s.t0)
		if err != nil {
			return fmt.Errorf("pipeline: receiver: %w", err)
		}
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
	s.st.Transfers.Add(1)
	return nil
}
