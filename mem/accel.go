package mem

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
)

// Simulated accelerator defaults.
const (
	DefaultDeviceBase = 0x7e0000000000 // first device address
	DefaultDeviceSize = 64 << 20       // device memory size
	DevicePageSize    = 64 << 10       // device page and allocation granularity
)

// ErrDeviceFull reports an accelerator allocation that does not fit.
var ErrDeviceFull = errors.New("mem: accelerator out of device memory")

// AcceleratorOptions configure a simulated accelerator.
type AcceleratorOptions struct {
	Name string // provider name; "accel" if empty
	Base uint64 // first device address; DefaultDeviceBase if 0
	Size uint64 // device memory bytes, rounded up to DevicePageSize; DefaultDeviceSize if 0
}

// AcceleratorStats counts an accelerator's activity.
type AcceleratorStats struct {
	Maps, Unmaps     atomic.Uint64 // views created / destroyed by Map / Unmap
	Revocations      atomic.Uint64 // registrations invalidated by Revoke, Free or Close
	OpenPeerContexts atomic.Int64  // private data handed out and not yet put back
}

// Accelerator is a simulated accelerator with its own device memory, for
// testing the peer-memory path end to end. Device memory lives in its own
// address space (device addresses Base..Base+Size, not host pointers),
// allocated with Alloc and filled with CopyToDevice/CopyFromDevice. It is
// backed by a memfd that the stack reaches only through the provider: Map
// creates a fresh shared mapping of the registered range and Unmap
// replaces it with an inaccessible (PROT_NONE) reservation kept until
// Close, so any stray access to a revoked region faults instead of
// reaching memory. Revoke and Free of registered memory invalidate the
// registrations (the peer-memory invalidation callback).
//
// It implements the base Provider contract plus ContextProvider and
// VersionedProvider. Linux only.
type Accelerator struct {
	name       string
	base, size uint64
	fd         int
	priv       []byte // the device's own view, used by the copy engine

	stats AcceleratorStats

	mu         sync.Mutex
	allocs     []*devAlloc // sorted by offset
	quarantine [][]byte
	closed     bool
}

type devAlloc struct {
	off, n   uint64 // offset in device memory, rounded length
	size     uint64 // requested length
	revoking bool
	claims   map[*accelClaim]struct{}
}

type accelClaim struct {
	a      *devAlloc
	off, n uint64 // offset in device memory, length
	write  bool
	core   CoreContext
	peer   any
	m      []byte
	view   []byte
}

type accelPeer struct{ id uint64 }

// NewAccelerator creates a simulated accelerator. Close it to release the
// backing memory.
func NewAccelerator(opts AcceleratorOptions) (*Accelerator, error) {
	if opts.Name == "" {
		opts.Name = "accel"
	}
	if opts.Base == 0 {
		opts.Base = DefaultDeviceBase
	}
	if opts.Size == 0 {
		opts.Size = DefaultDeviceSize
	}
	opts.Size = uint64(roundUp(int(opts.Size), DevicePageSize))
	if opts.Base%DevicePageSize != 0 || opts.Base+opts.Size < opts.Base {
		return nil, fmt.Errorf("mem: accelerator base %#x must be %d-aligned and base+size must not overflow", opts.Base, DevicePageSize)
	}
	if !sysSupported {
		return nil, ErrNotSupported
	}
	fd, err := memfdCreate("softroce-accel-"+opts.Name, int64(opts.Size))
	if err != nil {
		return nil, err
	}
	priv, err := mmapFD(fd, 0, int(opts.Size), true)
	if err != nil {
		closeFD(fd)
		return nil, err
	}
	return &Accelerator{name: opts.Name, base: opts.Base, size: opts.Size, fd: fd, priv: priv}, nil
}

// Stats returns the accelerator's counters.
func (a *Accelerator) Stats() *AcceleratorStats { return &a.stats }

// Base returns the first device address.
func (a *Accelerator) Base() uint64 { return a.base }

// Size returns the device memory size.
func (a *Accelerator) Size() uint64 { return a.size }

