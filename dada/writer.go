package dada

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// WriterOptions control OpenWriter.
type WriterOptions struct {
	// Recover takes over a ring whose previous writer died mid-transfer:
	// the transfer it left open is ended after the last buffer it marked
	// filled (its partly written buffer is dropped), so that readers see a
	// clean end of data. Without Recover such a ring gives a
	// *WriterDiedError.
	Recover bool
	// CloseTimeout bounds Close when it must wait for readers to release a
	// buffer (default 10 s).
	CloseTimeout time.Duration
}

// Block is one ring buffer handed out for direct access.
type Block struct {
	Index int    // slot in the ring (Count % NBufs)
	Count uint64 // buffer count since the ring was created
	Data  []byte // writer: the whole buffer; reader: its valid bytes
}

// Writer writes one transfer (observation) into an HDU: one header, then
// data, then the end of data on Close. It holds the writer locks of both
// rings. A Writer is not safe for concurrent use.
type Writer struct {
	hdu          *HDU
	ctx          context.Context
	opt          WriterOptions
	headerDone   bool
	ended        bool
	closed       bool
	cur          []byte // buffer being filled by Write
	bytes        uint64 // bytes in cur
	markedFilled bool
	open         []int // slots opened with OpenBlock, oldest first
	written      uint64
}

// OpenWriter locks the HDU for writing (dada_hdu_lock_write): the header
// block, then the data block. ctx bounds the wait for the locks and every
// later blocking operation of Write and OpenBlock.
func (h *HDU) OpenWriter(ctx context.Context, opt WriterOptions) (*Writer, error) {
	if opt.CloseTimeout <= 0 {
		opt.CloseTimeout = 10 * time.Second
	}
	if err := h.Header.lockWriteChecked(ctx, "header block", opt.Recover); err != nil {
		return nil, err
	}
	if err := h.Data.lockWriteChecked(ctx, "data block", opt.Recover); err != nil {
		h.Header.unlockWrite()
		return nil, err
	}
	return &Writer{hdu: h, ctx: ctx, opt: opt, markedFilled: true}, nil
}

// lockWriteChecked takes the writer lock and handles a dead predecessor.
func (r *Ring) lockWriteChecked(ctx context.Context, what string, recov bool) error {
	prev, pid, err := r.lockWrite(ctx)
	if err != nil {
		return err
	}
	if prev == StateDiscon {
		return nil
	}
	s := r.sync
	curr, next := s.get(offWBufCurr), s.get(offWBufNext)
	if prev == StateWriter || prev == StateWChange && next == curr {
		// the previous writer died outside a transfer (after its end of
		// data, or before its first buffer): nothing is pending for readers
		r.afterEOD()
		r.state = StateWChange
		s.setWState(StateWChange)
		r.xfer = s.get(offWXfer) % Xfers
		r.logger().Info("dada: previous writer exited without unlocking between transfers", "key", r.key.Short(), "block", what, "state", prev)
		return nil
	}
	if !recov {
		e := &WriterDiedError{Key: r.key, Block: what, State: prev, PID: pid, Alive: processAlive(pid),
			WXfer: s.get(offWXfer), WBufCurr: s.get(offWBufCurr), WBufNext: s.get(offWBufNext)}
		r.releaseWriteLock(prev)
		return e
	}
	if err := r.recoverWriter(ctx, prev); err != nil {
		r.unlockWrite()
		return fmt.Errorf("dada: recovering %s %s: %w", what, r.key.Short(), err)
	}
	return nil
}

// WriteHeader writes the transfer's header into the next header buffer and
// marks it filled (with end of data on the header block, as psrdada 1.1
// writers do). It must come before any data. The header needs HDR_SIZE.
func (w *Writer) WriteHeader(h *Header) error {
	if w.closed || w.headerDone {
		return fmt.Errorf("%w: the header of this transfer was already written", ErrState)
	}
	hr := w.hdu.Header
	if err := h.Validate(int(hr.bufsz)); err != nil {
		return err
	}
	slot, _, err := hr.nextWrite(w.ctx)
	if err != nil {
		return err
	}
	if err := h.Encode(hr.blocks[slot]); err != nil {
		return err
	}
	if err := hr.enableEOD(); err != nil {
		return err
	}
	if err := hr.markFilled(w.ctx, hr.bufsz); err != nil {
		return err
	}
	w.headerDone = true
	return nil
}

func (w *Writer) checkData() error {
	switch {
	case w.closed:
		return fmt.Errorf("%w: writer is closed", ErrState)
	case !w.headerDone:
		return fmt.Errorf("%w: write the transfer's header (WriteHeader) before its data", ErrState)
	case w.ended:
		return fmt.Errorf("%w: a short buffer ended this transfer; open a new writer for the next one", ErrTransferEnded)
	}
	return nil
}

