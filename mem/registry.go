package mem

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"unsafe"
)

// DefaultMaxRegions is the default limit on live regions, rxe's max_mr
// (about 2^19).
const DefaultMaxRegions = 1<<19 - 1

// Options configure a Registry. The zero value is usable.
type Options struct {
	// MaxRegions limits live regions; 0 means DefaultMaxRegions, <0 no limit.
	MaxRegions int
	// MaxRegionSize limits one region's length in bytes; 0 means no limit
	// (rxe's max_mr_size is 2^64-1).
	MaxRegionSize uint64
	// Logger receives registration and invalidation events at debug/info
	// level; nil is silent.
	Logger *slog.Logger
}

// Stats counts registry events. Fields are updated atomically.
type Stats struct {
	Registrations   atomic.Uint64 // successful registrations
	Deregistrations atomic.Uint64
	Invalidations   atomic.Uint64 // regions revoked by their provider
	Failures        atomic.Uint64 // registrations that failed
	Declines        atomic.Uint64 // provider declines seen while resolving
	LiveRegions     atomic.Int64
	LiveBytes       atomic.Int64
}

// Registry holds the memory providers, in the order they were registered,
// and the live regions. Resolution asks providers in that order and the
// first that owns the range wins, as in the kernel's peer-memory path:
// register special providers (mmap, accelerators) before the catch-all
// Heap. A Registry is safe for concurrent use.
type Registry struct {
	opts   Options
	logger *slog.Logger
	stats  Stats

	mu        sync.RWMutex
	providers []Provider
	live      map[string]int // provider name → live regions

	nextID  atomic.Uint64
	reserve atomic.Int64 // live + in-progress registrations
}

// NewRegistry returns an empty registry.
func NewRegistry(opts Options) *Registry {
	if opts.MaxRegions == 0 {
		opts.MaxRegions = DefaultMaxRegions
	}
	return &Registry{opts: opts, logger: opts.Logger, live: map[string]int{}}
}

// Stats returns the registry's counters.
func (g *Registry) Stats() *Stats { return &g.stats }

func (g *Registry) logf(msg string, args ...any) {
	if g.logger != nil {
		g.logger.Debug(msg, args...)
	}
}

// Register adds p after the providers already registered. Names must be
// unique.
func (g *Registry) Register(p Provider) error {
	name := p.Name()
	if name == "" {
		return errors.New("mem: provider has an empty name")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range g.providers {
		if q.Name() == name {
			return fmt.Errorf("%w: %q", ErrDuplicateProvider, name)
		}
	}
	g.providers = append(g.providers, p)
	if g.logger != nil {
		g.logger.Info("memory provider registered", "provider", name, "caps", CapabilitiesOf(p).String())
	}
	return nil
}

// Unregister removes the provider named name. It fails with ErrProviderBusy
// while the provider has live regions (invalidated ones count until they
// are deregistered) or registrations in progress.
func (g *Registry) Unregister(name string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.providers {
		if q.Name() != name {
			continue
		}
		if n := g.live[name]; n > 0 {
			return fmt.Errorf("%w: %q has %d live regions", ErrProviderBusy, name, n)
		}
		g.providers = append(g.providers[:i:i], g.providers[i+1:]...)
		return nil
	}
	return fmt.Errorf("%w: %q", ErrUnknownProvider, name)
}

// Lookup returns the provider registered under name.
func (g *Registry) Lookup(name string) (Provider, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	for _, q := range g.providers {
		if q.Name() == name {
			return q, true
		}
	}
	return nil, false
}

// Providers returns the registered provider names in resolution order.
func (g *Registry) Providers() []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	names := make([]string, len(g.providers))
	for i, q := range g.providers {
		names[i] = q.Name()
	}
	return names
}

// Resolution reports how a request was resolved: the provider that took it
// and, in order, the providers that declined before it (first owner wins:
// providers after the taker are not asked).
type Resolution struct {
	Provider string
	Declines []Decline
}

func (g *Registry) snapshot() []Provider {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return append([]Provider(nil), g.providers...)
}

