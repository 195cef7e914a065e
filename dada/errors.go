package dada

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors; the typed errors below match them with errors.Is.
var (
	// ErrExists: a ring (or its header block) already exists at the key.
	ErrExists = errors.New("dada: ring already exists")
	// ErrNotFound: no ring at the key.
	ErrNotFound = errors.New("dada: no ring at this key")
	// ErrKeyCollision: a key the ring needs is used by another IPC object.
	ErrKeyCollision = errors.New("dada: key collision")
	// ErrNoMemory: the kernel refused the shared memory.
	ErrNoMemory = errors.New("dada: not enough shared memory")
	// ErrWriterDied: the previous writer exited while holding the ring.
	ErrWriterDied = errors.New("dada: previous writer died mid-transfer")
	// ErrBadLayout: the segment is not a psrdada 1.1 ring.
	ErrBadLayout = errors.New("dada: not a psrdada 1.1 ring")
	// ErrInvalidConfig: a parameter is out of range.
	ErrInvalidConfig = errors.New("dada: invalid configuration")
	// ErrState: the operation is not allowed in the current state.
	ErrState = errors.New("dada: operation not allowed in this state")
	// ErrNoReaderSlot: every reader slot of the ring is taken.
	ErrNoReaderSlot = errors.New("dada: no free reader slot")
	// ErrDestroyed: the ring was removed while this process used it.
	ErrDestroyed = errors.New("dada: ring was destroyed")
	// ErrHeader: the ASCII header is missing a required key or too large.
	ErrHeader = errors.New("dada: bad header")
	// ErrTransferEnded: data was written after the end of the transfer.
	ErrTransferEnded = errors.New("dada: transfer already ended")
	// ErrNotContiguous: the blocks could not be attached contiguously.
	ErrNotContiguous = errors.New("dada: blocks are not contiguous")
	// ErrPermission: the kernel refused an operation for lack of privilege.
	ErrPermission = errors.New("dada: permission denied")
)

// KeyCollisionError reports a key of the new ring that is already used by
// an object that does not belong to a ring at the requested key.
type KeyCollisionError struct {
	Key    Key    // the ring's data block key
	Used   Key    // the key in use
	Role   string // what the ring needed the key for
	Kind   string // "shared memory segment" or "semaphore set"
	Owners []Key  // existing rings whose derived keys include Used
}

func (e *KeyCollisionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dada: cannot create ring %s: key %s (%s) is already used by a %s", e.Key.Short(), e.Used, e.Role, e.Kind)
	if len(e.Owners) > 0 {
		var o []string
		for _, k := range e.Owners {
			o = append(o, k.Short())
		}
		fmt.Fprintf(&b, " of the ring at key %s", strings.Join(o, ", "))
	}
	b.WriteString("; each ring uses keys K+n*0x10000 and K+1+n*0x10000, so pick a key that differs from other rings in its low 16 bits and is not adjacent to them (for example dada, eada, fada)")
	return b.String()
}

// Is matches ErrKeyCollision.
func (e *KeyCollisionError) Is(t error) bool { return t == ErrKeyCollision }

// NoMemoryError reports shared memory the kernel refused, with its limits.
type NoMemoryError struct {
	Key      Key
	Bytes    uint64 // the segment size that was refused
	Total    uint64 // bytes the whole ring needs
	ShmMax   uint64 // kernel.shmmax (bytes)
	ShmAll   uint64 // kernel.shmall (pages)
	MemAvail uint64 // MemAvailable (bytes)
	Err      error  // the kernel's error
}

func (e *NoMemoryError) Error() string {
	page := uint64(pageSize())
	var b strings.Builder
	fmt.Fprintf(&b, "dada: not enough shared memory for ring %s: the kernel refused a %s segment (%v); the ring needs %s in all. ",
		e.Key.Short(), FormatBytes(e.Bytes), e.Err, FormatBytes(e.Total))
	fmt.Fprintf(&b, "Limits: kernel.shmmax=%d bytes, kernel.shmall=%d pages, MemAvailable=%s. ", e.ShmMax, e.ShmAll, FormatBytes(e.MemAvail))
	switch {
	case e.ShmMax > 0 && e.Bytes > e.ShmMax:
		fmt.Fprintf(&b, "A block is larger than kernel.shmmax: use smaller blocks or raise it with 'sysctl -w kernel.shmmax=%d'", e.Bytes)
	case e.ShmAll > 0 && e.Total/page+1 > e.ShmAll:
		fmt.Fprintf(&b, "The ring exceeds kernel.shmall: use fewer or smaller blocks or raise it with 'sysctl -w kernel.shmall=%d'", 2*(e.Total/page+1))
	case e.MemAvail > 0 && e.Total > e.MemAvail:
		b.WriteString("The machine does not have that much free memory: use fewer or smaller blocks or free memory")
	default:
		b.WriteString("Use fewer or smaller blocks, free memory, or check the limits above and kernel.shmmni")
	}
	return b.String()
}

// Is matches ErrNoMemory.
func (e *NoMemoryError) Is(t error) bool { return t == ErrNoMemory }

// Unwrap returns the kernel's error.
func (e *NoMemoryError) Unwrap() error { return e.Err }

// WriterDiedError reports that the previous writer exited while it held the
// writer lock: its SEM_UNDO gave the lock back but the ring's shared state
// still says a transfer is in progress.
type WriterDiedError struct {
	Key      Key    // the key of the ipcbuf (data block or header block)
	Block    string // "data block" or "header block"
	State    State  // writer state left in the sync segment
	PID      int    // last process that operated on the writer lock (0 if unknown)
	Alive    bool   // whether PID is still running
	WXfer    uint64 // transfer number
	WBufCurr uint64 // buffers filled since creation
	WBufNext uint64 // buffers opened since creation
}

func (e *WriterDiedError) Error() string {
	who := "the previous writer"
	if e.PID > 0 {
		if e.Alive {
			who = fmt.Sprintf("the previous writer (last lock holder pid %d)", e.PID)
		} else {
			who = fmt.Sprintf("the previous writer (pid %d, no longer running)", e.PID)
		}
	}
	return fmt.Sprintf("dada: %s of the %s %s exited in the middle of transfer %d (state %s, %d buffers filled, %d opened): "+
		"readers may be waiting for data that will never come; end that transfer cleanly by taking over as writer with recovery "+
		"(WriterOptions.Recover) or destroy and recreate the ring",
		who, e.Block, e.Key.Short(), e.WXfer, e.State, e.WBufCurr, e.WBufNext)
}

// Is matches ErrWriterDied.
func (e *WriterDiedError) Is(t error) bool { return t == ErrWriterDied }

// FormatBytes formats a byte count in binary units with one decimal ("1.5 GiB",
// "512 B"), as this package's error messages and the dada tools print sizes.
func FormatBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
