package dada

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"syscall"

	"github.com/softroce/softroce/internal/sysv"
)

// This file is the ipcbuf protocol of src/ipcbuf.c, step for step, so that
// the shared state (sync segment fields, count[] and semaphores) evolves
// exactly as it does under the C library.

func (r *Ring) isWriter() bool {
	return r.state == StateWriter || r.state == StateWChange || r.state == StateWriting
}

func (r *Ring) isReader() bool {
	return r.state == StateReader || r.state == StateReading || r.state == StateRStop
}

func (r *Ring) stateErr(op string) error {
	return fmt.Errorf("%w: %s on ring %s in state %s", ErrState, op, r.key.Short(), r.state)
}

// semopAll applies op to semaphore num of every reader's set. If ctx ends
// part way, the operations already applied are undone so that the sets stay
// consistent with each other.
func (r *Ring) semopAll(ctx context.Context, num uint16, op int16) error {
	for i, id := range r.semData {
		if err := r.semop(ctx, id, num, op, 0); err != nil {
			for j := 0; j < i; j++ {
				r.semop(context.Background(), r.semData[j], num, -op, sysv.IPCNoWait)
			}
			return err
		}
	}
	return nil
}

// lockWrite takes the writer lock (ipcbuf_lock_write). It returns the writer
// state the sync segment held before, which is not StateDiscon when the
// previous writer exited without unlocking.
func (r *Ring) lockWrite(ctx context.Context) (prev State, pid int, err error) {
	if r.state != StateViewer {
		return 0, 0, fmt.Errorf("%w: this attachment of ring %s is already locked (state %s); one attachment holds one writer or reader, attach again with Connect for another", ErrState, r.key.Short(), r.state)
	}
	pid, _ = sysv.SemGetPid(r.semConn, semWrite)
	if err := r.semop(ctx, r.semConn, semWrite, -1, sysv.SemUndo); err != nil {
		return 0, 0, err
	}
	prev = r.sync.wState()
	if prev == StateDiscon {
		r.state = StateWChange
	} else {
		r.state = StateWriting
	}
	r.sync.setWState(r.state)
	r.xfer = r.sync.get(offWXfer) % Xfers
	return prev, pid, nil
}

// unlockWrite releases the writer lock (ipcbuf_unlock_write).
func (r *Ring) unlockWrite() error {
	if !r.isWriter() {
		return r.stateErr("unlock writer")
	}
	if err := r.semop(context.Background(), r.semConn, semWrite, 1, sysv.SemUndo); err != nil {
		return err
	}
	r.state = StateViewer
	r.sync.setWState(StateDiscon)
	return nil
}

// releaseWriteLock gives the lock back without touching the shared state
// (used when refusing to take over from a dead writer).
func (r *Ring) releaseWriteLock(prev State) {
	r.sync.setWState(prev)
	r.semop(context.Background(), r.semConn, semWrite, 1, sysv.SemUndo)
	r.state = StateViewer
}

func (r *Ring) enableEOD() error {
	if r.state != StateWriting {
		return r.stateErr("end of data")
	}
	r.state = StateWChange
	r.sync.setWState(StateWChange)
	return nil
}

func (r *Ring) sodMinBuf() uint64 {
	next := r.sync.get(offWBufNext)
	if next-r.soclock < r.nbufs {
		return r.soclock
	}
	return next - r.nbufs + 1
}