// resolve asks providers in order. On success the caller owns cc.
func (g *Registry) resolve(req Request) (Provider, ClientContext, Resolution, error) {
	var res Resolution
	partial := false
	for _, p := range g.snapshot() {
		name := p.Name()
		if req.Provider != "" && req.Provider != name {
			res.Declines = append(res.Declines, Decline{Provider: name, Reason: NotSelected})
			continue
		}
		q := req
		q.PrivateData = nil
		if req.PeerContext != nil {
			if cp, ok := p.(ContextProvider); ok {
				q.PrivateData = req.PeerContext.dataFor(cp)
			}
		}
		cc, err := p.Acquire(q)
		if err == nil {
			if partial {
				p.Release(cc)
				g.stats.Declines.Add(uint64(len(res.Declines)))
				return nil, nil, res, &ResolveError{Addr: req.Addr, Length: req.Length, Declines: res.Declines, Err: ErrSpansProviders}
			}
			res.Provider = name
			g.stats.Declines.Add(uint64(len(res.Declines)))
			return p, cc, res, nil
		}
		var d *Decline
		if !errors.As(err, &d) {
			g.stats.Declines.Add(uint64(len(res.Declines)))
			return nil, nil, res, &ProviderError{Provider: name, Op: "acquire", Err: err}
		}
		dd := *d
		dd.Provider = name
		res.Declines = append(res.Declines, dd)
		if dd.Reason == Partial {
			partial = true
		}
	}
	g.stats.Declines.Add(uint64(len(res.Declines)))
	e := ErrNoProvider
	if partial {
		e = ErrSpansProviders
	}
	return nil, nil, res, &ResolveError{Addr: req.Addr, Length: req.Length, Declines: res.Declines, Err: e}
}

// Resolve reports which provider would take req and why the others
// declined, without registering anything (the claim is released at once).
func (g *Registry) Resolve(req Request) (Resolution, error) {
	if req.Length == 0 {
		return Resolution{}, ErrZeroLength
	}
	p, cc, res, err := g.resolve(req)
	if err != nil {
		return res, err
	}
	p.Release(cc)
	return res, nil
}

// RegisterBytes registers b (Request{Addr: &b[0], Length: len(b), Desc:
// Bytes(b)}): the provider owning b's address range takes it, else the
// Heap provider if registered.
func (g *Registry) RegisterBytes(b []byte, write bool) (*Region, error) {
	if len(b) == 0 {
		return nil, ErrZeroLength
	}
	return g.RegisterMemory(Request{Addr: uint64(uintptr(unsafe.Pointer(&b[0]))), Length: uint64(len(b)), Write: write, Desc: Bytes(b)})
}

// RegisterMemory resolves req to a provider, pins and maps the memory, and
// returns the region. Errors: ErrZeroLength, *LimitError
// (ErrRegionTooLarge, ErrTooManyRegions), *ResolveError (ErrNoProvider,
// ErrSpansProviders), *ProviderError, ErrInvalidated (revoked during
// registration).
func (g *Registry) RegisterMemory(req Request) (*Region, error) {
	r, err := g.register(req)
	if err != nil {
		g.stats.Failures.Add(1)
		if g.logger != nil {
			g.logger.Debug("memory registration failed", "addr", req.Addr, "len", req.Length, "err", err)
		}
	}
	return r, err
}

func (g *Registry) register(req Request) (*Region, error) {
	if err := g.check(req); err != nil {
		return nil, err
	}
	if err := g.reserveSlot(); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			g.reserve.Add(-1)
		}
	}()

	p, cc, res, err := g.resolve(req)
	if err != nil {
		return nil, err
	}
	if !g.pin(p) {
		p.Release(cc)
		return nil, fmt.Errorf("%w: %q was unregistered during the registration", ErrUnknownProvider, res.Provider)
	}
	defer func() {
		if !ok {
			g.unpin(res.Provider)
		}
	}()
	r := &Region{
		wake:     make(chan struct{}, 1),
		addr:     req.Addr,
		write:    req.Write,
		id:       g.nextID.Add(1),
		prov:     p,
		provName: res.Provider,
		cc:       cc,
		reg:      g,
	}
	if err := r.acquire(req); err != nil {
		return nil, err
	}
	ok = true
	g.stats.Registrations.Add(1)
	g.stats.LiveRegions.Add(1)
	g.stats.LiveBytes.Add(int64(req.Length))
	if g.logger != nil {
		g.logger.Debug("memory registered", "provider", r.provName, "region", r.id, "addr", req.Addr, "len", req.Length, "declined", len(res.Declines))
	}
	return r, nil
}

