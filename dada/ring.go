package dada

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sort"
	"syscall"
	"time"
	"unsafe"

	"github.com/softroce/softroce/internal/sysv"
)

// Layout chooses how a process attaches the data segments of a ring.
type Layout int

const (
	// LayoutKernel lets the kernel choose each block's address, as the C
	// library does. Blocks are usually not contiguous in ascending order.
	LayoutKernel Layout = iota
	// LayoutContiguousTry attaches the blocks in ascending order into one
	// reserved range when the block size is a page multiple, and falls back
	// to LayoutKernel otherwise.
	LayoutContiguousTry
	// LayoutContiguous is LayoutContiguousTry that fails with
	// ErrNotContiguous instead of falling back.
	LayoutContiguous
)

func (l Layout) String() string {
	switch l {
	case LayoutKernel:
		return "kernel"
	case LayoutContiguousTry:
		return "contiguous-try"
	case LayoutContiguous:
		return "contiguous"
	}
	return "layout(" + itoa(int(l)) + ")"
}

// AttachOptions control how a process attaches a ring.
type AttachOptions struct {
	// Layout of the data segments in this process (default LayoutKernel).
	Layout Layout
	// Logger receives debug and warning messages; nil is silent.
	Logger *slog.Logger
	// WaitSlice bounds each semaphore wait before the context is checked
	// again (default 50 ms).
	WaitSlice time.Duration
}

// Ring is one psrdada ipcbuf: a sync segment, nbufs data segments and the
// semaphore sets. A Ring is used by one goroutine at a time; separate Rings
// (for example a writer and a reader attached in the same process) may be
// used concurrently.
type Ring struct {
	key      Key
	syncID   int
	syncMem  []byte
	sync     syncView
	nbufs    uint64
	bufsz    uint64
	nreaders int
	semConn  int
	semData  []int
	shmIDs   []int
	shmKeys  []Key
	blocks   [][]byte
	resv     unsafe.Pointer // reservation for the contiguous layout
	resvLen  uintptr
	layout   Layout
	log      *slog.Logger
	slice    time.Duration

	// process-local protocol state (the ipcbuf_t fields)
	state   State
	xfer    uint64 // current transfer slot
	iread   int    // reader slot, -1 if none
	soclock uint64
	held    bool // the buffer at r_bufs was taken by a reader that died (rejoinPoint)
	sb      [1]sysv.Sembuf
}

// Key returns the ring's base key.
func (r *Ring) Key() Key { return r.key }

// NBufs returns the number of buffers (blocks) in the ring.
func (r *Ring) NBufs() int { return int(r.nbufs) }

// BufSize returns the size of each buffer in bytes.
func (r *Ring) BufSize() int { return int(r.bufsz) }

// NReaders returns the number of readers the ring was created for.
func (r *Ring) NReaders() int { return r.nreaders }

// Layout returns how the blocks are attached in this process.
func (r *Ring) Layout() Layout { return r.layout }

// State returns this process's protocol state for the ring.
func (r *Ring) State() State { return r.state }

// BlockInfo describes one data block as attached in this process: what an
// RDMA memory registration needs.
type BlockInfo struct {
	Index int     // slot in the ring, 0..nbufs-1
	Key   Key     // shared memory key of the segment
	ShmID int     // shared memory id
	Addr  uintptr // address of byte 0 in this process
	Data  []byte  // the whole block
}

// Blocks describes every data block in ring order.
func (r *Ring) Blocks() []BlockInfo {
	out := make([]BlockInfo, r.nbufs)
	for i := range out {
		out[i] = BlockInfo{Index: i, Key: r.shmKeys[i], ShmID: r.shmIDs[i],
			Addr: uintptr(unsafe.Pointer(&r.blocks[i][0])), Data: r.blocks[i]}
	}
	return out
}

// Block returns data block i (0 <= i < NBufs).
func (r *Ring) Block(i int) []byte { return r.blocks[i] }

