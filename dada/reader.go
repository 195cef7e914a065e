package dada

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Reader reads transfers from an HDU as dada_dbnull and dada_dbdisk do: for
// each transfer one header, then data until end of data (io.EOF). It holds
// one reader slot of both rings. A Reader is not safe for concurrent use.
type Reader struct {
	hdu    *HDU
	ctx    context.Context
	closed bool
	cur    []byte // valid bytes of the buffer being read by Read
	pos    int
	have   bool // a buffer from nextRead is held
	direct bool // the held buffer was handed out by NextBlock
	read   uint64
	rejoin Rejoin
	skip   bool // ReadHeader first skips the rest of a transfer (see Rejoin)
}

// Rejoin describes a reader slot that OpenReader took over from an earlier
// reader which exited without unlocking it (killed): psrdada leaves such a
// slot's state behind and the next reader continues from it.
type Rejoin struct {
	// Rejoined is true when the slot was left by an earlier reader.
	Rejoined bool
	// Skip is true when that reader had taken the header of transfer Xfer
	// but not read its data to the end. Its header is gone, so the first
	// ReadHeader skips the rest of that transfer's data (waiting for the
	// writer to end it) and returns the next transfer's header.
	Skip bool
	// Xfer is the data block's transfer number the slot is at.
	Xfer uint64
}

// OpenReader locks the HDU for reading (dada_hdu_lock_read): a reader slot
// of the header block, then of the data block. ctx bounds the wait for the
// locks and every later blocking operation.
func (h *HDU) OpenReader(ctx context.Context) (*Reader, error) {
	if err := h.Header.lockRead(ctx); err != nil {
		return nil, err
	}
	if err := h.Data.lockRead(ctx); err != nil {
		h.Header.unlockRead()
		return nil, err
	}
	r := &Reader{hdu: h, ctx: ctx}
	hr, d := h.Header, h.Data
	var rj Rejoin
	if hr.state == StateReading {
		rj.Rejoined = true
		_, hr.held = hr.rejoinPoint()
	}
	dataMid := false
	if d.state == StateReading {
		rj.Rejoined = true
		var at bool
		at, d.held = d.rejoinPoint()
		dataMid = !at
	}
	if rj.Rejoined {
		hx := hr.sync.getAt(offRXfers, hr.iread)
		rj.Xfer = d.sync.getAt(offRXfers, d.iread)
		// one header per transfer (psrdada 1.1 writers end each header
		// with an end of data): a header count one ahead of the data's
		// means that transfer's header was taken and its data not finished
		rj.Skip = dataMid || hx == rj.Xfer+1
		r.skip = rj.Skip
		d.logger().Info("dada: reader slot taken over from a reader that exited without unlocking",
			"key", d.key.Short(), "slot", d.iread, "xfer", rj.Xfer, "skip_rest_of_transfer", rj.Skip)
	}
	r.rejoin = rj
	return r, nil
}

// Rejoin tells whether OpenReader took over a slot left by a reader that
// died, and what the first ReadHeader does about it.
func (r *Reader) Rejoin() Rejoin { return r.rejoin }

// Slot returns the reader slot (0..NReaders-1) this reader holds in the data
// block.
func (r *Reader) Slot() int { return r.hdu.Data.iread }

// ReadHeader waits for the next transfer's header (as dada_client_read
// does), copies HDR_SIZE bytes of it and releases the header buffer. If the
// previous transfer's data was not read to its end (by this reader, or by a
// dead reader whose slot it took over, see Rejoin), the remaining buffers
// are skipped first.
func (r *Reader) ReadHeader() (*Header, error) { return r.ReadHeaderContext(r.ctx) }