// check refuses a request that is empty, wraps around or is too large.
func (g *Registry) check(req Request) error {
	if req.Length == 0 {
		return ErrZeroLength
	}
	if req.Addr+req.Length < req.Addr {
		return fmt.Errorf("%w: address %#x + length %#x overflows", ErrOutOfBounds, req.Addr, req.Length)
	}
	if max := g.opts.MaxRegionSize; max != 0 && req.Length > max {
		return &LimitError{Err: ErrRegionTooLarge, Value: req.Length, Max: max}
	}
	if req.Length > uint64(maxInt) {
		return &LimitError{Err: ErrRegionTooLarge, Value: req.Length, Max: uint64(maxInt)}
	}
	return nil
}

// reserveSlot counts one more region against MaxRegions, or refuses it;
// the caller gives the slot back (reserve.Add(-1)) if the registration
// fails.
func (g *Registry) reserveSlot() error {
	max := g.opts.MaxRegions
	if max <= 0 {
		g.reserve.Add(1)
		return nil
	}
	if n := g.reserve.Add(1); n > int64(max) {
		g.reserve.Add(-1)
		return &LimitError{Err: ErrTooManyRegions, Value: uint64(n), Max: uint64(max)}
	}
	return nil
}

// acquire gets the region's pages from its provider and maps them; an
// invalidation meanwhile, or a view of the wrong size, undoes it all and
// releases the provider's context.
func (r *Region) acquire(req Request) error {
	p, cc := r.prov, r.cc
	if err := p.GetPages(cc, req.Write, CoreContext{r}); err != nil {
		return r.abort("get_pages", err)
	}
	r.opMu.Lock()
	r.pagesHeld = true
	inv := r.invalid
	r.opMu.Unlock()
	if inv {
		return r.abort("", ErrInvalidated)
	}
	view, err := p.Map(cc)
	if err != nil {
		return r.abort("map", err)
	}
	r.opMu.Lock()
	r.mapped = true
	inv = r.invalid
	r.opMu.Unlock()
	if inv {
		return r.abort("", ErrInvalidated)
	}
	if uint64(len(view)) != req.Length {
		return r.abort("map", fmt.Errorf("%w: got %d bytes, want %d", ErrBadView, len(view), req.Length))
	}
	r.view = view
	r.pageSize = p.PageSize(cc)
	return nil
}

// abort undoes a registration that failed in provider operation op ("":
// not the provider's fault) and returns the error to report.
func (r *Region) abort(op string, err error) error {
	r.opMu.Lock()
	r.dereg = true
	r.guard.Or(flagDereg)
	r.undo()
	r.opMu.Unlock()
	r.prov.Release(r.cc)
	if op == "" {
		return err
	}
	return &ProviderError{Provider: r.provName, Op: op, Err: err}
}

const maxInt = int(^uint(0) >> 1)

// pin counts a registration against p, if p is still registered, so that
// Unregister sees it as busy.
func (g *Registry) pin(p Provider) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range g.providers {
		if q == p {
			g.live[p.Name()]++
			return true
		}
	}
	return false
}

func (g *Registry) unpin(name string) {
	g.mu.Lock()
	if g.live[name]--; g.live[name] <= 0 {
		delete(g.live, name)
	}
	g.mu.Unlock()
}

func (g *Registry) remove(r *Region) {
	g.unpin(r.provName)
	g.reserve.Add(-1)
	g.stats.Deregistrations.Add(1)
	g.stats.LiveRegions.Add(-1)
	g.stats.LiveBytes.Add(-int64(len(r.view)))
}

// PeerContext is a peer context, the counterpart of the kernel's ucontext
// private data: requests carrying it give each ContextProvider the private
// data it returned from GetContextPrivateData(PeerID). The data is fetched
// lazily on first use and returned to the providers by Close.
type PeerContext struct {
	peerID uint64
	mu     sync.Mutex
	data   map[ContextProvider]any
	closed bool
}

// OpenContext returns a peer context for peerID.
func (g *Registry) OpenContext(peerID uint64) *PeerContext {
	return &PeerContext{peerID: peerID, data: map[ContextProvider]any{}}
}

// PeerID returns the context's peer id.
func (c *PeerContext) PeerID() uint64 { return c.peerID }

func (c *PeerContext) dataFor(p ContextProvider) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if d, ok := c.data[p]; ok {
		return d
	}
	d := p.GetContextPrivateData(c.peerID)
	c.data[p] = d
	return d
}

// Close gives every provider's private data back. Regions registered with
// the context stay valid.
func (c *PeerContext) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	data := c.data
	c.data = nil
	c.mu.Unlock()
	for p, d := range data {
		p.PutContextPrivateData(d)
	}
	return nil
}
