package mem

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// State is a region's life-cycle state.
type State uint8

// Region states.
const (
	Valid        State = iota // registered and accessible
	Invalidated               // revoked by its provider; accesses fail with ErrInvalidated
	Deregistered              // deregistered; accesses fail with ErrDeregistered
)

// String returns the state in words.
func (s State) String() string {
	switch s {
	case Valid:
		return "valid"
	case Invalidated:
		return "invalidated"
	case Deregistered:
		return "deregistered"
	}
	return "unknown"
}

// Invalidation is what a region's invalidation listeners receive.
type Invalidation struct {
	Region *Region
	Cause  error // the provider's reason; ErrRevoked when it gave none
}

// guard word layout: the low bits count accessors inside Enter/Exit, the
// two top bits are the invalidated and deregistered flags.
const (
	flagInvalid = uint64(1) << 63
	flagDereg   = uint64(1) << 62
	flagMask    = flagInvalid | flagDereg
	countMask   = ^flagMask
)

// Region is one registration: a provider's memory mapped into the stack's
// view. Accesses go through Enter/Exit (or Access, ReadAt, WriteAt and the
// atomics), a read-side guard that costs two atomic adds and never
// allocates; Invalidate and Deregister flip a flag in the same word and
// wait for accessors inside the guard to leave, so once they return nothing
// touches the memory again.
type Region struct {
	guard atomic.Uint64
	wake  chan struct{} // Exit's signal to a waiting drain (buffered, 1)

	view     []byte // set before the region is published; never changed
	addr     uint64
	write    bool
	pageSize int
	id       uint64

	prov     Provider
	provName string
	cc       ClientContext
	reg      *Registry

	drainMu sync.Mutex // one drainer at a time

	opMu      sync.Mutex // serializes invalidate/deregister/setup steps
	pagesHeld bool       // GetPages succeeded, PutPages not yet called
	mapped    bool       // Map succeeded, Unmap not yet called
	invalid   bool
	dereg     bool
	cause     atomic.Pointer[error] // set once, before the invalid flag

	lmu       sync.Mutex
	listeners []func(Invalidation)
	drainers  []func() // OnDrain hooks
	notified  bool
}

// Addr returns the region's address (Request.Addr).
func (r *Region) Addr() uint64 { return r.addr }

// Len returns the region's length in bytes.
func (r *Region) Len() int { return len(r.view) }

// PageSize returns the provider's page size for the region.
func (r *Region) PageSize() int { return r.pageSize }

// Provider returns the name of the provider that owns the region.
func (r *Region) Provider() string { return r.provName }

// Writable reports whether the region was registered for writing.
func (r *Region) Writable() bool { return r.write }

// ID returns the registry-unique id of the region.
func (r *Region) ID() uint64 { return r.id }

// State returns the region's state.
func (r *Region) State() State {
	g := r.guard.Load()
	switch {
	case g&flagDereg != 0:
		return Deregistered
	case g&flagInvalid != 0:
		return Invalidated
	}
	return Valid
}

// Valid reports whether the region is still accessible.
func (r *Region) Valid() bool { return r.guard.Load()&flagMask == 0 }

