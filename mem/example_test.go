package mem_test

import (
	"errors"
	"fmt"
	"sync"

	"github.com/softroce/softroce/mem"
)

// Scratch is a minimal provider: it owns a fixed "device" address range
// backed by a Go array, and can revoke everything registered on it.
type Scratch struct {
	base  uint64
	mem   [1 << 16]byte
	mu    sync.Mutex
	cores map[*scratchClaim]mem.CoreContext
}

type scratchClaim struct{ off, n uint64 }

func (s *Scratch) Name() string { return "scratch" }

func (s *Scratch) Acquire(req mem.Request) (mem.ClientContext, error) {
	if req.Desc != nil {
		return nil, mem.Declinef(mem.WrongDescriptor, "%T", req.Desc)
	}
	end := s.base + uint64(len(s.mem))
	switch {
	case req.Addr >= s.base && req.End() <= end:
		return &scratchClaim{off: req.Addr - s.base, n: req.Length}, nil
	case req.Addr < end && req.End() > s.base:
		return nil, mem.Declinef(mem.Partial, "crosses the scratchpad edge")
	}
	return nil, mem.Declinef(mem.NotMine, "outside the scratchpad")
}

func (s *Scratch) GetPages(cc mem.ClientContext, write bool, core mem.CoreContext) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cores[cc.(*scratchClaim)] = core // keep it to revoke later
	return nil
}

func (s *Scratch) Map(cc mem.ClientContext) ([]byte, error) {
	c := cc.(*scratchClaim)
	return s.mem[c.off : c.off+c.n], nil
}

func (s *Scratch) Unmap(cc mem.ClientContext) error { return nil }

func (s *Scratch) PutPages(cc mem.ClientContext) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cores, cc.(*scratchClaim))
}

func (s *Scratch) PageSize(cc mem.ClientContext) int { return 4096 }
func (s *Scratch) Release(cc mem.ClientContext)      {}

// Reset revokes every registration (the memory "went away").
func (s *Scratch) Reset() {
	s.mu.Lock()
	var cores []mem.CoreContext
	for _, c := range s.cores {
		cores = append(cores, c)
	}
	s.mu.Unlock() // never invalidate while holding a lock PutPages takes
	for _, c := range cores {
		c.Invalidate(errors.New("scratchpad reset"))
	}
}

// Example_provider writes a provider, registers it, registers memory from
// it, and revokes that memory.
func Example_provider() {
	reg := mem.NewRegistry(mem.Options{MaxRegions: 1024})
	sp := &Scratch{base: 0x5000_0000, cores: map[*scratchClaim]mem.CoreContext{}}
	if err := reg.Register(sp); err != nil { // special providers first
		panic(err)
	}
	reg.Register(mem.NewHeap("")) // the catch-all for ordinary slices, last

	r, err := reg.RegisterMemory(mem.Request{Addr: 0x5000_1000, Length: 256, Write: true})
	if err != nil {
		panic(err)
	}
	r.OnInvalidate(func(ev mem.Invalidation) {
		fmt.Println("invalidated:", ev.Cause)
	})
	r.WriteAt([]byte("hello"), 0)
	fmt.Println(r.Provider(), r.Len(), string(sp.mem[0x1000:0x1005]))

	sp.Reset()
	_, err = r.ReadAt(make([]byte, 5), 0)
	fmt.Println(errors.Is(err, mem.ErrInvalidated))
	r.Deregister()

	_, err = reg.RegisterMemory(mem.Request{Addr: 0x1234, Length: 8})
	fmt.Println(err)
	// Output:
	// scratch 256 hello
	// invalidated: scratchpad reset
	// true
	// mem: no memory provider owns the range: [0x1234, 0x123c): scratch: not mine (outside the scratchpad); heap: not mine (address 0x1234 is not in a heap buffer)
}