// Alloc allocates n bytes of device memory and returns its device address.
func (a *Accelerator) Alloc(n uint64) (uint64, error) {
	if n == 0 {
		return 0, ErrZeroLength
	}
	if n > a.size {
		return 0, fmt.Errorf("%w: %d bytes requested, device has %d", ErrDeviceFull, n, a.size)
	}
	rn := uint64(roundUp(int(n), DevicePageSize))
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, ErrClosed
	}
	var off uint64
	i := 0
	for ; i < len(a.allocs); i++ {
		if a.allocs[i].off-off >= rn {
			break
		}
		off = a.allocs[i].off + a.allocs[i].n
	}
	if a.size-off < rn {
		return 0, fmt.Errorf("%w: no free %d-byte range", ErrDeviceFull, rn)
	}
	x := &devAlloc{off: off, n: rn, size: n, claims: map[*accelClaim]struct{}{}}
	a.allocs = append(a.allocs, nil)
	copy(a.allocs[i+1:], a.allocs[i:])
	a.allocs[i] = x
	return a.base + off, nil
}

// findLocked returns the allocation containing device offset off.
func (a *Accelerator) findLocked(off uint64) (int, *devAlloc) {
	i := sort.Search(len(a.allocs), func(i int) bool { return a.allocs[i].off+a.allocs[i].n > off })
	if i < len(a.allocs) && a.allocs[i].off <= off {
		return i, a.allocs[i]
	}
	return -1, nil
}

// rangeLocked checks that [addr, addr+n) lies in one live allocation and
// returns it and the device offset.
func (a *Accelerator) rangeLocked(addr, n uint64) (*devAlloc, uint64, error) {
	if addr < a.base || addr-a.base >= a.size {
		return nil, 0, fmt.Errorf("%w: %#x is outside device memory [%#x, %#x)", ErrBadAddress, addr, a.base, a.base+a.size)
	}
	off := addr - a.base
	_, x := a.findLocked(off)
	if x == nil || x.revoking {
		return nil, 0, fmt.Errorf("%w: device address %#x is not allocated", ErrBadAddress, addr)
	}
	if n > x.off+x.size-off {
		return nil, 0, fmt.Errorf("%w: [%#x, %#x) runs past the %d-byte allocation at %#x", ErrOutOfBounds, addr, addr+n, x.size, a.base+x.off)
	}
	return x, off, nil
}

// revoke invalidates every registration on the allocation containing addr.
// With free set it also releases the allocation.
func (a *Accelerator) revoke(addr uint64, free bool, cause error) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	if addr < a.base || addr-a.base >= a.size {
		a.mu.Unlock()
		return fmt.Errorf("%w: %#x is outside device memory", ErrBadAddress, addr)
	}
	_, x := a.findLocked(addr - a.base)
	if x == nil || x.revoking {
		a.mu.Unlock()
		return fmt.Errorf("%w: device address %#x is not allocated", ErrBadAddress, addr)
	}
	x.revoking = true
	cores := make([]CoreContext, 0, len(x.claims))
	for c := range x.claims {
		cores = append(cores, c.core)
	}
	a.mu.Unlock()
	for _, c := range cores {
		a.stats.Revocations.Add(1)
		c.Invalidate(cause)
	}
	a.mu.Lock()
	if free {
		if i, y := a.findLocked(x.off); y == x {
			a.allocs = append(a.allocs[:i], a.allocs[i+1:]...)
		}
	} else {
		x.revoking = false
	}
	a.mu.Unlock()
	return nil
}

// Revoke invalidates every registration of the allocation containing addr
// (as if the device had migrated or reclaimed it), keeping the allocation
// and its contents. It returns after the registrations are unmapped.
func (a *Accelerator) Revoke(addr uint64) error {
	return a.revoke(addr, false, fmt.Errorf("%w: accelerator memory at %#x revoked", ErrRevoked, addr))
}

// Free releases the allocation containing addr, first invalidating its
// registrations (freeing registered device memory is the classic
// peer-memory invalidation case).
func (a *Accelerator) Free(addr uint64) error {
	return a.revoke(addr, true, fmt.Errorf("%w: accelerator memory at %#x freed while registered", ErrRevoked, addr))
}

// CopyToDevice copies src to device address dst (inside one allocation).
func (a *Accelerator) CopyToDevice(dst uint64, src []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	_, off, err := a.rangeLocked(dst, uint64(len(src)))
	if err != nil {
		return err
	}
	copy(a.priv[off:], src)
	return nil
}

// CopyFromDevice copies len(dst) bytes from device address src.
func (a *Accelerator) CopyFromDevice(dst []byte, src uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	_, off, err := a.rangeLocked(src, uint64(len(dst)))
	if err != nil {
		return err
	}
	copy(dst, a.priv[off:])
	return nil
}