// Contiguous reports whether the blocks lie back to back in ascending order in
// this process's address space, checking the actual addresses.
func (r *Ring) Contiguous() bool {
	for i := 1; i < len(r.blocks); i++ {
		if uintptr(unsafe.Pointer(&r.blocks[i][0])) != uintptr(unsafe.Pointer(&r.blocks[i-1][0]))+uintptr(r.bufsz) {
			return false
		}
	}
	return true
}

// BlockOf returns the block containing address addr in this process and the
// offset of addr in it, or ok false if addr is in no block.
func (r *Ring) BlockOf(addr uintptr) (index, offset int, ok bool) {
	for i, b := range r.blocks {
		base := uintptr(unsafe.Pointer(&b[0]))
		if addr >= base && addr < base+uintptr(len(b)) {
			return i, int(addr - base), true
		}
	}
	return 0, 0, false
}

// ContiguousView returns one slice over all blocks in ring order when they
// are contiguous (see Contiguous), so that one memory region can cover the
// ring; otherwise it returns nil, false.
func (r *Ring) ContiguousView() ([]byte, bool) {
	if !r.Contiguous() {
		return nil, false
	}
	return unsafe.Slice(&r.blocks[0][0], r.nbufs*r.bufsz), true
}

func pageSize() int { return sysv.PageSize() }

func (r *Ring) logger() *slog.Logger {
	if r.log == nil {
		return slog.New(discardHandler{})
	}
	return r.log
}

type discardHandler struct{ slog.Handler }

func (discardHandler) Enabled(context.Context, slog.Level) bool { return false }

// ringConfig are the creation parameters of one ipcbuf.
type ringConfig struct {
	nbufs, bufsz uint64
	nreaders     int
	header       bool // the header block of the ring at key-1
}

// cleanup is a stack of undo actions run on failure.
type cleanup []func()

