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
	// chunks, as the receive loop of the user's note does, instead of one
	// RDMA WRITE WITH IMMEDIATE.
	UseSend bool
	// ChunkSize is the SEND size (default 1 MiB, at most the block size).
	ChunkSize int
	// QPs is the number of RC queue pairs (default 4): block b goes over QP
	// b mod QPs, so that several blocks are in flight at once.
	QPs int
	// Buffers is the number of source buffers of one block each (default
	// QPs+1).
	Buffers int
	// Stats receives the live counters (may be nil).
	Stats *Stats
	// Logger receives progress messages; nil is silent.
	Logger *slog.Logger
}

// sendSQDepth is the send queue depth of SEND mode.
const sendSQDepth = 4096

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
func SendRoCE(ctx context.Context, ctrlConn net.Conn, dev *verbs.Device, cfg RoCESendConfig) (sum Summary, err error) {
	var rd *dada.Reader
	if cfg.Source != nil {
		if rd, err = cfg.Source.OpenReader(ctx); err != nil {
			return sum, err
		}
		defer rd.Close()
		h, err := rd.ReadHeader()
		if err != nil {
			return sum, err
		}
		if cfg.Header == nil {
			cfg.Header = h
		}
	}
	if cfg.Header == nil {
		return sum, fmt.Errorf("%w: SendRoCE needs an observation header", ErrConfig)
	}
	if cfg.Fill == nil {
		cfg.Fill = FillPattern
	}
	if cfg.QPs <= 0 {
		cfg.QPs = 4
	}
	if cfg.QPs > maxQPs {
		return sum, fmt.Errorf("%w: %d QPs (at most %d)", ErrConfig, cfg.QPs, maxQPs)
	}
	if cfg.Buffers <= 0 {
		cfg.Buffers = cfg.QPs + 1
	}
	st := cfg.Stats
	if st == nil {
		st = new(Stats)
	}
	c := newCtrl(ctrlConn)
	fail := func(e error) (Summary, error) {
		c.send(msgError, []byte(e.Error()))
		return sum, e
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return sum, err
	}
	defer pd.Dealloc()
	sqDepth := cfg.Buffers + 2
	if cfg.UseSend {
		sqDepth = sendSQDepth
	}
	conn, err := newRCGroup(pd, cfg.QPs, sqDepth, 1)
	if err != nil {
		return sum, err
	}
	defer conn.close()
	local, err := conn.infos()
	if err != nil {
		return sum, err
	}
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
	if err := c.send(msgHello, hello); err != nil {
		return sum, err
	}
	acc, err := c.expect(msgAccept, 1)
	if err != nil {
		return sum, fmt.Errorf("pipeline: waiting for the receiver: %w", err)
	}
	remote, acc, err := parseQPInfos(acc)
	if err != nil || len(acc) < 8+4+1 {
		return fail(fmt.Errorf("%w: bad accept message", ErrProtocol))
	}
	bufsz := int(binary.BigEndian.Uint64(acc))
	if bufsz <= 0 || bufsz > 1<<31 {
		return fail(fmt.Errorf("%w: receiver's block size %d", ErrProtocol, bufsz))
	}
	if err := conn.connect(remote); err != nil {
		return fail(err)
	}
	chunk := min(cfg.ChunkSize, bufsz)
	cpb := 1 // work requests per block
	if cfg.UseSend {
		cpb = (bufsz + chunk - 1) / chunk
		if perQP := (max(cfg.Buffers, 1) + cfg.QPs - 1) / cfg.QPs; perQP*cpb > sendSQDepth {
			return fail(fmt.Errorf("%w: %d SENDs of %d bytes per %d-byte block, %d blocks in flight per QP: more than %d work requests; use a larger chunk",
				ErrConfig, cpb, chunk, bufsz, perQP, sendSQDepth))
		}
	}
	var ringMRs *RingMRs
	if cfg.Source != nil {
		if lb := cfg.Source.Data.BufSize(); lb != bufsz {
			return fail(fmt.Errorf("%w: the local ring's blocks are %d bytes, the receiver's %d: relaying needs equal block sizes", ErrConfig, lb, bufsz))
		}
		if ringMRs, err = RegisterRing(pd, cfg.Source.Data, RegisterOptions{Access: verbs.AccessLocalWrite, Logger: cfg.Logger}); err != nil {
			return fail(err)
		}
		defer ringMRs.Close()
		cfg.Buffers = 0
	}
	srcs := make([]srcBuf, cfg.Buffers)
	for i := range srcs {
		srcs[i].buf = make([]byte, bufsz)
		if srcs[i].mr, err = pd.RegMR(srcs[i].buf, verbs.AccessLocalWrite); err != nil {
			return fail(err)
		}
		defer srcs[i].mr.Deregister()
		if cfg.FillOnce {
			cfg.Fill(srcs[i].buf, uint64(i*bufsz))
		}
	}
	sum.Header = cfg.Header

	// Credits and the final confirmation arrive on the control connection.
	credits := make(chan credit, 64)
	doneMsg := make(chan error, 1)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		for {
			t, b, err := c.recv()
			switch {
			case err != nil:
				doneMsg <- err
				return
			case t == msgCredit && len(b) >= creditLen:
				select {
				case credits <- parseCredit(b):
				case <-quit:
					return
				}
			case t == msgDone:
				doneMsg <- nil
				return
			default:
				doneMsg <- fmt.Errorf("%w: unexpected message %q", ErrProtocol, t)
				return
			}
		}
	}()
	wcs := make([]verbs.WC, 8)
	ringBusy, haveBlock := false, false // relay: a ring block is being written / held
	reap := func(block bool) error {
		for {
			var n int
			if block {
				var err error
				if n, err = conn.poll(ctx, wcs); err != nil {
					return err
				}
			} else {
				n = conn.cq.Poll(wcs)
			}
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess {
					return fmt.Errorf("%w: RDMA WRITE of block %d: %v", ErrTransfer, wc.WRID>>8, wc.Status)
				}
				if i := wc.WRID & 0xff; i == 0xff {
					ringBusy = false
				} else {
					srcs[i].busy = false
				}
			}
			if n < len(wcs) {
				return nil
			}
			block = false
		}
	}
	inflight := func() int {
		k := 0
		if ringBusy {
			k++
		}
		for i := range srcs {
			if srcs[i].busy {
				k++
			}
		}
		return k
	}
	t0 := time.Now()
	var pos uint64
	sge := make([]verbs.SGE, cpb)
	wr := make([]verbs.SendWR, cpb)
	for blk := uint64(0); ; blk++ {
		n := 0
		if rd == nil {
			n = int(min(uint64(bufsz), cfg.Bytes-pos))
		}
		if cfg.Rate > 0 {
			if ahead := float64(pos)/cfg.Rate - time.Since(t0).Seconds(); ahead > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(ahead * float64(time.Second))):
				}
			}
		}
		// relay: the next ring block, once the previous one is written
		var sg verbs.SGE
		si := -1
		if rd != nil {
			for ringBusy {
				if err := reap(true); err != nil {
					return fail(err)
				}
			}
			if haveBlock {
				if err := rd.MarkCleared(); err != nil {
					return fail(err)
				}
				haveBlock = false
			}
			b, err := rd.NextBlockContext(ctx)
			switch {
			case err == io.EOF:
			case err != nil:
				return fail(err)
			default:
				haveBlock, n = true, len(b.Data)
				if n > 0 {
					bm, addr, ok := ringMRs.Lookup(b.Data)
					if !ok {
						return fail(fmt.Errorf("pipeline: local block %d is not in the registered ring", b.Index))
					}
					sg = verbs.SGE{Addr: addr, Length: uint32(n), LKey: bm.LKey}
				}
			}
			si = 0xff
		}
		// a free source buffer, filled while earlier writes are in flight
		for si < 0 {
			if err := reap(false); err != nil {
				return fail(err)
			}
			for i := range srcs {
				if !srcs[i].busy {
					si = i
					break
				}
			}
			if si < 0 {
				if err := reap(true); err != nil {
					return fail(err)
				}
			}
		}
		if si != 0xff {
			s := &srcs[si]
			if !cfg.FillOnce && n > 0 {
				cfg.Fill(s.buf[:n], pos)
			}
			sg = verbs.SGE{Addr: s.mr.Addr(), Length: uint32(n), LKey: s.mr.LKey()}
		}
		var cr credit
		t := time.Now()
		select {
		case cr = <-credits:
		case err := <-doneMsg:
			if err == nil {
				err = fmt.Errorf("%w: the receiver ended the transfer early", ErrProtocol)
			}
			return sum, err
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		st.WaitNanos.Add(int64(time.Since(t)))
		if cr.Block != blk || int(cr.Len) < n {
			return fail(fmt.Errorf("%w: credit for block %d of %d bytes, want block %d", ErrProtocol, cr.Block, cr.Len, blk))
		}
		nwr := 1
		wrid := blk<<8 | uint64(si)
		if !cfg.UseSend {
			wr[0] = verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
				ImmData: uint32(blk), RemoteAddr: cr.Addr, RKey: cr.RKey}
			if n > 0 {
				sge[0] = sg
				wr[0].SGList = sge[:1]
			}
		} else {
			// SENDs of chunk bytes into the receives posted on the block;
			// the last carries the block number and is the one signaled
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
		if k, err := conn.qps[blk%uint64(cfg.QPs)].PostSend(wr[:nwr]); err != nil || k != nwr {
			return fail(fmt.Errorf("pipeline: posting block %d (%d of %d work requests): %w", blk, k, nwr, err))
		}
		if si == 0xff {
			ringBusy = true
		} else {
			srcs[si].busy = true
		}
		pos += uint64(n)
		st.Packets.Add(1)
		st.Blocks.Add(1)
		st.Bytes.Add(uint64(n))
		sum.Blocks++
		if n < bufsz {
			break
		}
	}
	for inflight() > 0 {
		if err := reap(true); err != nil {
			return fail(err)
		}
	}
	if haveBlock {
		if err := rd.MarkCleared(); err != nil {
			return fail(err)
		}
	}
	sum.Bytes = pos
	select {
	case err := <-doneMsg:
		sum.Elapsed = time.Since(t0)
		if err != nil {
			return sum, fmt.Errorf("pipeline: receiver: %w", err)
		}
	case <-ctx.Done():
		return sum, ctx.Err()
	}
	st.Transfers.Add(1)
	return sum, nil
}