// Write copies p into the ring, buffer after buffer (ipcio_write). A buffer
// is marked filled when the next one is needed, so that Close can mark the
// last one as the end of data.
func (w *Writer) Write(p []byte) (int, error) {
	if err := w.checkData(); err != nil {
		return 0, err
	}
	if len(w.open) > 0 {
		return 0, fmt.Errorf("%w: Write cannot be mixed with open direct blocks; MarkFilled them first", ErrState)
	}
	d := w.hdu.Data
	n := 0
	for len(p) > 0 {
		if w.cur != nil && w.bytes == d.bufsz {
			if !w.markedFilled {
				if err := d.markFilled(w.ctx, w.bytes); err != nil {
					return n, err
				}
			}
			w.cur, w.bytes, w.markedFilled = nil, 0, true
		}
		if w.cur == nil {
			slot, _, err := d.nextWrite(w.ctx)
			if err != nil {
				return n, err
			}
			w.cur, w.bytes, w.markedFilled = d.blocks[slot], 0, false
		}
		c := copy(w.cur[w.bytes:], p)
		w.bytes += uint64(c)
		p = p[c:]
		n += c
	}
	w.written += uint64(n)
	return n, nil
}

// OpenBlock opens the next buffer for direct placement (for example by an
// RDMA receiver) and returns it whole, with its slot index
// (ipcio_open_block_write). It waits, bounded by the writer's context, until
// every reader has released the slot. Up to NBufs-1 blocks may be open.
func (w *Writer) OpenBlock() (Block, error) {
	return w.OpenBlockContext(w.ctx)
}

// OpenBlockContext is OpenBlock with its own context.
func (w *Writer) OpenBlockContext(ctx context.Context) (Block, error) {
	if err := w.checkData(); err != nil {
		return Block{}, err
	}
	d := w.hdu.Data
	if w.cur != nil && !w.markedFilled {
		return Block{}, fmt.Errorf("%w: a buffer partly filled by Write is pending; direct blocks cannot follow it", ErrState)
	}
	if uint64(len(w.open)) >= d.nbufs-1 && d.nbufs > 1 || d.nbufs == 1 && len(w.open) == 1 {
		return Block{}, fmt.Errorf("%w: %d blocks already open (the ring has %d)", ErrState, len(w.open), d.nbufs)
	}
	slot, count, err := d.nextWrite(ctx)
	if err != nil {
		return Block{}, err
	}
	w.open = append(w.open, slot)
	return Block{Index: slot, Count: count, Data: d.blocks[slot]}, nil
}

// MarkFilled marks the oldest open block filled with n bytes
// (ipcio_close_block_write). n smaller than the block size ends the
// transfer: readers see exactly n bytes of that block and then end of data.
func (w *Writer) MarkFilled(n int) error {
	if len(w.open) == 0 {
		return fmt.Errorf("%w: no open block to mark filled", ErrState)
	}
	d := w.hdu.Data
	if n < 0 || uint64(n) > d.bufsz {
		return fmt.Errorf("%w: %d bytes do not fit a %d-byte block", ErrInvalidConfig, n, d.bufsz)
	}
	if err := d.markFilled(w.ctx, uint64(n)); err != nil {
		return err
	}
	w.open = w.open[:copy(w.open, w.open[1:])]
	w.written += uint64(n)
	if d.state != StateWriting {
		w.ended = true
	}
	return nil
}

// Written returns the data bytes written so far.
func (w *Writer) Written() uint64 { return w.written }

// Close ends the transfer and releases the locks (ipcio_close then
// dada_hdu_unlock_write): the data buffer being filled is marked as the end
// of data; open direct blocks are marked full first. If only a header was
// written, an empty end-of-data buffer is written so readers do not hang.
// When the transfer ends exactly on a block boundary the end of data needs
// one more (empty) buffer, as in psrdada; Close waits up to
// WriterOptions.CloseTimeout for a reader to free one and otherwise returns
// an error, leaving that transfer without its end mark. The locks are
// released in every case.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), w.opt.CloseTimeout)
	defer cancel()
	d := w.hdu.Data
	var errs []error
	if w.headerDone && d.state == StateWChange {
		// header but no data: raise SOD so that readers get an empty transfer
		if _, _, err := d.nextWrite(ctx); err != nil {
			errs = append(errs, err)
		} else {
			w.cur, w.bytes, w.markedFilled = d.blocks[0], 0, false
		}
	}
	if d.state == StateWriting {
		for len(w.open) > 0 && len(errs) == 0 {
			if err := d.markFilled(ctx, d.bufsz); err != nil {
				errs = append(errs, err)
			}
			w.open = w.open[:copy(w.open, w.open[1:])]
		}
		if len(errs) == 0 {
			if err := d.enableEOD(); err != nil {
				errs = append(errs, err)
			} else if err := d.markFilled(ctx, w.bytes); err != nil {
				errs = append(errs, err)
			}
		}
	}
	d.afterEOD()
	if err := d.unlockWrite(); err != nil {
		errs = append(errs, err)
	}
	if err := w.hdu.Header.unlockWrite(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