func (c *cleanup) add(f func()) { *c = append(*c, f) }
func (c cleanup) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// createRing creates one ipcbuf at key, as ipcbuf_create does. On error
// nothing it created is left behind.
func createRing(key Key, cfg ringConfig, opt AttachOptions) (r *Ring, err error) {
	user, block := key, "data block"
	if cfg.header {
		user, block = key-1, "header block"
	}
	if cfg.nbufs == 0 || cfg.bufsz == 0 {
		return nil, fmt.Errorf("%w: need at least one buffer of at least one byte (nbufs=%d bufsz=%d)", ErrInvalidConfig, cfg.nbufs, cfg.bufsz)
	}
	if cfg.nreaders < 1 || cfg.nreaders > MaxReaders {
		return nil, fmt.Errorf("%w: %d readers: must be 1..%d", ErrInvalidConfig, cfg.nreaders, MaxReaders)
	}
	if cfg.bufsz > (math.MaxInt64-syncSegSize(min(cfg.nbufs, 65000)))/cfg.nbufs {
		return nil, fmt.Errorf("%w: %d buffers of %d bytes: the ring's size overflows 64 bits", ErrInvalidConfig, cfg.nbufs, cfg.bufsz)
	}
	if cfg.nbufs > 65000 {
		return nil, fmt.Errorf("%w: %d buffers: the derived keys would wrap into other rings' keys; use fewer, larger buffers", ErrInvalidConfig, cfg.nbufs)
	}
	if err := checkKeysFree(key, cfg); err != nil {
		return nil, err
	}
	rr := &Ring{key: key, nbufs: cfg.nbufs, bufsz: cfg.bufsz, nreaders: cfg.nreaders, log: opt.Logger, slice: opt.WaitSlice, iread: -1}
	r = rr
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run()
			r = nil
		}
	}()
	flag := sysv.Perm | sysv.IPCCreat | sysv.IPCExcl
	total := syncSegSize(cfg.nbufs) + cfg.nbufs*cfg.bufsz
	r.syncID, err = sysv.ShmGet(int32(key), syncSegSize(cfg.nbufs), flag)
	if err != nil {
		return nil, createErr(user, key, block+" sync segment", "shared memory segment", syncSegSize(cfg.nbufs), total, err)
	}
	id := r.syncID
	undo.add(func() { sysv.ShmRemove(id) })
	if r.syncMem, err = sysv.ShmAttach(id, 0, 0); err != nil {
		return nil, fmt.Errorf("dada: attach sync segment of %s: %w", key.Short(), err)
	}
	undo.add(func() { sysv.ShmDetach(rr.syncMem) })
	s := syncView{r.syncMem}
	r.sync = s
	s.set(offNbufs, cfg.nbufs)
	s.set(offBufsz, cfg.bufsz)
	s.seti(offNReaders, int32(cfg.nreaders))
	s.seti(offOnDevice, -1)
	for x := uint64(0); x < Xfers; x++ {
		s.setAt(offSBuf, int(x), 0)
		s.setAt(offSByte, int(x), 0)
		s.setAt(offEBuf, int(x), 0)
		s.setAt(offEByte, int(x), 0)
		s.setEOD(x, true)
	}
	s.seti(offSemkeyConnect, int32(key.ConnectSemKey()))
	for i := 0; i < MaxReaders; i++ {
		s.seti(offSemkeyData+4*i, int32(key.ReaderSemKey(i)))
	}
	for i := 0; i < int(cfg.nbufs); i++ {
		*s.count(uint64(i)) = 0
		s.setShmkey(cfg.nbufs, i, key.BlockKey(i))
	}
	s.set(offWBufCurr, 0)
	s.set(offWBufNext, 0)
	s.set(offWXfer, 0)
	s.setWState(StateDiscon)
	for i := 0; i < MaxReaders; i++ {
		s.setAt(offRBufs, i, 0)
		s.setAt(offRXfers, i, 0)
		s.setRState(i, StateDiscon)
	}

	// semaphores
	if r.semConn, err = sysv.SemGet(int32(key.ConnectSemKey()), connNSems, flag); err != nil {
		return nil, createErr(user, key.ConnectSemKey(), block+" connect semaphores", "semaphore set", 0, total, err)
	}
	sc := r.semConn
	undo.add(func() { sysv.SemRemove(sc) })
	r.semData = make([]int, cfg.nreaders)
	for i := range r.semData {
		if r.semData[i], err = sysv.SemGet(int32(key.ReaderSemKey(i)), dataNSems, flag); err != nil {
			return nil, createErr(user, key.ReaderSemKey(i), fmt.Sprintf("%s semaphores of reader %d", block, i), "semaphore set", 0, total, err)
		}
		sd := r.semData[i]
		undo.add(func() { sysv.SemRemove(sd) })
	}
	// data segments
	r.shmIDs = make([]int, cfg.nbufs)
	r.shmKeys = make([]Key, cfg.nbufs)
	for i := range r.shmIDs {
		r.shmKeys[i] = key.BlockKey(i)
		if r.shmIDs[i], err = sysv.ShmGet(int32(r.shmKeys[i]), cfg.bufsz, flag); err != nil {
			return nil, createErr(user, r.shmKeys[i], fmt.Sprintf("%s buffer %d", block, i), "shared memory segment", cfg.bufsz, total, err)
		}
		sid := r.shmIDs[i]
		undo.add(func() { sysv.ShmRemove(sid) })
	}
	if err = r.attachBlocks(opt.Layout); err != nil {
		return nil, err
	}
	undo.add(func() { rr.detachBlocks() })
	// initial values, by increments as the C code does
	bg := context.Background()
	if err = r.semop(bg, r.semConn, semWrite, 1, 0); err != nil {
		return nil, err
	}
	if err = r.semop(bg, r.semConn, semRead, int16(cfg.nreaders), 0); err != nil {
		return nil, err
	}
	for i := range r.semData {
		for _, op := range [...]struct {
			n uint16
			v int16
		}{{semSODAck, Xfers}, {semEODAck, Xfers}, {semReaderConn, 1}} {
			if err = r.semop(bg, r.semData[i], op.n, op.v, 0); err != nil {
				return nil, err
			}
		}
	}
	r.state = StateViewer
	r.logger().Debug("dada: created ring", "key", key.Short(), "nbufs", cfg.nbufs, "bufsz", cfg.bufsz, "readers", cfg.nreaders, "layout", r.layout)
	return r, nil
}

