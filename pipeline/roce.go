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
	if bs := hdu.Data.BufSize(); bs > 1<<31 {
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
func (rr *RoCEReceiver) Receive(ctx context.Context, ctrlConn net.Conn) (sum Summary, err error) {
	c := newCtrl(ctrlConn)
	fail := func(e error) (Summary, error) {
		c.send(msgError, []byte(e.Error()))
		return sum, e
	}
	hello, err := c.expect(msgHello, helloFixed)
	if err != nil {
		return sum, fmt.Errorf("pipeline: waiting for the sender's hello: %w", err)
	}
	if v := binary.BigEndian.Uint16(hello); v != protoVersion {
		return fail(fmt.Errorf("%w: sender speaks version %d, this receiver %d", ErrProtocol, v, protoVersion))
	}
	useSend, chunk := hello[2] == verbSend, int(binary.BigEndian.Uint32(hello[3:]))
	bufsz := rr.hdu.Data.BufSize()
	if useSend && chunk <= 0 {
		return fail(fmt.Errorf("%w: SEND chunk of %d bytes", ErrProtocol, chunk))
	}
	chunk = min(chunk, bufsz)
	chunks := 1 // receives per block
	if useSend {
		chunks = (bufsz + chunk - 1) / chunk
	}
	remote, rest, err := parseQPInfos(hello[helloFixed:])
	if err != nil {
		return fail(err)
	}
	hdr := dada.ParseHeader(rest)
	if err := hdr.Validate(rr.hdu.Header.BufSize()); err != nil {
		return fail(fmt.Errorf("pipeline: the sender's header: %w", err))
	}
	nqp := len(remote)
	conn, err := newRCGroup(rr.pd, nqp, 4, ((rr.cfg.Credits+nqp-1)/nqp+1)*chunks)
	if err != nil {
		return fail(err)
	}
	defer conn.close()
	if err := conn.connect(remote); err != nil {
		return fail(err)
	}
	local, err := conn.infos()
	if err != nil {
		return fail(err)
	}
	w, err := rr.hdu.OpenWriter(ctx, dada.WriterOptions{})
	if err != nil {
		return fail(err)
	}
	if err := w.WriteHeader(hdr); err != nil {
		w.Close()
		return fail(err)
	}
	acc := appendQPInfos(nil, local)
	acc = binary.BigEndian.AppendUint64(acc, uint64(bufsz))
	acc = binary.BigEndian.AppendUint32(acc, uint32(rr.hdu.Data.NBufs()))
	acc = append(acc, byte(rr.mrs.Mode))
	if err := c.send(msgAccept, acc); err != nil {
		w.Close()
		return sum, err
	}
	sum.Header = hdr
	sum.Via = fmt.Sprintf("RDMA WRITE WITH IMM over %d QPs", nqp)
	if useSend {
		sum.Via = fmt.Sprintf("SEND of %d-byte chunks over %d QPs", chunk, nqp)
	}
	st := rr.cfg.Stats
	t0 := time.Now()

	// The granter opens blocks (waiting for readers: backpressure), posts a
	// receive for each and grants it; the completion loop below marks them
	// filled. mu serialises the dada writer between the two.
	var mu sync.Mutex
	tokens := make(chan struct{}, rr.cfg.Credits)
	for range rr.cfg.Credits {
		tokens <- struct{}{}
	}
	gctx, stopGrant := context.WithCancel(ctx)
	gerr := make(chan error, 1)
	var opened []uint64 // block numbers opened, oldest first (guarded by mu)
	go func() {
		var next uint64
		for {
			select {
			case <-gctx.Done():
				gerr <- nil
				return
			case <-tokens:
			}
			mu.Lock()
			t := time.Now()
			b, err := w.OpenBlockContext(gctx)
			st.WaitNanos.Add(int64(time.Since(t)))
			if err == nil {
				opened = append(opened, next)
			}
			mu.Unlock()
			if err != nil {
				if gctx.Err() != nil {
					err = nil
				}
				gerr <- err
				return
			}
			bm, addr, ok := rr.mrs.Lookup(b.Data)
			if !ok {
				gerr <- fmt.Errorf("pipeline: block %d is not in the registered ring", b.Index)
				return
			}
			// RDMA WRITE WITH IMMEDIATE consumes one receive (no buffer);
			// SENDs land in receives whose buffers are the block's chunks,
			// with the block's lkey (one MR, or the block's own).
			rwr := []verbs.RecvWR{{WRID: next}}
			if useSend {
				rwr = make([]verbs.RecvWR, chunks)
				for k := range rwr {
					l := min(chunk, bufsz-k*chunk)
					rwr[k] = verbs.RecvWR{WRID: next, SGList: []verbs.SGE{{Addr: addr + uint64(k*chunk), Length: uint32(l), LKey: bm.LKey}}}
				}
			}
			if _, err := conn.qps[next%uint64(nqp)].PostRecv(rwr); err != nil {
				gerr <- fmt.Errorf("pipeline: posting a receive: %w", err)
				return
			}
			if err := c.send(msgCredit, credit{Block: next, Addr: addr, RKey: bm.RKey, Len: uint32(bufsz)}.append(nil)); err != nil {
				gerr <- err
				return
			}
			next++
		}
	}()
	// The sender's control messages: only an error (or a close) is expected now.
	peerErr := make(chan error, 1)
	go func() {
		_, _, err := c.recv()
		if err == nil {
			err = fmt.Errorf("%w: unexpected message during the transfer", ErrProtocol)
		}
		peerErr <- err
	}()
	pctx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	var perr atomic.Value
	go func() {
		select {
		case e := <-peerErr:
			perr.Store(e)
			stopPoll()
		case <-pctx.Done():
		}
	}()
	var xerr error

	wcs := make([]verbs.WC, 16)
	// Blocks complete in order on each QP but not across QPs: a completed
	// block waits in pend until every earlier one is marked filled.
	C := uint64(rr.cfg.Credits)
	pend := make([]int, C) // bytes of block b at b%C, -1: not complete
	part := make([]int, C) // SEND: bytes of block b received so far
	for i := range pend {
		pend[i] = -1
	}
	var expect uint64
	ended, eod := false, false
	for !ended {
		n, err := conn.poll(pctx, wcs)
		if err != nil {
			break
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				xerr = fmt.Errorf("%w: receive completion %v", ErrTransfer, wc.Status)
				ended = true
				break
			}
			b := wc.WRID
			want := verbs.WCRecvRDMAWithImm
			if useSend {
				want = verbs.WCRecv
			}
			imm := wc.Flags&verbs.WCWithImm != 0
			if wc.Opcode != want || (imm || !useSend) && wc.ImmData != uint32(b) || b < expect || b >= expect+C ||
				part[b%C]+int(wc.ByteLen) > bufsz {
				xerr = fmt.Errorf("%w: completion %v imm %d for block %d (%d bytes), want %v for blocks %d..%d",
					ErrProtocol, wc.Opcode, wc.ImmData, b, wc.ByteLen, want, expect, expect+C-1)
				ended = true
				break
			}
			part[b%C] += int(wc.ByteLen)
			if imm || !useSend { // the block's last message
				pend[b%C], part[b%C] = part[b%C], 0
			}
		}
		for !ended && pend[expect%C] >= 0 {
			nb := pend[expect%C]
			pend[expect%C] = -1
			mu.Lock()
			err := w.MarkFilled(nb)
			opened = opened[1:]
			if err == nil {
				st.Full.Store(fullBlocks(rr.hdu.Data))
			}
			mu.Unlock()
			if err != nil {
				xerr = err
				ended = true
				break
			}
			expect++
			st.Blocks.Add(1)
			st.Packets.Add(1)
			st.Bytes.Add(uint64(nb))
			sum.Blocks++
			sum.Bytes += uint64(nb)
			if nb < bufsz {
				ended, eod = true, true
				break
			}
			tokens <- struct{}{}
		}
	}
	stopGrant()
	if e := <-gerr; xerr == nil && e != nil && !eod {
		xerr = e // after the end of data the granter may fail to open one more block: harmless
	}
	if !eod {
		// A sender that gave up explains the rest (flushed completions, a
		// closed socket); its message may be just behind.
		stopPoll()
		peer, _ := perr.Load().(error)
		if peer == nil && xerr != nil {
			select {
			case peer = <-peerErr:
			case <-time.After(100 * time.Millisecond):
				peer, _ = perr.Load().(error)
			}
		}
		if peer != nil && (xerr == nil || errors.Is(peer, ErrPeer)) {
			xerr = fmt.Errorf("pipeline: sender: %w", peer)
		}
	}
	sum.Elapsed = time.Since(t0)
	mu.Lock()
	if !eod && len(opened) > 0 {
		// aborted: end the transfer after the last complete block
		w.MarkFilled(0)
	}
	mu.Unlock()
	if err := w.Close(); xerr == nil && err != nil {
		xerr = err
	}
	if xerr == nil && !eod {
		if xerr = ctx.Err(); xerr == nil {
			xerr = fmt.Errorf("%w: the transfer stopped before its end", ErrTransfer)
		}
	}
	if xerr != nil {
		c.send(msgError, []byte(xerr.Error()))
		return sum, xerr
	}
	st.Transfers.Add(1)
	done := binary.BigEndian.AppendUint64(nil, sum.Bytes)
	done = binary.BigEndian.AppendUint64(done, sum.Blocks)
	if err := c.send(msgDone, done); err != nil {
		return sum, err
	}
	return sum, nil
}
