package mem

import (
	"strings"
)

// ClientContext is a provider's private state for one registration, made by
// Acquire and handed back to every later callback (the peer-memory client's
// client_context). The core never looks inside it.
type ClientContext = any

// Provider is the base contract every memory provider implements. It mirrors
// the life cycle of the kernel's peer_memory_client: acquire, get_pages,
// dma_map, dma_unmap, put_pages, get_page_size, release. The registry calls
// the methods in this order for one registration:
//
//	Acquire → GetPages → Map → (region in use) → Unmap → PutPages → Release
//
// Unmap and PutPages run either at deregistration or, earlier, when the
// provider invalidates the region; Release always runs at deregistration.
// Each is called at most once per ClientContext. Callbacks may be called
// from any goroutine; a provider must be safe for concurrent registrations.
//
// Optional capabilities (ContextProvider, VersionedProvider, and any later
// extension) are separate interfaces the registry discovers with type
// assertions, so a provider written against this contract keeps working
// unchanged when the contract grows.
type Provider interface {
	// Name identifies the provider in the registry and in errors. It must
	// be non-empty and constant.
	Name() string
	// Acquire decides whether the provider owns the request's range. It
	// returns a client context if it does; a *Decline (see Declinef) if it
	// does not, and the registry asks the next provider; any other error if
	// the range is its own but cannot be registered (resolution stops).
	// Acquire should not pin or map anything.
	Acquire(req Request) (ClientContext, error)
	// GetPages pins the memory (it must not move or go away until PutPages
	// or until the provider invalidates the region). core identifies the
	// registration: keep it and call core.Invalidate when the memory is
	// revoked. write reports whether the region will be written.
	GetPages(cc ClientContext, write bool, core CoreContext) error
	// Map returns the stack's view of the range: exactly Request.Length
	// bytes, readable (and writable when write was set), valid until Unmap.
	Map(cc ClientContext) ([]byte, error)
	// Unmap ends the view returned by Map. After it returns, the core never
	// touches that view again.
	Unmap(cc ClientContext) error
	// PutPages unpins what GetPages pinned.
	PutPages(cc ClientContext)
	// PageSize reports the page size backing the registration in bytes.
	PageSize(cc ClientContext) int
	// Release frees the client context.
	Release(cc ClientContext)
}

// ContextProvider is the optional capability matching the two trailing
// callbacks one vendor adds to peer_memory_client
// (get_context_private_data / put_context_private_data). When a PeerContext is
// opened for a peer, the registry asks each ContextProvider for private
// data once, passes it to Acquire in Request.PrivateData, and gives it back
// through PutContextPrivateData when the PeerContext closes. Providers without
// this capability see a nil PrivateData.
type ContextProvider interface {
	Provider
	GetContextPrivateData(peerID uint64) any
	PutContextPrivateData(data any)
}

// VersionedProvider is the optional capability matching the peer-memory
// client's version string.
type VersionedProvider interface {
	Provider
	Version() string
}

// Caps is a set of optional capabilities a provider implements.
type Caps uint32

// Capability bits.
const (
	CapContext Caps = 1 << iota // implements ContextProvider
	CapVersion                  // implements VersionedProvider
)

// CapabilitiesOf reports which optional interfaces p implements.
func CapabilitiesOf(p Provider) Caps {
	var c Caps
	if _, ok := p.(ContextProvider); ok {
		c |= CapContext
	}
	if _, ok := p.(VersionedProvider); ok {
		c |= CapVersion
	}
	return c
}

// String returns e.g. "base" or "base+context+version".
func (c Caps) String() string {
	if c == 0 {
		return "base"
	}
	var parts []string
	if c&CapContext != 0 {
		parts = append(parts, "context")
	}
	if c&CapVersion != 0 {
		parts = append(parts, "version")
	}
	return "base+" + strings.Join(parts, "+")
}

// Request describes memory to register.
type Request struct {
	// Addr is the address of the range in its owner's address space: a host
	// virtual address, or a device address for accelerator memory. For
	// descriptor requests (FileDesc, ShmSegment) it is the I/O virtual
	// address the region will be known by (as ibv_reg_dmabuf_mr's iova) and
	// providers ignore it when choosing the memory.
	Addr uint64
	// Length is the size in bytes; it must be > 0.
	Length uint64
	// Write asks for a writable view (local write, remote write or atomics).
	Write bool
	// Desc optionally names the memory by descriptor instead of address:
	// Bytes, FileDesc, ShmSegment, or a provider-specific type. Providers
	// decline descriptor types they do not handle with WrongDescriptor.
	Desc any
	// Provider, when set, restricts resolution to the provider of that name.
	Provider string
	// PeerContext optionally ties the request to a peer context (the ucontext
	// of the kernel path) whose private data ContextProviders receive (nil: none).
	PeerContext *PeerContext
	// PrivateData is set by the registry before each Acquire: the data the
	// asked provider returned from GetContextPrivateData for PeerContext, or nil.
	PrivateData any
}

// End returns Addr+Length.
func (r *Request) End() uint64 { return r.Addr + r.Length }

// Bytes is a descriptor for ordinary memory the caller already holds as a
// slice (Go heap, or memory mapped by other code). The Heap provider takes
// it; a provider that owns the slice's address range (an mmap buffer, say)
// takes it first if registered earlier. The region's view is
// b[:Request.Length].
type Bytes []byte

// CoreContext identifies one registration to its provider (the kernel
// peer-memory core_context). A provider keeps it from GetPages and calls
// Invalidate when the memory goes away. The zero value does nothing.
type CoreContext struct {
	r *Region
}

// Invalidate revokes the registration: the region becomes invalid at once,
// Invalidate waits for in-flight accesses to finish, calls the provider's
// Unmap and PutPages, then the region's invalidation listeners. After it
// returns, nothing in the core touches the memory again. cause (nil means
// ErrRevoked) is reported to listeners. It is idempotent and safe from any
// goroutine, but must not be called from the provider's own Unmap, PutPages
// or Release, nor while holding a lock those callbacks take.
func (c CoreContext) Invalidate(cause error) {
	if c.r != nil {
		c.r.invalidate(cause)
	}
}

// Region returns the registration's region (nil for the zero value).
func (c CoreContext) Region() *Region { return c.r }