// createErr turns a shmget/semget failure at creation into an error that
// says what to do.
func createErr(ring, used Key, role, kind string, size, total uint64, err error) error {
	switch {
	case errors.Is(err, syscall.EEXIST):
		if used == ring {
			return fmt.Errorf("%w: ring %s exists (%s at key %s): destroy it first or choose another key", ErrExists, ring.Short(), kind, used)
		}
		owners := ownersOf(used)
		if used == ring+1 && kind == "shared memory segment" {
			owners = append([]Key{used}, owners...)
		}
		return &KeyCollisionError{Key: ring, Used: used, Role: role, Kind: kind, Owners: owners}
	case errors.Is(err, syscall.ENOMEM), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EINVAL) && size > 0, errors.Is(err, syscall.EFBIG):
		l, _ := sysv.ReadLimits()
		if errors.Is(err, syscall.ENOSPC) && kind == "semaphore set" {
			return fmt.Errorf("dada: cannot create %s for ring %s: the system has no semaphore sets left (kernel.sem SEMMNI=%d): destroy unused rings (ipcs -s) or raise kernel.sem", role, ring.Short(), l.SemMni)
		}
		return &NoMemoryError{Key: ring, Bytes: size, Total: total, ShmMax: l.ShmMax, ShmAll: l.ShmAll, MemAvail: l.MemAvail, Err: err}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("%w: creating %s %s of ring %s: %v", ErrPermission, kind, used, ring.Short(), err)
	}
	return fmt.Errorf("dada: creating %s (%s %s) of ring %s: %w", role, kind, used, ring.Short(), err)
}

// checkKeysFree looks up every key an ipcbuf at key needs before anything is
// created, so that a collision is reported without side effects.
func checkKeysFree(key Key, cfg ringConfig) error {
	user, block := key, "data block"
	if cfg.header {
		user, block = key-1, "header block"
	}
	total := syncSegSize(cfg.nbufs) + cfg.nbufs*cfg.bufsz
	if _, err := sysv.ShmGet(int32(key), 0, 0); err == nil {
		return createErr(user, key, block+" sync segment", "shared memory segment", 0, total, syscall.EEXIST)
	}
	if _, err := sysv.SemGet(int32(key.ConnectSemKey()), 0, 0); err == nil {
		return createErr(user, key.ConnectSemKey(), block+" connect semaphores", "semaphore set", 0, total, syscall.EEXIST)
	}
	for i := 0; i < cfg.nreaders; i++ {
		if _, err := sysv.SemGet(int32(key.ReaderSemKey(i)), 0, 0); err == nil {
			return createErr(user, key.ReaderSemKey(i), fmt.Sprintf("%s semaphores of reader %d", block, i), "semaphore set", 0, total, syscall.EEXIST)
		}
	}
	for i := 0; i < int(cfg.nbufs); i++ {
		if _, err := sysv.ShmGet(int32(key.BlockKey(i)), 0, 0); err == nil {
			return createErr(user, key.BlockKey(i), fmt.Sprintf("%s buffer %d", block, i), "shared memory segment", 0, total, syscall.EEXIST)
		}
	}
	return nil
}