// Cause returns why the region was invalidated, or nil.
func (r *Region) Cause() error {
	if p := r.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// Enter starts an access: it returns the region's view, which the caller
// may read (and write, if Writable) until it calls Exit. It returns
// ErrInvalidated or ErrDeregistered, without entering, once the region is
// gone. Every successful Enter must be paired with exactly one Exit; keep
// the section short, since Invalidate waits for it. Enter never allocates.
func (r *Region) Enter() ([]byte, error) {
	if g := r.guard.Add(1); g&flagMask != 0 {
		return nil, r.refuse(g)
	}
	return r.view, nil
}

// refuse is Enter's slow path: undo the count and say why.
func (r *Region) refuse(g uint64) error {
	r.Exit()
	if g&flagDereg != 0 {
		return ErrDeregistered
	}
	return ErrInvalidated
}

// Exit ends an access started by a successful Enter.
func (r *Region) Exit() {
	if g := r.guard.Add(^uint64(0)); g&flagMask != 0 {
		r.wakeDrainer(g)
	}
}

// wakeDrainer is Exit's slow path: the last accessor out wakes a waiting
// Invalidate or Deregister.
func (r *Region) wakeDrainer(g uint64) {
	if g&countMask == 0 {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// Access calls fn with the region's view inside Enter/Exit and returns fn's
// error, or ErrInvalidated/ErrDeregistered without calling fn. fn must not
// keep the slice. It does not allocate when fn does not escape.
func (r *Region) Access(fn func(b []byte) error) error {
	b, err := r.Enter()
	if err != nil {
		return err
	}
	defer r.Exit()
	return fn(b)
}

func (r *Region) bounds(off int64, n int) bool {
	return off >= 0 && uint64(off) <= uint64(len(r.view)) && uint64(n) <= uint64(len(r.view))-uint64(off)
}

// ReadAt copies len(p) bytes at offset off of the region into p.
func (r *Region) ReadAt(p []byte, off int64) (int, error) {
	if !r.bounds(off, len(p)) {
		return 0, ErrOutOfBounds
	}
	b, err := r.Enter()
	if err != nil {
		return 0, err
	}
	n := copy(p, b[off:])
	r.Exit()
	return n, nil
}

// WriteAt copies p into the region at offset off.
func (r *Region) WriteAt(p []byte, off int64) (int, error) {
	if !r.write {
		return 0, ErrReadOnly
	}
	if !r.bounds(off, len(p)) {
		return 0, ErrOutOfBounds
	}
	b, err := r.Enter()
	if err != nil {
		return 0, err
	}
	n := copy(b[off:], p)
	r.Exit()
	return n, nil
}

func (r *Region) word(b []byte, off int64) (*uint64, error) {
	p := unsafe.Pointer(&b[off])
	if uintptr(p)%8 != 0 {
		return nil, ErrMisaligned
	}
	return (*uint64)(p), nil
}

// FetchAdd atomically adds delta to the host-order 64-bit word at offset off
// and returns its previous value (the RDMA FETCH_ADD semantics).
func (r *Region) FetchAdd(off int64, delta uint64) (uint64, error) {
	if !r.write {
		return 0, ErrReadOnly
	}
	if !r.bounds(off, 8) {
		return 0, ErrOutOfBounds
	}
	b, err := r.Enter()
	if err != nil {
		return 0, err
	}
	defer r.Exit()
	w, err := r.word(b, off)
	if err != nil {
		return 0, err
	}
	return atomic.AddUint64(w, delta) - delta, nil
}

// CompareSwap atomically replaces the host-order 64-bit word at offset off
// with swap if it equals compare, and returns its previous value (the RDMA
// CMP_SWAP semantics).
func (r *Region) CompareSwap(off int64, compare, swap uint64) (uint64, error) {
	if !r.write {
		return 0, ErrReadOnly
	}
	if !r.bounds(off, 8) {
		return 0, ErrOutOfBounds
	}
	b, err := r.Enter()
	if err != nil {
		return 0, err
	}
	defer r.Exit()
	w, err := r.word(b, off)
	if err != nil {
		return 0, err
	}
	for {
		old := atomic.LoadUint64(w)
		if old != compare {
			return old, nil
		}
		if atomic.CompareAndSwapUint64(w, old, swap) {
			return old, nil
		}
	}
}

// OnInvalidate adds a listener called once, synchronously from the
// invalidating goroutine, after the region was invalidated and its memory
// unmapped. If the region is already invalidated, fn runs at once. fn may
// call Deregister. Listeners are not called on ordinary deregistration.
func (r *Region) OnInvalidate(fn func(Invalidation)) {
	r.lmu.Lock()
	if !r.notified {
		r.listeners = append(r.listeners, fn)
		r.lmu.Unlock()
		return
	}
	r.lmu.Unlock()
	fn(Invalidation{Region: r, Cause: r.Cause()})
}

// OnDrain adds fn, called (from the tearing-down goroutine, without locks
// of the region held by the caller's code) each time an invalidation or a
// deregistration has to wait for accessors. An accessor that holds the
// guard across asynchronous work, such as a zero-copy send queued for a
// later system call, uses it to finish that work now instead of making the
// teardown wait for it. fn must not call Enter on the region or tear it
// down.
func (r *Region) OnDrain(fn func()) {
	r.lmu.Lock()
	r.drainers = append(r.drainers, fn)
	r.lmu.Unlock()
}

// drainWarn is how long drain waits before logging that accessors are
// still inside the region.
const drainWarn = time.Second

// drain waits until no accessor is inside Enter/Exit. A flag must be set.
func (r *Region) drain() {
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	if r.guard.Load()&countMask == 0 {
		return
	}
	r.lmu.Lock()
	hooks := r.drainers
	r.lmu.Unlock()
	for _, fn := range hooks {
		fn()
	}
	t := time.NewTimer(drainWarn)
	defer t.Stop()
	for r.guard.Load()&countMask != 0 {
		select {
		case <-r.wake:
		case <-t.C:
			if r.reg != nil && r.reg.logger != nil {
				r.reg.logger.Warn("region teardown still waiting for accessors (missing Exit?)", "provider", r.provName, "region", r.id, "accessors", r.guard.Load()&countMask)
			}
			t.Reset(drainWarn)
		}
	}
}

// undo unmaps and unpins whatever is still held. Caller holds opMu.
func (r *Region) undo() {
	if r.mapped {
		r.mapped = false
		if err := r.prov.Unmap(r.cc); err != nil && r.reg != nil {
			r.reg.logf("unmap failed", "provider", r.provName, "region", r.id, "err", err)
		}
	}
	if r.pagesHeld {
		r.pagesHeld = false
		r.prov.PutPages(r.cc)
	}
}

// Invalidate revokes the region from the core's side (for example when the
// owner of the memory tells the engine it is going away). It behaves as the
// provider's CoreContext.Invalidate. It waits for accessors inside
// Enter/Exit, so calling it between Enter and Exit of the same region on
// the same goroutine deadlocks.
func (r *Region) Invalidate(cause error) { r.invalidate(cause) }

func (r *Region) invalidate(cause error) {
	if cause == nil {
		cause = ErrRevoked
	}
	r.opMu.Lock()
	if r.invalid || r.dereg {
		r.opMu.Unlock()
		return
	}
	r.invalid = true
	r.cause.Store(&cause)
	r.guard.Or(flagInvalid)
	r.drain()
	r.undo()
	r.opMu.Unlock()

	if r.reg != nil {
		r.reg.stats.Invalidations.Add(1)
		if r.reg.logger != nil {
			r.reg.logger.Info("memory region invalidated by its provider", "provider", r.provName, "region", r.id, "cause", cause)
		}
	}
	r.lmu.Lock()
	ls := r.listeners
	r.listeners = nil
	r.notified = true
	r.lmu.Unlock()
	ev := Invalidation{Region: r, Cause: cause}
	for _, fn := range ls {
		fn(ev)
	}
}

// Deregister ends the registration: it waits for in-flight accesses, then
// unmaps, unpins and releases the memory through the provider. Later
// accesses fail with ErrDeregistered. A second call returns ErrDeregistered.
// Like Invalidate, it must not be called between Enter and Exit.
func (r *Region) Deregister() error {
	r.opMu.Lock()
	if r.dereg {
		r.opMu.Unlock()
		return ErrDeregistered
	}
	r.dereg = true
	r.guard.Or(flagDereg)
	r.drain()
	r.undo()
	r.prov.Release(r.cc)
	r.opMu.Unlock()
	if r.reg != nil {
		r.reg.remove(r)
	}
	return nil
}

// String describes the region for logs.
func (r *Region) String() string {
	return fmt.Sprintf("region %d %s [%#x, +%d) %s", r.id, r.provName, r.addr, len(r.view), r.State())
}
