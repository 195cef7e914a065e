package mem_test

import (
	"errors"
	"fmt"

	"github.com/softroce/softroce/mem"
)

// nicClient is the Go image of a NIC vendor's peer-memory client: device
// memory at a bus address range, exported as a C-style callback table.
type nicClient struct {
	name string
	base uint64
	mem  []byte
}

// nicClaim is the client's client_context: one registered range.
type nicClaim struct{ off, n uint64 }

// table fills the callback table: the required base entries always, and
// with ext the version and the vendor's trailing context pair. Entries
// left nil (Unmap, PutPages, Release; PageSize without ext) are skipped,
// as the kernel skips NULL trailing callbacks.
func (c *nicClient) table(ext bool) mem.ClientFuncs {
	f := mem.ClientFuncs{
		Name: c.name,
		Acquire: func(req mem.Request) (mem.ClientContext, error) {
			if req.Desc != nil {
				return nil, mem.Declinef(mem.WrongDescriptor, "%T", req.Desc)
			}
			if req.Addr < c.base || req.End() > c.base+uint64(len(c.mem)) {
				return nil, mem.Declinef(mem.NotMine, "not %s memory", c.name)
			}
			fmt.Printf("%s: acquire %#x, private data %v\n", c.name, req.Addr, req.PrivateData)
			return &nicClaim{off: req.Addr - c.base, n: req.Length}, nil
		},
		GetPages: func(cc mem.ClientContext, write bool, core mem.CoreContext) error { return nil },
		Map: func(cc mem.ClientContext) ([]byte, error) {
			cl := cc.(*nicClaim)
			return c.mem[cl.off : cl.off+cl.n], nil
		},
	}
	if ext {
		f.Version = "2.1"
		f.PageSize = func(mem.ClientContext) int { return 64 << 10 }
		f.GetContextPrivateData = func(peerID uint64) any { return fmt.Sprintf("%s-ctx-%d", c.name, peerID) }
		f.PutContextPrivateData = func(data any) { fmt.Printf("%s: put %v\n", c.name, data) }
	}
	return f
}

// ExampleNewFuncProvider registers two ports of vendor peer-memory clients
// through the superset callback table: one fills only the base entries, the
// other also the version and the trailing context pair, and only it gets a
// peer context's private data (ContextProvider) and reports a version
// (VersionedProvider).
func ExampleNewFuncProvider() {
	reg := mem.NewRegistry(mem.Options{})
	clients := []struct {
		c   *nicClient
		ext bool
	}{
		{&nicClient{name: "nic-a", base: 0x1_0000_0000, mem: make([]byte, 1<<20)}, false},
		{&nicClient{name: "nic-b", base: 0x2_0000_0000, mem: make([]byte, 1<<20)}, true},
	}
	for _, x := range clients {
		p, err := mem.NewFuncProvider(x.c.table(x.ext))
		if err != nil {
			panic(err)
		}
		version := "none"
		if v, ok := p.(mem.VersionedProvider); ok {
			version = v.Version()
		}
		fmt.Printf("%s: %v, version %s\n", p.Name(), mem.CapabilitiesOf(p), version)
		if err := reg.Register(p); err != nil {
			panic(err)
		}
	}

	pc := reg.OpenContext(7) // the peer's context (the kernel path's ucontext)
	for _, addr := range []uint64{0x1_0000_2000, 0x2_0000_2000} {
		r, err := reg.RegisterMemory(mem.Request{Addr: addr, Length: 4096, Write: true, PeerContext: pc})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: region of %d bytes, %d-byte pages\n", r.Provider(), r.Len(), r.PageSize())
		r.Deregister()
	}
	pc.Close()

	// Half of the trailing pair is refused.
	half := clients[0].c.table(false)
	half.GetContextPrivateData = func(uint64) any { return nil }
	_, err := mem.NewFuncProvider(half)
	fmt.Println(errors.Is(err, mem.ErrIncompleteFuncs))
	// Output:
	// nic-a: base, version none
	// nic-b: base+context+version, version 2.1
	// nic-a: acquire 0x100002000, private data <nil>
	// nic-a: region of 4096 bytes, 4096-byte pages
	// nic-b: acquire 0x200002000, private data nic-b-ctx-7
	// nic-b: region of 4096 bytes, 65536-byte pages
	// nic-b: put nic-b-ctx-7
	// true
}