// ownersOf guesses which existing rings use key k as a derived key: rings
// whose sync segment key has the same low 16 bits.
func ownersOf(k Key) []Key {
	objs, err := sysv.ListShm()
	if err != nil {
		return nil
	}
	syncLike := map[Key]bool{}
	for _, o := range objs {
		if o.Size >= SyncSize && o.Size <= SyncSize+5*65536 && (o.Size-SyncSize)%5 == 0 {
			syncLike[Key(o.Key)] = true
		}
	}
	var out []Key
	for c := range syncLike {
		if c == k || uint32(c)&0xffff != uint32(k)&0xffff {
			continue
		}
		if syncLike[c-1] {
			c-- // the header block of the ring at c-1
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// connectRing attaches the existing ipcbuf at key, as ipcbuf_connect does,
// reading every derived key from the sync segment.
func connectRing(key Key, opt AttachOptions) (r *Ring, err error) {
	id, err := sysv.ShmGet(int32(key), SyncSize, sysv.Perm)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("%w %s: create the ring first", ErrNotFound, key.Short())
		}
		if errors.Is(err, syscall.EINVAL) {
			return nil, fmt.Errorf("%w: the segment at key %s is smaller than a psrdada sync segment (%d bytes)", ErrBadLayout, key, SyncSize)
		}
		if errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("%w: ring %s: %v (it was created by another user without 0666 permissions)", ErrPermission, key.Short(), err)
		}
		return nil, fmt.Errorf("dada: connect to ring %s: %w", key.Short(), err)
	}
	rr := &Ring{key: key, syncID: id, log: opt.Logger, slice: opt.WaitSlice, iread: -1}
	r = rr
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run()
			r = nil
		}
	}()
	if r.syncMem, err = sysv.ShmAttach(id, 0, 0); err != nil {
		return nil, fmt.Errorf("dada: attach sync segment of %s: %w", key.Short(), err)
	}
	undo.add(func() { sysv.ShmDetach(rr.syncMem) })
	s := syncView{r.syncMem}
	r.sync = s
	r.nbufs, r.bufsz = s.nbufs(), s.bufsz()
	nr := s.nreaders()
	if r.nbufs == 0 || r.bufsz == 0 || nr == 0 || nr > MaxReaders || r.nbufs > 1<<20 || uint64(len(r.syncMem)) < syncSegSize(r.nbufs) {
		return nil, fmt.Errorf("%w: segment at key %s (%d bytes) has nbufs=%d bufsz=%d n_readers=%d; it was not made by psrdada >= 2018-11 or a compatible tool",
			ErrBadLayout, key, len(r.syncMem), r.nbufs, r.bufsz, nr)
	}
	r.nreaders = int(nr)
	if r.semConn, err = sysv.SemGet(int32(s.semkeyConnect()), connNSems, sysv.Perm); err != nil {
		return nil, attachErr(key, s.semkeyConnect(), "connect semaphores", err)
	}
	r.semData = make([]int, r.nreaders)
	for i := range r.semData {
		if r.semData[i], err = sysv.SemGet(int32(s.semkeyData(i)), dataNSems, sysv.Perm); err != nil {
			return nil, attachErr(key, s.semkeyData(i), fmt.Sprintf("semaphores of reader %d", i), err)
		}
	}
	r.shmIDs = make([]int, r.nbufs)
	r.shmKeys = make([]Key, r.nbufs)
	for i := range r.shmIDs {
		r.shmKeys[i] = s.shmkey(r.nbufs, i)
		if r.shmIDs[i], err = sysv.ShmGet(int32(r.shmKeys[i]), r.bufsz, sysv.Perm); err != nil {
			return nil, attachErr(key, r.shmKeys[i], fmt.Sprintf("data buffer %d", i), err)
		}
	}
	if err = r.attachBlocks(opt.Layout); err != nil {
		return nil, err
	}
	r.state = StateViewer
	return r, nil
}

func attachErr(ring, k Key, role string, err error) error {
	if errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("%w: ring %s is incomplete: its %s (key %s) is missing; destroy it and create it again",
			ErrBadLayout, ring.Short(), role, k)
	}
	return fmt.Errorf("dada: ring %s: %s (key %s): %w", ring.Short(), role, k, err)
}