// enableSOD raises start of data at startBuf/startByte (ipcbuf_enable_sod).
func (r *Ring) enableSOD(ctx context.Context, startBuf, startByte uint64) error {
	if r.state != StateWriter && r.state != StateWChange {
		return r.stateErr("start of data")
	}
	s := r.sync
	if startBuf > s.get(offWBufNext) || startBuf < r.sodMinBuf() || startByte > r.bufsz {
		return fmt.Errorf("%w: start of data at buffer %d byte %d is outside the ring's window", ErrState, startBuf, startByte)
	}
	if err := r.semopAll(ctx, semSODAck, -1); err != nil {
		return err
	}
	r.xfer = s.get(offWXfer) % Xfers
	s.setAt(offSBuf, int(r.xfer), startBuf)
	s.setAt(offSByte, int(r.xfer), startByte)
	curr := s.get(offWBufCurr)
	if curr == 0 {
		s.setEOD(r.xfer, false)
	}
	for b := startBuf; b < curr; b++ {
		*s.count(b % r.nbufs)++
	}
	r.state = StateWriting
	s.setWState(StateWriting)
	if n := curr - startBuf; n > 0 {
		return r.semopAll(context.Background(), semFull, int16(n))
	}
	return nil
}

// nextWrite opens the next buffer for writing (ipcbuf_get_next_write) and
// returns its slot and its buffer count. It waits until every reader has
// released the slot.
func (r *Ring) nextWrite(ctx context.Context) (slot int, count uint64, err error) {
	if !r.isWriter() {
		return 0, 0, r.stateErr("open a buffer for writing")
	}
	if r.state == StateWChange {
		if err := r.enableSOD(ctx, r.sync.get(offWBufCurr), 0); err != nil {
			return 0, 0, err
		}
	}
	s := r.sync
	next := s.get(offWBufNext)
	b := next % r.nbufs
	for *s.count(b) > 0 {
		if err := r.semopAll(ctx, semClear, -1); err != nil {
			return 0, 0, err
		}
		*s.count(b)--
	}
	s.set(offWBufNext, next+1)
	return int(b), next, nil
}

// markFilled marks the oldest open buffer filled with nbytes
// (ipcbuf_mark_filled); fewer than bufsz bytes, or the WCHANGE state, ends
// the transfer.
func (r *Ring) markFilled(ctx context.Context, nbytes uint64) error {
	if !r.isWriter() {
		return r.stateErr("mark a buffer filled")
	}
	s := r.sync
	if r.state == StateWriter {
		s.set(offWBufCurr, s.get(offWBufCurr)+1)
		return nil
	}
	if r.state == StateWChange || nbytes < r.bufsz {
		if err := r.semopAll(ctx, semEODAck, -1); err != nil {
			return err
		}
		s.setAt(offEBuf, int(r.xfer), s.get(offWBufCurr))
		s.setAt(offEByte, int(r.xfer), nbytes)
		s.setEOD(r.xfer, true)
		wx := s.get(offWXfer) + 1
		s.set(offWXfer, wx)
		r.xfer = wx % Xfers
		r.state = StateWriter
		s.setWState(StateWriter)
		if nbytes == 0 {
			if _, _, err := r.nextWrite(ctx); err != nil {
				return err
			}
		}
	}
	curr := s.get(offWBufCurr)
	*s.count(curr % r.nbufs)++
	s.set(offWBufCurr, curr+1)
	return r.semopAll(context.Background(), semFull, 1)
}

// afterEOD points the writer after the last ended transfer, as ipcio_close
// does before unlocking.
func (r *Ring) afterEOD() {
	s := r.sync
	if wx := s.get(offWXfer); wx > 0 {
		c := s.getAt(offEBuf, int((wx-1)%Xfers)) + 1
		s.set(offWBufCurr, c)
		s.set(offWBufNext, c)
	}
}

