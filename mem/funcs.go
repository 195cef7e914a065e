package mem

import (
	"errors"
	"fmt"
	"strings"
)

// ClientFuncs is the callback-table form of a provider, the Go image of the
// C peer_memory_client superset: the base entries are required, the
// trailing optional entries may be nil, and NewFuncProvider exposes an
// optional capability only when its entries are set — as a core that
// skips NULL trailing callbacks. It suits ports of C peer-memory clients;
// new Go providers usually implement Provider directly.
type ClientFuncs struct {
	Name    string // required
	Version string // optional: VersionedProvider when non-empty

	Acquire  func(req Request) (ClientContext, error)                   // required
	GetPages func(cc ClientContext, write bool, core CoreContext) error // required
	Map      func(cc ClientContext) ([]byte, error)                     // required
	Unmap    func(cc ClientContext) error                               // nil: nothing to undo
	PutPages func(cc ClientContext)                                     // nil: nothing to undo
	PageSize func(cc ClientContext) int                                 // nil: 4096
	Release  func(cc ClientContext)                                     // nil: nothing to free

	// Optional trailing pair (one vendor's extension): ContextProvider when
	// both are set.
	GetContextPrivateData func(peerID uint64) any
	PutContextPrivateData func(data any)
}

// ErrIncompleteFuncs reports a ClientFuncs missing a required entry, or
// with only one of a pair of optional entries.
var ErrIncompleteFuncs = errors.New("mem: incomplete provider callback table")

// NewFuncProvider returns a Provider calling f's entries. The result
// implements ContextProvider only if both context entries are set, and
// VersionedProvider only if Version is set.
func NewFuncProvider(f ClientFuncs) (Provider, error) {
	var missing []string
	if f.Name == "" {
		missing = append(missing, "Name")
	}
	if f.Acquire == nil {
		missing = append(missing, "Acquire")
	}
	if f.GetPages == nil {
		missing = append(missing, "GetPages")
	}
	if f.Map == nil {
		missing = append(missing, "Map")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s not set", ErrIncompleteFuncs, strings.Join(missing, ", "))
	}
	ctx := f.GetContextPrivateData != nil
	if ctx != (f.PutContextPrivateData != nil) {
		return nil, fmt.Errorf("%w: set both GetContextPrivateData and PutContextPrivateData, or neither", ErrIncompleteFuncs)
	}
	b := &funcProvider{f}
	switch {
	case ctx && f.Version != "":
		return &funcCtxVer{funcCtx{b}}, nil
	case ctx:
		return &funcCtx{b}, nil
	case f.Version != "":
		return &funcVer{b}, nil
	}
	return b, nil
}

type funcProvider struct{ f ClientFuncs }

func (p *funcProvider) Name() string                               { return p.f.Name }
func (p *funcProvider) Acquire(req Request) (ClientContext, error) { return p.f.Acquire(req) }
func (p *funcProvider) GetPages(cc ClientContext, write bool, core CoreContext) error {
	return p.f.GetPages(cc, write, core)
}
func (p *funcProvider) Map(cc ClientContext) ([]byte, error) { return p.f.Map(cc) }
func (p *funcProvider) Unmap(cc ClientContext) error {
	if p.f.Unmap == nil {
		return nil
	}
	return p.f.Unmap(cc)
}
func (p *funcProvider) PutPages(cc ClientContext) {
	if p.f.PutPages != nil {
		p.f.PutPages(cc)
	}
}
func (p *funcProvider) PageSize(cc ClientContext) int {
	if p.f.PageSize == nil {
		return 4096
	}
	return p.f.PageSize(cc)
}
func (p *funcProvider) Release(cc ClientContext) {
	if p.f.Release != nil {
		p.f.Release(cc)
	}
}

type funcCtx struct{ *funcProvider }

func (p *funcCtx) GetContextPrivateData(peerID uint64) any { return p.f.GetContextPrivateData(peerID) }
func (p *funcCtx) PutContextPrivateData(data any)          { p.f.PutContextPrivateData(data) }

type funcVer struct{ *funcProvider }

func (p *funcVer) Version() string { return p.f.Version }

type funcCtxVer struct{ funcCtx }

func (p *funcCtxVer) Version() string { return p.f.Version }