// attachBlocks attaches every data segment with the requested layout.
func (r *Ring) attachBlocks(l Layout) error {
	r.blocks = make([][]byte, r.nbufs)
	if l != LayoutKernel {
		err := r.attachContiguous()
		if err == nil {
			r.layout = l
			return nil
		}
		if l == LayoutContiguous {
			return err
		}
		r.logger().Warn("dada: contiguous attach failed, using kernel placement", "key", r.key.Short(), "err", err)
	}
	r.layout = LayoutKernel
	for i, id := range r.shmIDs {
		b, err := sysv.ShmAttach(id, 0, 0)
		if err != nil {
			r.detachBlocks()
			return fmt.Errorf("dada: attach data buffer %d (key %s) of ring %s: %w", i, r.shmKeys[i], r.key.Short(), err)
		}
		r.blocks[i] = b
	}
	return nil
}

// attachContiguous reserves nbufs*bufsz bytes of address space and attaches
// block i at base+i*bufsz with SHM_REMAP.
func (r *Ring) attachContiguous() error {
	ps := uint64(pageSize())
	if r.bufsz%ps != 0 {
		return fmt.Errorf("%w: block size %d is not a multiple of the page size %d; use a page-multiple -b or register one region per block", ErrNotContiguous, r.bufsz, ps)
	}
	size := uintptr(r.nbufs * r.bufsz)
	base, err := sysv.Reserve(size)
	if err != nil {
		return fmt.Errorf("%w: reserving %d bytes of address space: %v", ErrNotContiguous, size, err)
	}
	for i, id := range r.shmIDs {
		addr := uintptr(base) + uintptr(i)*uintptr(r.bufsz)
		b, err := sysv.ShmAttach(id, addr, sysv.ShmRemap)
		if err == nil && uintptr(unsafe.Pointer(&b[0])) != addr {
			sysv.ShmDetach(b)
			err = fmt.Errorf("kernel placed it at %#x instead of %#x", uintptr(unsafe.Pointer(&b[0])), addr)
		}
		if err != nil {
			// keep the reservation until every block is out of it, so
			// that the final Release unmaps nothing but our own range
			for j := 0; j < i; j++ {
				if sysv.Unattach(r.blocks[j]) != nil {
					sysv.ShmDetach(r.blocks[j])
				}
				r.blocks[j] = nil
			}
			sysv.Release(base, size)
			return fmt.Errorf("%w: attaching block %d at %#x: %v", ErrNotContiguous, i, addr, err)
		}
		r.blocks[i] = b
	}
	r.resv, r.resvLen = base, size
	return nil
}

// detachBlocks detaches every data segment. Blocks inside the contiguous
// reservation are replaced by reserved (PROT_NONE) pages rather than shmdt'd,
// so the reserved range stays this process's own until Release unmaps it:
// an address freed early could be handed to another thread's mapping, which
// the Release would then destroy.
func (r *Ring) detachBlocks() {
	ok := true
	for i, b := range r.blocks {
		if b == nil {
			continue
		}
		if r.resv != nil {
			if err := sysv.Unattach(b); err != nil {
				// cannot keep the range: detach, and leak the rest of
				// the reservation rather than unmap what may be foreign
				r.logger().Warn("dada: keeping a detached block reserved failed", "key", r.key.Short(), "block", i, "err", err)
				sysv.ShmDetach(b)
				ok = false
			}
		} else {
			sysv.ShmDetach(b)
		}
		r.blocks[i] = nil
	}
	if r.resv != nil {
		if ok {
			sysv.Release(r.resv, r.resvLen)
		}
		r.resv, r.resvLen = nil, 0
	}
}

// Detach detaches this process from the ring without changing it. Locks
// still held are released by the kernel when the process exits (SEM_UNDO),
// but callers should close their Writer or Reader first.
func (r *Ring) Detach() error {
	if r.syncMem == nil {
		return nil
	}
	r.detachBlocks()
	err := sysv.ShmDetach(r.syncMem)
	r.syncMem = nil
	r.sync = syncView{}
	r.state = StateDiscon
	return err
}