// ReadHeaderContext is ReadHeader with its own context.
func (r *Reader) ReadHeaderContext(ctx context.Context) (*Header, error) {
	if r.closed {
		return nil, fmt.Errorf("%w: reader is closed", ErrState)
	}
	d, hr := r.hdu.Data, r.hdu.Header
	if r.have {
		if _, err := d.markCleared(); err != nil {
			return nil, err
		}
		r.cur, r.pos, r.have, r.direct = nil, 0, false, false
	}
	if d.state == StateReading || r.skip {
		// skip the rest of the previous transfer (not read to its end by
		// this reader, or by the dead one whose slot this reader took)
		r.skip = false
		for {
			if _, err := r.NextBlockContext(ctx); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, err
			}
			if err := r.MarkCleared(); err != nil {
				return nil, err
			}
		}
	}
	d.resetReader()
	r.cur, r.pos, r.have = nil, 0, false
	for {
		hr.resetReader()
		_, _, buf, err := hr.nextRead(ctx)
		if err != nil {
			return nil, err
		}
		if len(buf) == 0 {
			// an empty header ends a transfer that had no header data
			if _, err := hr.markCleared(); err != nil {
				return nil, err
			}
			continue
		}
		h := ParseHeader(buf)
		size, err := h.Size()
		if err != nil {
			// as dada_client_read: a header without HDR_SIZE is taken whole
			size = len(buf)
			h.SetInt("HDR_SIZE", int64(size))
		}
		if size > int(hr.bufsz) {
			hr.markCleared()
			return nil, fmt.Errorf("%w: HDR_SIZE %d is larger than the header buffers (%d bytes)", ErrHeader, size, hr.bufsz)
		}
		if size < len(buf) {
			h = ParseHeader(buf[:size])
		}
		if _, err := hr.markCleared(); err != nil {
			return nil, err
		}
		return h, nil
	}
}

// NextBlock waits for the next full data buffer and returns its valid bytes
// for direct access (ipcio_open_block_read); release it with MarkCleared.
// At the end of the transfer it returns io.EOF.
func (r *Reader) NextBlock() (Block, error) { return r.NextBlockContext(r.ctx) }

// NextBlockContext is NextBlock with its own context.
func (r *Reader) NextBlockContext(ctx context.Context) (Block, error) {
	if r.closed {
		return Block{}, fmt.Errorf("%w: reader is closed", ErrState)
	}
	if r.have {
		return Block{}, fmt.Errorf("%w: the previous block was not marked cleared", ErrState)
	}
	slot, count, data, err := r.hdu.Data.nextRead(ctx)
	if err != nil {
		return Block{}, err
	}
	r.have, r.direct = true, true
	return Block{Index: slot, Count: count, Data: data}, nil
}

// MarkCleared releases the block returned by NextBlock
// (ipcio_close_block_read), making its slot writable again once every reader
// has released it.
func (r *Reader) MarkCleared() error {
	if !r.have {
		return fmt.Errorf("%w: no block to mark cleared", ErrState)
	}
	d := r.hdu.Data
	if _, err := d.markCleared(); err != nil {
		return err
	}
	r.have, r.direct = false, false
	return nil
}

// Read copies data of the current transfer into p (ipcio_read). It returns
// io.EOF once the transfer's data is exhausted; call ReadHeader for the next
// transfer.
func (r *Reader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, fmt.Errorf("%w: reader is closed", ErrState)
	}
	if r.have && r.direct {
		return 0, fmt.Errorf("%w: Read cannot be mixed with an open direct block", ErrState)
	}
	d := r.hdu.Data
	n := 0
	for n < len(p) {
		if !r.have {
			if d.state == StateRStop {
				break
			}
			_, _, data, err := d.nextRead(r.ctx)
			if err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				r.read += uint64(n)
				return n, err
			}
			r.cur, r.pos, r.have = data, 0, true
		}
		c := copy(p[n:], r.cur[r.pos:])
		n += c
		r.pos += c
		if r.pos == len(r.cur) {
			if _, err := d.markCleared(); err != nil {
				r.read += uint64(n)
				return n, err
			}
			r.cur, r.pos, r.have = nil, 0, false
		}
	}
	r.read += uint64(n)
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo copies the rest of the transfer's data to w, one buffer at a time,
// without an intermediate copy.
func (r *Reader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	if r.have && !r.direct {
		// finish a buffer partly consumed by Read
		n, err := w.Write(r.cur[r.pos:])
		total += int64(n)
		r.read += uint64(n)
		if err != nil {
			return total, err
		}
		if _, err := r.hdu.Data.markCleared(); err != nil {
			return total, err
		}
		r.cur, r.pos, r.have = nil, 0, false
	}
	for {
		b, err := r.NextBlock()
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		n, err := w.Write(b.Data)
		total += int64(n)
		r.read += uint64(n)
		if err != nil {
			return total, err
		}
		if err := r.MarkCleared(); err != nil {
			return total, err
		}
	}
}

// BytesRead returns the data bytes read so far.
func (r *Reader) BytesRead() uint64 { return r.read }

// Close releases the reader slots (dada_hdu_unlock_read).
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return errors.Join(r.hdu.Data.unlockRead(), r.hdu.Header.unlockRead())
}
