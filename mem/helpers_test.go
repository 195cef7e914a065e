package mem_test

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/softroce/softroce/mem"
)

// rangeProvider is a test provider that owns the address range of one Go
// slice. It implements only the base contract and counts its callbacks.
type rangeProvider struct {
	name string
	buf  []byte
	lo   uint64

	mu    sync.Mutex
	cores []mem.CoreContext

	acquires, getPages, maps, unmaps, putPages, releases atomic.Int32
	lastPrivate                                          atomic.Value
	failGetPages, failMap                                error
	shortMap                                             bool
	invalidateInGetPages                                 bool
}

func newRangeProvider(name string, n int) *rangeProvider {
	b := make([]byte, n)
	if n == 0 {
		return &rangeProvider{name: name}
	}
	return &rangeProvider{name: name, buf: b, lo: uint64(uintptr(unsafe.Pointer(&b[0])))}
}

type rangeClaim struct{ off, n uint64 }

func (p *rangeProvider) Name() string { return p.name }

func (p *rangeProvider) Acquire(req mem.Request) (mem.ClientContext, error) {
	p.acquires.Add(1)
	p.lastPrivate.Store(privBox{req.PrivateData})
	lo := req.Addr
	switch d := req.Desc.(type) {
	case nil:
	case mem.Bytes: // a slice: judge by its real address
		lo = uint64(uintptr(unsafe.Pointer(&d[0])))
	default:
		return nil, mem.Declinef(mem.WrongDescriptor, "%T", req.Desc)
	}
	hi := p.lo + uint64(len(p.buf))
	switch {
	case lo >= p.lo && lo+req.Length <= hi:
		return &rangeClaim{off: lo - p.lo, n: req.Length}, nil
	case lo < hi && lo+req.Length > p.lo:
		return nil, mem.Declinef(mem.Partial, "crosses my buffer")
	}
	return nil, mem.Declinef(mem.NotMine, "not in my buffer")
}

type privBox struct{ v any }

func (p *rangeProvider) GetPages(cc mem.ClientContext, write bool, core mem.CoreContext) error {
	p.getPages.Add(1)
	if p.failGetPages != nil {
		return p.failGetPages
	}
	p.mu.Lock()
	p.cores = append(p.cores, core)
	p.mu.Unlock()
	if p.invalidateInGetPages {
		core.Invalidate(errors.New("gone at once"))
	}
	return nil
}

func (p *rangeProvider) Map(cc mem.ClientContext) ([]byte, error) {
	p.maps.Add(1)
	if p.failMap != nil {
		return nil, p.failMap
	}
	c := cc.(*rangeClaim)
	if p.shortMap {
		return p.buf[c.off : c.off+c.n-1], nil
	}
	return p.buf[c.off : c.off+c.n], nil
}

func (p *rangeProvider) Unmap(cc mem.ClientContext) error { p.unmaps.Add(1); return nil }
func (p *rangeProvider) PutPages(cc mem.ClientContext)    { p.putPages.Add(1) }
func (p *rangeProvider) PageSize(cc mem.ClientContext) int {
	return 4096
}
func (p *rangeProvider) Release(cc mem.ClientContext) { p.releases.Add(1) }

// revokeAll invalidates every registration the provider pinned.
func (p *rangeProvider) revokeAll(cause error) {
	p.mu.Lock()
	cs := p.cores
	p.cores = nil
	p.mu.Unlock()
	for _, c := range cs {
		c.Invalidate(cause)
	}
}

// ctxProvider adds the optional context capability to rangeProvider.
type ctxProvider struct {
	*rangeProvider
	gets, puts atomic.Int32
}

type peerData struct{ peer uint64 }

func (p *ctxProvider) GetContextPrivateData(peerID uint64) any {
	p.gets.Add(1)
	return &peerData{peer: peerID}
}

func (p *ctxProvider) PutContextPrivateData(d any) {
	if _, ok := d.(*peerData); ok {
		p.puts.Add(1)
	}
}

func linuxOnly(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux (mmap, SysV shm, memfd)")
	}
}

func mustRegister(t testing.TB, g *mem.Registry, req mem.Request) *mem.Region {
	t.Helper()
	r, err := g.RegisterMemory(req)
	if err != nil {
		t.Fatalf("RegisterMemory(%#x+%d): %v", req.Addr, req.Length, err)
	}
	return r
}