// recoverWriter ends the transfer a dead writer left open, so that readers
// see an end of data after the last buffer it marked filled, and leaves the
// ring ready for a new transfer (state WCHANGE).
func (r *Ring) recoverWriter(ctx context.Context, prev State) error {
	s := r.sync
	curr, next := s.get(offWBufCurr), s.get(offWBufNext)
	inXfer := prev == StateWriting || (prev == StateWChange && next > curr)
	if inXfer {
		// abandon buffers it opened but never marked filled
		s.set(offWBufNext, curr)
		r.state = StateWChange
		s.setWState(StateWChange)
		r.xfer = s.get(offWXfer) % Xfers
		if err := r.markFilled(ctx, 0); err != nil {
			return err
		}
	}
	r.afterEOD()
	r.state = StateWChange
	s.setWState(StateWChange)
	r.xfer = s.get(offWXfer) % Xfers
	r.logger().Warn("dada: recovered from a writer that died", "key", r.key.Short(), "state", prev,
		"ended_transfer", inXfer, "w_buf_curr", s.get(offWBufCurr), "w_xfer", s.get(offWXfer))
	return nil
}

// lockRead takes a reader lock and a reader slot (ipcbuf_lock_read).
func (r *Ring) lockRead(ctx context.Context) error {
	if r.state != StateViewer || r.iread != -1 {
		return fmt.Errorf("%w: this attachment of ring %s is already locked (state %s); one attachment holds one writer or reader, attach again with Connect for another", ErrState, r.key.Short(), r.state)
	}
	if err := r.semop(ctx, r.semConn, semRead, -1, sysv.SemUndo); err != nil {
		return err
	}
	s := r.sync
	order := make([]int, r.nreaders)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return s.getAt(offRBufs, order[a]) < s.getAt(offRBufs, order[b]) })
	for _, i := range order {
		err := r.semop(ctx, r.semData[i], semReaderConn, -1, sysv.IPCNoWait|sysv.SemUndo)
		if err == nil {
			r.iread = i
			break
		}
		if !errors.Is(err, syscall.EAGAIN) {
			r.semop(context.Background(), r.semConn, semRead, 1, sysv.SemUndo)
			return err
		}
	}
	if r.iread < 0 {
		r.semop(context.Background(), r.semConn, semRead, 1, sysv.SemUndo)
		return fmt.Errorf("%w: all %d reader slots of ring %s are taken", ErrNoReaderSlot, r.nreaders, r.key.Short())
	}
	if s.rState(r.iread) == StateDiscon {
		r.state = StateReader
	} else {
		r.state = StateReading
	}
	s.setRState(r.iread, r.state)
	r.xfer = s.getAt(offRXfers, r.iread) % Xfers
	return nil
}

// rejoinPoint looks at a reader slot that lockRead found left locked-in by
// an earlier reader (state READING: that reader exited without unlocking).
// psrdada's reader simply continues at r_bufs, which with 1.1.0 counters is
// the first buffer of the next transfer when the earlier reader stopped
// between transfers. There this reader starts as a fresh one (READER, so
// the next buffer is taken from the transfer's start and its SOD is
// acknowledged, which the C re-join leaves out). It reports whether the
// slot is at such a boundary and whether the earlier reader died holding
// the buffer at r_bufs (its FULL already taken), which nextRead then reads
// without taking FULL again.
func (r *Ring) rejoinPoint() (atBoundary, held bool) {
	s := r.sync
	i := r.iread
	x := s.getAt(offRXfers, i)
	var b uint64
	if x > 0 {
		px := (x - 1) % Xfers
		if s.eod(px) {
			b = s.getAt(offEBuf, int(px)) + 1
		} else {
			b = ^uint64(0)
		}
	}
	rb := s.getAt(offRBufs, i)
	// FULL counts the buffers filled and not yet taken by this slot; one
	// fewer than w_buf_curr - r_bufs means the buffer at r_bufs was taken
	// and never cleared. The writer raises w_buf_curr before FULL, so read
	// until the pair is stable.
	for range 100 {
		c1 := s.get(offWBufCurr)
		full := r.semval(r.semData[i], semFull)
		c2 := s.get(offWBufCurr)
		if c1 == c2 && full >= 0 && c1 >= rb {
			held = int64(c1-rb)-int64(full) == 1
			break
		}
	}
	if !held && rb == b {
		r.state = StateReader
		s.setRState(i, StateReader)
		return true, false
	}
	return false, held
}

