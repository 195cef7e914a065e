package dada

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// Sizes of the psrdada 1.1 ABI (src/ipcbuf.h).
const (
	// MaxReaders is the number of reader slots in the sync segment
	// (IPCBUF_READERS).
	MaxReaders = 8
	// Xfers is the number of transfer slots (IPCBUF_XFERS).
	Xfers = 8
	// SyncSize is sizeof(ipcsync_t) on 64-bit Linux.
	SyncSize = 528
	// DefaultHeaderSize is the default header buffer size
	// (DADA_DEFAULT_HEADER_SIZE, the page size).
	DefaultHeaderSize = 4096
	// DefaultBufSize is dada_db's default data buffer size (page size × 128).
	DefaultBufSize = 524288
	// DefaultNBufs is dada_db's default number of data buffers.
	DefaultNBufs = 4
)

// Byte offsets of the ipcsync_t fields.
const (
	offSemkeyConnect = 0
	offSemkeyData    = 4 // [8]int32
	offNbufs         = 40
	offBufsz         = 48
	offWBufNext      = 56
	offWBufCurr      = 64
	offWState        = 72
	offWXfer         = 80
	offRBufs         = 88  // [8]uint64
	offRStates       = 152 // [8]int32
	offRXfers        = 184 // [8]uint64
	offNReaders      = 248
	offSBuf          = 256 // [8]uint64
	offSByte         = 320 // [8]uint64
	offEOD           = 384 // [8]byte
	offEBuf          = 392 // [8]uint64
	offEByte         = 456 // [8]uint64
	offOnDevice      = 520
)

// Semaphore indices (src/ipcbuf.h).
const (
	semWrite = 0 // IPCBUF_WRITE, connect set
	semRead  = 1 // IPCBUF_READ, connect set

	semSODAck     = 0 // IPCBUF_SODACK, reader set
	semEODAck     = 1 // IPCBUF_EODACK
	semFull       = 2 // IPCBUF_FULL
	semClear      = 3 // IPCBUF_CLEAR
	semReaderConn = 4 // IPCBUF_READER_CONN

	connNSems = 2
	dataNSems = 5
)

// State is a process state of the ipcbuf protocol, as stored in w_state and
// r_states of the sync segment.
type State int32

// The states of src/ipcbuf.c.
const (
	StateDiscon  State = 0 // not connected / not locked
	StateViewer  State = 1 // connected, not locked
	StateWriter  State = 2 // writer lock held, outside a transfer
	StateWriting State = 3 // writer inside a transfer
	StateWChange State = 4 // the next write operation starts or ends a transfer
	StateReader  State = 5 // reader lock held, waiting for start of data
	StateReading State = 6 // reader inside a transfer
	StateRStop   State = 7 // reader reached end of data
	StateViewing State = 8 // viewer following the ring
	StateVStop   State = 9 // viewer reached end of data
)

var stateNames = [...]string{"DISCON", "VIEWER", "WRITER", "WRITING", "WCHANGE", "READER", "READING", "RSTOP", "VIEWING", "VSTOP"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "STATE(" + itoa(int(s)) + ")"
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// syncSegSize is the size the C creator gives the sync segment.
func syncSegSize(nbufs uint64) uint64 { return SyncSize + 5*nbufs }

// syncView gives typed, atomic access to a sync segment. Fields shared with
// other processes are read and written with atomic operations, which on the
// supported architectures are plain aligned loads and stores, as in C.
type syncView struct{ b []byte }

func (s syncView) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.b[off])) }
func (s syncView) i32(off int) *int32  { return (*int32)(unsafe.Pointer(&s.b[off])) }

func (s syncView) get(off int) uint64         { return atomic.LoadUint64(s.u64(off)) }
func (s syncView) set(off int, v uint64)      { atomic.StoreUint64(s.u64(off), v) }
func (s syncView) geti(off int) int32         { return atomic.LoadInt32(s.i32(off)) }
func (s syncView) seti(off int, v int32)      { atomic.StoreInt32(s.i32(off), v) }
func (s syncView) getAt(off, i int) uint64    { return s.get(off + 8*i) }
func (s syncView) setAt(off, i int, v uint64) { s.set(off+8*i, v) }

func (s syncView) nbufs() uint64    { return s.get(offNbufs) }
func (s syncView) bufsz() uint64    { return s.get(offBufsz) }
func (s syncView) nreaders() uint32 { return uint32(s.geti(offNReaders)) }

func (s syncView) wState() State     { return State(s.geti(offWState)) }
func (s syncView) setWState(v State) { s.seti(offWState, int32(v)) }
func (s syncView) rState(i int) State {
	return State(s.geti(offRStates + 4*i))
}
func (s syncView) setRState(i int, v State) { s.seti(offRStates+4*i, int32(v)) }

// The eod flags are single bytes; they are written before, and read after, a
// semaphore operation (a system call, hence a full barrier), as in C.
func (s syncView) eod(x uint64) bool { return s.b[offEOD+int(x)] != 0 }
func (s syncView) setEOD(x uint64, v bool) {
	var c byte
	if v {
		c = 1
	}
	s.b[offEOD+int(x)] = c
}

func (s syncView) semkeyConnect() Key { return Key(s.geti(offSemkeyConnect)) }
func (s syncView) semkeyData(r int) Key {
	return Key(s.geti(offSemkeyData + 4*r))
}

// count is the per-slot pending-read counter after the struct (writer only).
func (s syncView) count(slot uint64) *byte { return &s.b[SyncSize+int(slot)] }

// shmkey reads the (possibly unaligned) key of data segment i.
func (s syncView) shmkey(nbufs uint64, i int) Key {
	off := SyncSize + int(nbufs) + 4*i
	return Key(int32(binary.NativeEndian.Uint32(s.b[off : off+4])))
}

func (s syncView) setShmkey(nbufs uint64, i int, k Key) {
	off := SyncSize + int(nbufs) + 4*i
	binary.NativeEndian.PutUint32(s.b[off:off+4], uint32(k))
}