// Destroy removes the ring's semaphore sets and segments and detaches it.
// Other processes attached to it keep their mappings until they detach, but
// their next semaphore operation fails with ErrDestroyed.
func (r *Ring) Destroy() error {
	if r.syncMem == nil {
		return fmt.Errorf("%w: ring %s is not attached", ErrState, r.key.Short())
	}
	var errs []error
	if err := sysv.SemRemove(r.semConn); err != nil {
		errs = append(errs, err)
	}
	for _, id := range r.semData {
		if err := sysv.SemRemove(id); err != nil {
			errs = append(errs, err)
		}
	}
	r.detachBlocks()
	for _, id := range r.shmIDs {
		if err := sysv.ShmRemove(id); err != nil {
			errs = append(errs, err)
		}
	}
	sysv.ShmDetach(r.syncMem)
	r.syncMem = nil
	if err := sysv.ShmRemove(r.syncID); err != nil {
		errs = append(errs, err)
	}
	r.state = StateDiscon
	return errors.Join(errs...)
}

// destroyKey removes whatever exists of the ipcbuf at key, reading the
// derived keys from its sync segment (or deriving them if it is unreadable).
func destroyKey(key Key) error {
	id, err := sysv.ShmGet(int32(key), 0, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("%w %s", ErrNotFound, key.Short())
		}
		return fmt.Errorf("dada: destroy %s: %w", key.Short(), err)
	}
	var keysSem []Key
	var keysShm []Key
	if mem, err := sysv.ShmAttach(id, 0, 0); err == nil {
		s := syncView{mem}
		if len(mem) >= SyncSize {
			nb := s.nbufs()
			if nb > 0 && uint64(len(mem)) >= syncSegSize(nb) {
				keysSem = append(keysSem, s.semkeyConnect())
				for i := 0; i < MaxReaders; i++ {
					keysSem = append(keysSem, s.semkeyData(i))
				}
				for i := 0; i < int(nb); i++ {
					keysShm = append(keysShm, s.shmkey(nb, i))
				}
			}
		}
		sysv.ShmDetach(mem)
	}
	if keysSem == nil {
		return fmt.Errorf("%w: segment at %s is not a readable ring; remove it by hand with 'ipcrm -M %s'", ErrBadLayout, key, key)
	}
	var errs []error
	for _, k := range keysSem {
		if sid, err := sysv.SemGet(int32(k), 0, 0); err == nil {
			if err := sysv.SemRemove(sid); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, k := range keysShm {
		if sid, err := sysv.ShmGet(int32(k), 0, 0); err == nil {
			if err := sysv.ShmRemove(sid); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := sysv.ShmRemove(id); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// lockMemory locks the sync and every data segment in memory (dada_db -l).
func (r *Ring) lockMemory() error {
	ids := append([]int{r.syncID}, r.shmIDs...)
	for _, id := range ids {
		if err := sysv.ShmLockMem(id); err != nil {
			if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOMEM) {
				return fmt.Errorf("%w: cannot lock ring %s in memory (%v): run as root, grant CAP_IPC_LOCK, or raise 'ulimit -l'", ErrPermission, r.key.Short(), err)
			}
			return fmt.Errorf("dada: lock ring %s in memory: %w", r.key.Short(), err)
		}
	}
	return nil
}

// page zeroes every block so that its pages are allocated (dada_db -p).
func (r *Ring) page() {
	for _, b := range r.blocks {
		clear(b)
	}
}

// semop applies one operation to semaphore num of set id, waiting with ctx.
func (r *Ring) semop(ctx context.Context, id int, num uint16, op int16, flg int16) error {
	r.sb[0] = sysv.Sembuf{Num: num, Op: op, Flg: flg}
	err := sysv.SemOp(ctx, id, r.sb[:], r.slice)
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.EIDRM) || errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%w: ring %s was removed (%v)", ErrDestroyed, r.key.Short(), err)
	}
	return err
}

func (r *Ring) semval(id int, num int) int {
	v, err := sysv.SemGetVal(id, num)
	if err != nil {
		return -1
	}
	return v
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}