// Close invalidates every registration, then releases device memory, the
// quarantined views and the memfd.
func (a *Accelerator) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	var cores []CoreContext
	for _, x := range a.allocs {
		x.revoking = true
		for c := range x.claims {
			cores = append(cores, c.core)
		}
	}
	a.mu.Unlock()
	for _, c := range cores {
		a.stats.Revocations.Add(1)
		c.Invalidate(fmt.Errorf("%w: accelerator closed", ErrRevoked))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	a.allocs = nil
	var first error
	for _, q := range a.quarantine {
		if err := munmap(q); err != nil && first == nil {
			first = err
		}
	}
	a.quarantine = nil
	if err := munmap(a.priv); err != nil && first == nil {
		first = err
	}
	a.priv = nil
	if err := closeFD(a.fd); err != nil && first == nil {
		first = err
	}
	return first
}

// Name implements Provider.
func (a *Accelerator) Name() string { return a.name }

// Version implements VersionedProvider.
func (a *Accelerator) Version() string { return "sim-1" }

// GetContextPrivateData implements ContextProvider.
func (a *Accelerator) GetContextPrivateData(peerID uint64) any {
	a.stats.OpenPeerContexts.Add(1)
	return &accelPeer{id: peerID}
}

// PutContextPrivateData implements ContextProvider.
func (a *Accelerator) PutContextPrivateData(data any) {
	if _, ok := data.(*accelPeer); ok {
		a.stats.OpenPeerContexts.Add(-1)
	}
}

// Acquire implements Provider: it owns address-only requests inside its
// device address space.
func (a *Accelerator) Acquire(req Request) (ClientContext, error) {
	switch req.Desc.(type) {
	case nil:
	case Bytes:
		return nil, Declinef(NotMine, "host memory, not device memory")
	default:
		return nil, Declinef(WrongDescriptor, "%T", req.Desc)
	}
	lo, hi := req.Addr, req.End()
	end := a.base + a.size
	if hi <= a.base || lo >= end {
		return nil, Declinef(NotMine, "[%#x, %#x) is outside device memory [%#x, %#x)", lo, hi, a.base, end)
	}
	if lo < a.base || hi > end {
		return nil, Declinef(Partial, "[%#x, %#x) crosses the edge of device memory [%#x, %#x)", lo, hi, a.base, end)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, Declinef(Unavailable, "accelerator closed")
	}
	x, off, err := a.rangeLocked(req.Addr, req.Length)
	if err != nil {
		return nil, err
	}
	return &accelClaim{a: x, off: off, n: req.Length, peer: req.PrivateData}, nil
}

// GetPages implements Provider: it pins the allocation.
func (a *Accelerator) GetPages(cc ClientContext, write bool, core CoreContext) error {
	c := cc.(*accelClaim)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || c.a.revoking {
		return fmt.Errorf("%w: device memory went away during registration", ErrRevoked)
	}
	c.write = write
	c.core = core
	c.a.claims[c] = struct{}{}
	return nil
}

// Map implements Provider: it creates a fresh mapping of the range.
func (a *Accelerator) Map(cc ClientContext) ([]byte, error) {
	c := cc.(*accelClaim)
	ps := uint64(os.Getpagesize())
	base := c.off / ps * ps
	delta := c.off - base
	m, err := mmapFD(a.fd, int64(base), roundUp(int(delta+c.n), int(ps)), c.write)
	if err != nil {
		return nil, err
	}
	a.stats.Maps.Add(1)
	c.m = m
	c.view = m[delta : delta+c.n : delta+c.n]
	return c.view, nil
}

// Unmap implements Provider: the view becomes a PROT_NONE reservation, so
// a stray access faults.
func (a *Accelerator) Unmap(cc ClientContext) error {
	c := cc.(*accelClaim)
	if c.m == nil {
		return nil
	}
	a.stats.Unmaps.Add(1)
	m := c.m
	c.m, c.view = nil, nil
	if err := protNoneFixed(m); err != nil {
		return munmap(m)
	}
	a.mu.Lock()
	a.quarantine = append(a.quarantine, m)
	a.mu.Unlock()
	return nil
}

// PutPages implements Provider.
func (a *Accelerator) PutPages(cc ClientContext) {
	c := cc.(*accelClaim)
	a.mu.Lock()
	delete(c.a.claims, c)
	a.mu.Unlock()
}

// PageSize implements Provider.
func (a *Accelerator) PageSize(cc ClientContext) int { return DevicePageSize }

// Release implements Provider.
func (a *Accelerator) Release(cc ClientContext) {}