// unlockRead releases the reader slot and lock (ipcbuf_unlock_read).
func (r *Ring) unlockRead() error {
	if !r.isReader() || r.iread < 0 {
		return r.stateErr("unlock reader")
	}
	bg := context.Background()
	if err := r.semop(bg, r.semData[r.iread], semReaderConn, 1, sysv.SemUndo); err != nil {
		return err
	}
	if err := r.semop(bg, r.semConn, semRead, 1, sysv.SemUndo); err != nil {
		return err
	}
	r.state = StateViewer
	r.sync.setRState(r.iread, StateDiscon)
	r.iread = -1
	r.held = false
	return nil
}

// nextRead waits for the next full buffer (ipcbuf_get_next_read) and returns
// its slot, buffer count and the valid bytes. At end of data it returns
// io.EOF.
func (r *Ring) nextRead(ctx context.Context) (slot int, count uint64, data []byte, err error) {
	if r.state == StateRStop {
		return 0, 0, nil, io.EOF
	}
	if !r.isReader() {
		return 0, 0, nil, r.stateErr("read a buffer")
	}
	s := r.sync
	if r.held {
		// a dead predecessor took this buffer's FULL (see rejoinPoint)
		r.held = false
	} else if err := r.semop(ctx, r.semData[r.iread], semFull, -1, 0); err != nil {
		return 0, 0, nil, err
	}
	var start uint64
	if r.state == StateReader {
		r.xfer = s.getAt(offRXfers, r.iread) % Xfers
		r.state = StateReading
		s.setRState(r.iread, StateReading)
		s.setAt(offRBufs, r.iread, s.getAt(offSBuf, int(r.xfer)))
		start = s.getAt(offSByte, int(r.xfer))
		if err := r.semop(context.Background(), r.semData[r.iread], semSODAck, 1, 0); err != nil {
			return 0, 0, nil, err
		}
	}
	count = s.getAt(offRBufs, r.iread)
	b := count % r.nbufs
	n := r.bufsz
	if s.eod(r.xfer) && count == s.getAt(offEBuf, int(r.xfer)) {
		n = s.getAt(offEByte, int(r.xfer))
	}
	if start > r.bufsz {
		start = r.bufsz
	}
	if n > r.bufsz {
		n = r.bufsz
	}
	if n < start {
		n = start
	}
	return int(b), count, r.blocks[b][start:n], nil
}

// markCleared releases the buffer returned by nextRead
// (ipcbuf_mark_cleared). It reports whether that buffer ended the transfer.
func (r *Ring) markCleared() (eod bool, err error) {
	if r.state != StateReading {
		return false, r.stateErr("mark a buffer cleared")
	}
	s := r.sync
	i := r.iread
	if err := r.semop(context.Background(), r.semData[i], semClear, 1, 0); err != nil {
		return false, err
	}
	if s.eod(r.xfer) && s.getAt(offRBufs, i) == s.getAt(offEBuf, int(r.xfer)) {
		r.state = StateRStop
		s.setRState(i, StateRStop)
		// psrdada 1.1.0 steps r_bufs past the end-of-data buffer too, so
		// that a reader re-joining in READING starts at the next transfer
		s.setAt(offRBufs, i, s.getAt(offRBufs, i)+1)
		x := s.getAt(offRXfers, i) + 1
		s.setAt(offRXfers, i, x)
		r.xfer = x % Xfers
		return true, r.semop(context.Background(), r.semData[i], semEODAck, 1, 0)
	}
	s.setAt(offRBufs, i, s.getAt(offRBufs, i)+1)
	return false, nil
}

// resetReader returns a reader at end of data to waiting for the next
// transfer (ipcbuf_reset for a reader).
func (r *Ring) resetReader() {
	if r.state == StateRStop {
		r.state = StateReader
		r.sync.setRState(r.iread, StateReader)
	}
}
