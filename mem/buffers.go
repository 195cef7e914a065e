package mem

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// addrOf returns the address of b's first byte (b non-empty).
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// buffer is one allocation a Heap or Mmap provider handed out.
type buffer struct {
	mem      []byte // whole allocation (mapping for mmap)
	n        int    // length handed to the user
	lo       uint64 // address of mem[0]
	pageSize int
	locked   bool
	freed    bool
	claims   map[*bufClaim]struct{}
}

// bufClaim is the client context of Heap and Mmap registrations.
type bufClaim struct {
	buf  *buffer // nil for a Bytes descriptor the Heap took without owning it
	view []byte
	core CoreContext
}

// bufProvider is the provider logic shared by Heap and Mmap: a set of
// buffers owned by address, revoked when freed.
type bufProvider struct {
	name      string
	acceptAny bool // take any Bytes descriptor (the Heap catch-all)
	mu        sync.Mutex
	bufs      []*buffer
	closed    bool
}

// find returns the buffer containing [lo, hi), or partial=true when the
// range overlaps a buffer without fitting inside it. Caller holds mu.
func (p *bufProvider) find(lo, hi uint64) (b *buffer, partial bool) {
	for _, x := range p.bufs {
		end := x.lo + uint64(x.n)
		if lo >= x.lo && hi <= end {
			return x, false
		}
		if lo < end && hi > x.lo {
			partial = true
		}
	}
	return nil, partial
}

// Name implements Provider.
func (p *bufProvider) Name() string { return p.name }

// Acquire implements Provider.
func (p *bufProvider) Acquire(req Request) (ClientContext, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, Declinef(Unavailable, "provider closed")
	}
	switch d := req.Desc.(type) {
	case Bytes:
		if len(d) == 0 {
			return nil, Declinef(WrongDescriptor, "empty Bytes descriptor")
		}
		lo := addrOf(d)
		hi := lo + req.Length
		b, partial := p.find(lo, hi)
		switch {
		case b != nil:
			if uint64(len(d)) < req.Length {
				return nil, fmt.Errorf("%w: length %d exceeds the %d-byte slice", ErrOutOfBounds, req.Length, len(d))
			}
			return &bufClaim{buf: b, view: d[:req.Length:req.Length]}, nil
		case partial:
			return nil, Declinef(Partial, "[%#x, %#x) crosses the end of a %s buffer", lo, hi, p.name)
		case p.acceptAny:
			if uint64(len(d)) < req.Length {
				return nil, fmt.Errorf("%w: length %d exceeds the %d-byte slice", ErrOutOfBounds, req.Length, len(d))
			}
			return &bufClaim{view: d[:req.Length:req.Length]}, nil
		}
		return nil, Declinef(NotMine, "slice at %#x is not in a %s buffer", lo, p.name)
	case nil:
		b, partial := p.find(req.Addr, req.End())
		switch {
		case b != nil:
			off := req.Addr - b.lo
			return &bufClaim{buf: b, view: b.mem[off : off+req.Length : off+req.Length]}, nil
		case partial:
			return nil, Declinef(Partial, "[%#x, %#x) crosses the end of a %s buffer", req.Addr, req.End(), p.name)
		}
		return nil, Declinef(NotMine, "address %#x is not in a %s buffer", req.Addr, p.name)
	default:
		return nil, Declinef(WrongDescriptor, "%T", req.Desc)
	}
}

// GetPages implements Provider.
func (p *bufProvider) GetPages(cc ClientContext, write bool, core CoreContext) error {
	c := cc.(*bufClaim)
	p.mu.Lock()
	defer p.mu.Unlock()
	c.core = core
	if c.buf != nil {
		if c.buf.freed {
			return fmt.Errorf("%w: buffer freed during registration", ErrRevoked)
		}
		c.buf.claims[c] = struct{}{}
	}
	return nil
}

// Map implements Provider.
func (p *bufProvider) Map(cc ClientContext) ([]byte, error) { return cc.(*bufClaim).view, nil }

// Unmap implements Provider.
func (p *bufProvider) Unmap(cc ClientContext) error { return nil }

// PutPages implements Provider.
func (p *bufProvider) PutPages(cc ClientContext) {
	c := cc.(*bufClaim)
	p.mu.Lock()
	if c.buf != nil {
		delete(c.buf.claims, c)
	}
	p.mu.Unlock()
}

// PageSize implements Provider.
func (p *bufProvider) PageSize(cc ClientContext) int {
	if c := cc.(*bufClaim); c.buf != nil && c.buf.pageSize != 0 {
		return c.buf.pageSize
	}
	return os.Getpagesize()
}

// Release implements Provider.
func (p *bufProvider) Release(cc ClientContext) {}

func (p *bufProvider) add(b *buffer) error {
	b.lo = addrOf(b.mem)
	b.claims = map[*bufClaim]struct{}{}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.bufs = append(p.bufs, b)
	return nil
}

// take removes the buffer starting at b's address, revoking every
// registration on it first. It returns the removed buffer.
func (p *bufProvider) take(b []byte, cause error) (*buffer, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty slice", ErrBadAddress)
	}
	lo := addrOf(b)
	p.mu.Lock()
	var x *buffer
	for i, y := range p.bufs {
		if y.lo == lo {
			x = y
			p.bufs = append(p.bufs[:i:i], p.bufs[i+1:]...)
			break
		}
	}
	if x == nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("%w: %#x is not the start of a %s buffer", ErrBadAddress, lo, p.name)
	}
	x.freed = true
	cores := make([]CoreContext, 0, len(x.claims))
	for c := range x.claims {
		cores = append(cores, c.core)
	}
	p.mu.Unlock()
	for _, c := range cores {
		c.Invalidate(cause)
	}
	return x, nil
}

// takeAll closes the provider and removes every buffer, revoking their
// registrations.
func (p *bufProvider) takeAll(cause error) []*buffer {
	p.mu.Lock()
	p.closed = true
	bufs := p.bufs
	p.bufs = nil
	var cores []CoreContext
	for _, x := range bufs {
		x.freed = true
		for c := range x.claims {
			cores = append(cores, c.core)
		}
	}
	p.mu.Unlock()
	for _, c := range cores {
		c.Invalidate(cause)
	}
	return bufs
}

// Heap is the Go heap provider. It takes any Bytes descriptor (register it
// last: it is the catch-all for ordinary memory, like the kernel's
// non-peer path) and address-only requests inside buffers it allocated.
// Go's collector does not move memory, and a region keeps its slice alive.
type Heap struct{ bufProvider }

// NewHeap returns a heap provider named name ("heap" if empty).
func NewHeap(name string) *Heap {
	if name == "" {
		name = "heap"
	}
	return &Heap{bufProvider{name: name, acceptAny: true}}
}

// Alloc returns a zeroed n-byte slice the provider owns by address.
func (h *Heap) Alloc(n int) []byte {
	if n <= 0 {
		return nil
	}
	b := make([]byte, n)
	_ = h.add(&buffer{mem: b, n: n})
	return b
}

// Free forgets a slice returned by Alloc, invalidating its registrations.
func (h *Heap) Free(b []byte) error {
	_, err := h.take(b, fmt.Errorf("%w: heap buffer freed while registered", ErrRevoked))
	return err
}
