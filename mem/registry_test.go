package mem_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/mem/memtest"
)

func TestFirstOwnerWins(t *testing.T) {
	g := mem.NewRegistry(mem.Options{})
	p := newRangeProvider("first", 8192)
	// "second" owns the same memory; "shm" and "heap" do not own it.
	for _, q := range []mem.Provider{mem.NewShm(""), p, memtest.Renamed(p, "second"), mem.NewHeap("")} {
		if err := g.Register(q); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"shm", "first", "second", "heap"}, g.Providers()); diff != "" {
		t.Fatal(diff)
	}
	req := mem.Request{Addr: p.lo + 100, Length: 1000, Write: true}
	res, err := g.Resolve(req)
	if err != nil {
		t.Fatal(err)
	}
	want := mem.Resolution{Provider: "first", Declines: []mem.Decline{{Provider: "shm", Reason: mem.WrongDescriptor}}}
	if diff := cmp.Diff(want, res, cmpDecline); diff != "" {
		t.Fatalf("Resolve (-want +got):\n%s", diff)
	}
	if p.releases.Load() != 1 || p.getPages.Load() != 0 {
		t.Fatalf("Resolve must release its claim and pin nothing: releases %d get_pages %d", p.releases.Load(), p.getPages.Load())
	}
	r := mustRegister(t, g, req)
	if r.Provider() != "first" {
		t.Fatalf("provider %q", r.Provider())
	}
	// A named request goes to that provider only.
	req.Provider = "second"
	r2 := mustRegister(t, g, req)
	if r2.Provider() != "second" {
		t.Fatalf("provider %q", r2.Provider())
	}
	r2.Deregister()

	if err := g.Unregister("first"); !errors.Is(err, mem.ErrProviderBusy) {
		t.Fatalf("Unregister with a live region: %v", err)
	}
	r.Deregister()
	if err := g.Unregister("first"); err != nil {
		t.Fatal(err)
	}
	req.Provider = ""
	res, err = g.Resolve(req)
	if err != nil || res.Provider != "second" {
		t.Fatalf("after Unregister(first): %+v, %v", res, err)
	}
	if err := g.Unregister("first"); !errors.Is(err, mem.ErrUnknownProvider) {
		t.Fatalf("second Unregister: %v", err)
	}
	if err := g.Register(mem.NewHeap("")); !errors.Is(err, mem.ErrDuplicateProvider) {
		t.Fatalf("duplicate Register: %v", err)
	}
	if q, ok := g.Lookup("second"); !ok || q.Name() != "second" {
		t.Fatalf("Lookup(second) = %v, %v", q, ok)
	}
}

var cmpDecline = cmp.Comparer(func(a, b mem.Decline) bool { return a.Provider == b.Provider && a.Reason == b.Reason })

func TestNoProviderReportsDeclines(t *testing.T) {
	linuxOnly(t)
	g := mem.NewRegistry(mem.Options{})
	a, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, q := range []mem.Provider{a, mem.NewMmap(mem.MmapOptions{}), mem.NewShm(""), mem.NewFD(""), mem.NewHeap("")} {
		g.Register(q)
	}
	_, err = g.RegisterMemory(mem.Request{Addr: 0x1000, Length: 4096})
	var re *mem.ResolveError
	if !errors.As(err, &re) || !errors.Is(err, mem.ErrNoProvider) {
		t.Fatalf("err = %v", err)
	}
	want := []mem.Decline{
		{Provider: "accel", Reason: mem.NotMine},
		{Provider: "mmap", Reason: mem.NotMine},
		{Provider: "shm", Reason: mem.WrongDescriptor},
		{Provider: "fd", Reason: mem.WrongDescriptor},
		{Provider: "heap", Reason: mem.NotMine},
	}
	if diff := cmp.Diff(want, re.Declines, cmpDecline); diff != "" {
		t.Fatalf("declines (-want +got):\n%s", diff)
	}
	msg := err.Error()
	for _, s := range []string{"accel: not mine", "shm: wrong descriptor", "heap: not mine", "0x1000"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}
	t.Logf("%v", err)
	if g.Stats().Failures.Load() != 1 || g.Stats().Declines.Load() != 5 {
		t.Fatalf("failures %d declines %d", g.Stats().Failures.Load(), g.Stats().Declines.Load())
	}
	// Unallocated device memory is the accelerator's, but invalid: a
	// provider error, not a decline.
	_, err = g.RegisterMemory(mem.Request{Addr: a.Base() + 8192, Length: 10})
	var pe *mem.ProviderError
	if !errors.As(err, &pe) || pe.Provider != "accel" || !errors.Is(err, mem.ErrBadAddress) {
		t.Fatalf("unallocated device memory: %v", err)
	}
	empty := mem.NewRegistry(mem.Options{})
	if _, err := empty.RegisterMemory(mem.Request{Addr: 1, Length: 1}); !errors.Is(err, mem.ErrNoProvider) {
		t.Fatalf("empty registry: %v", err)
	}
}

func TestSpansProviders(t *testing.T) {
	g := mem.NewRegistry(mem.Options{})
	big := make([]byte, 16384)
	p := newRangeProvider("range", 0)
	p.buf, p.lo = big[:8192], uint64(uintptr(unsafe.Pointer(&big[0])))
	g.Register(p)
	g.Register(mem.NewHeap(""))
	// Starts inside the provider's buffer, ends outside it.
	_, err := g.RegisterMemory(mem.Request{Addr: p.lo + 4096, Length: 8192})
	if !errors.Is(err, mem.ErrSpansProviders) {
		t.Fatalf("err = %v", err)
	}
	t.Logf("%v", err)
	// Even when a later provider would take it (heap takes any Bytes).
	b := big[4096 : 4096+8192] // half in the provider's buffer, half not
	_, err = g.RegisterMemory(mem.Request{Addr: p.lo + 4096, Length: 8192, Desc: mem.Bytes(b)})
	if !errors.Is(err, mem.ErrSpansProviders) {
		t.Fatalf("with a Bytes descriptor: %v", err)
	}
	if n := g.Stats().LiveRegions.Load(); n != 0 {
		t.Fatalf("live regions %d", n)
	}

	if testing.Short() {
		return
	}
	linuxOnly(t)
	// Two accelerators with adjacent address spaces.
	a1, err := mem.NewAccelerator(mem.AcceleratorOptions{Name: "gpu0", Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	a2, err := mem.NewAccelerator(mem.AcceleratorOptions{Name: "gpu1", Base: mem.DefaultDeviceBase + 1<<20, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	g2 := mem.NewRegistry(mem.Options{})
	g2.Register(a1)
	g2.Register(a2)
	_, err = g2.RegisterMemory(mem.Request{Addr: mem.DefaultDeviceBase + 1<<20 - 4096, Length: 8192})
	var re *mem.ResolveError
	if !errors.As(err, &re) || !errors.Is(err, mem.ErrSpansProviders) || len(re.Declines) != 2 {
		t.Fatalf("across two devices: %v", err)
	}
	// Across two allocations of one device: the device's own error.
	d1, _ := a1.Alloc(mem.DevicePageSize)
	a1.Alloc(mem.DevicePageSize)
	if _, err := g2.RegisterMemory(mem.Request{Addr: d1, Length: 2 * mem.DevicePageSize}); !errors.Is(err, mem.ErrOutOfBounds) {
		t.Fatalf("across two allocations: %v", err)
	}
	r := mustRegister(t, g2, mem.Request{Addr: d1, Length: mem.DevicePageSize})
	if r.Provider() != "gpu0" || r.PageSize() != mem.DevicePageSize {
		t.Fatalf("provider %q page %d", r.Provider(), r.PageSize())
	}
	r.Deregister()
}

func TestLimits(t *testing.T) {
	g := mem.NewRegistry(mem.Options{MaxRegions: 2, MaxRegionSize: 4096})
	g.Register(mem.NewHeap(""))
	buf := make([]byte, 8192)
	if _, err := g.RegisterBytes(buf, true); !errors.Is(err, mem.ErrRegionTooLarge) {
		t.Fatalf("too large: %v", err)
	} else {
		var le *mem.LimitError
		if !errors.As(err, &le) || le.Value != 8192 || le.Max != 4096 {
			t.Fatalf("LimitError %+v", le)
		}
	}
	r1, err := g.RegisterBytes(buf[:4096], true)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := g.RegisterBytes(buf[4096:], true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.RegisterBytes(buf[:10], true); !errors.Is(err, mem.ErrTooManyRegions) {
		t.Fatalf("too many: %v", err)
	}
	// An invalidated region still counts until deregistered.
	r1.Invalidate(nil)
	if _, err := g.RegisterBytes(buf[:10], true); !errors.Is(err, mem.ErrTooManyRegions) {
		t.Fatalf("too many after invalidate: %v", err)
	}
	r1.Deregister()
	r3, err := g.RegisterBytes(buf[:10], true)
	if err != nil {
		t.Fatal(err)
	}
	r2.Deregister()
	r3.Deregister()
	if _, err := g.RegisterBytes(nil, true); !errors.Is(err, mem.ErrZeroLength) {
		t.Fatalf("zero length: %v", err)
	}
	if _, err := g.RegisterMemory(mem.Request{Addr: ^uint64(0) - 10, Length: 100}); !errors.Is(err, mem.ErrOutOfBounds) {
		t.Fatalf("overflow: %v", err)
	}
	if _, err := g.Resolve(mem.Request{}); !errors.Is(err, mem.ErrZeroLength) {
		t.Fatalf("Resolve zero length: %v", err)
	}
}

// TestBaseAndOptionalCapability registers a provider with only the base
// contract and one with the context capability, side by side.
func TestBaseAndOptionalCapability(t *testing.T) {
	base := newRangeProvider("base", 4096)
	ctx := &ctxProvider{rangeProvider: newRangeProvider("ctx", 4096)}
	if c := mem.CapabilitiesOf(base); c != 0 || c.String() != "base" {
		t.Fatalf("base caps %v", c)
	}
	if c := mem.CapabilitiesOf(ctx); c != mem.CapContext || c.String() != "base+context" {
		t.Fatalf("ctx caps %v", c)
	}
	g := mem.NewRegistry(mem.Options{})
	g.Register(base)
	g.Register(ctx)
	pc := g.OpenContext(77)
	if pc.PeerID() != 77 {
		t.Fatal(pc.PeerID())
	}
	rb := mustRegister(t, g, mem.Request{Addr: base.lo, Length: 4096, Write: true, PeerContext: pc})
	rc := mustRegister(t, g, mem.Request{Addr: ctx.lo, Length: 4096, Write: true, PeerContext: pc})
	mustRegister(t, g, mem.Request{Addr: ctx.lo, Length: 16, PeerContext: pc}).Deregister()
	if v := base.lastPrivate.Load().(privBox).v; v != nil {
		t.Fatalf("base provider got private data %v", v)
	}
	pd, ok := ctx.lastPrivate.Load().(privBox).v.(*peerData)
	if !ok || pd.peer != 77 {
		t.Fatalf("context provider got %#v", ctx.lastPrivate.Load())
	}
	if ctx.gets.Load() != 1 {
		t.Fatalf("GetContextPrivateData called %d times, want once per context", ctx.gets.Load())
	}
	for _, r := range []*mem.Region{rb, rc} {
		if _, err := r.WriteAt([]byte("both work"), 10); err != nil {
			t.Fatal(err)
		}
	}
	pc.Close()
	pc.Close()
	if ctx.puts.Load() != 1 {
		t.Fatalf("PutContextPrivateData called %d times", ctx.puts.Load())
	}
	if !rc.Valid() {
		t.Fatal("closing the peer context invalidated a region")
	}
	rb.Deregister()
	rc.Deregister()

	// The accelerator implements the capability; hidden behind BaseOnly it
	// must still work.
	if testing.Short() {
		return
	}
	linuxOnly(t)
	a, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if c := mem.CapabilitiesOf(a); c != mem.CapContext|mem.CapVersion {
		t.Fatalf("accelerator caps %v", c)
	}
	for _, p := range []mem.Provider{a, memtest.BaseOnly(a)} {
		g := mem.NewRegistry(mem.Options{})
		g.Register(p)
		pc := g.OpenContext(5)
		dev, _ := a.Alloc(4096)
		r := mustRegister(t, g, mem.Request{Addr: dev, Length: 4096, Write: true, PeerContext: pc})
		if _, err := r.WriteAt([]byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		r.Deregister()
		pc.Close()
		a.Free(dev)
	}
	if n := a.Stats().OpenPeerContexts.Load(); n != 0 {
		t.Fatalf("open peer contexts %d", n)
	}
}

func TestProviderFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(p *rangeProvider)
		want  error
		op    string
	}{
		{"get_pages", func(p *rangeProvider) { p.failGetPages = errors.New("pin failed") }, nil, "get_pages"},
		{"map", func(p *rangeProvider) { p.failMap = errors.New("no BAR space") }, nil, "map"},
		{"short view", func(p *rangeProvider) { p.shortMap = true }, mem.ErrBadView, "map"},
		{"invalidated during registration", func(p *rangeProvider) { p.invalidateInGetPages = true }, mem.ErrInvalidated, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newRangeProvider("p", 4096)
			tc.setup(p)
			g := mem.NewRegistry(mem.Options{})
			g.Register(p)
			_, err := g.RegisterMemory(mem.Request{Addr: p.lo, Length: 100})
			if err == nil {
				t.Fatal("registration succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var pe *mem.ProviderError
			if tc.op != "" && (!errors.As(err, &pe) || pe.Op != tc.op) {
				t.Fatalf("err = %v, want a ProviderError for %s", err, tc.op)
			}
			// Everything acquired is given back exactly once.
			if p.releases.Load() != 1 || p.putPages.Load() != p.getPages.Load()-boolInt(tc.op == "get_pages") || p.unmaps.Load() > p.maps.Load() {
				t.Fatalf("acquire %d get %d map %d unmap %d put %d release %d", p.acquires.Load(), p.getPages.Load(), p.maps.Load(), p.unmaps.Load(), p.putPages.Load(), p.releases.Load())
			}
			if n := g.Stats().LiveRegions.Load(); n != 0 {
				t.Fatalf("live %d", n)
			}
		})
	}
}

func boolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

func TestReadOnlyRegion(t *testing.T) {
	g := mem.NewRegistry(mem.Options{})
	g.Register(mem.NewHeap(""))
	b := []byte("hello, world")
	r, err := g.RegisterBytes(b, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Deregister()
	if _, err := r.WriteAt([]byte("x"), 0); !errors.Is(err, mem.ErrReadOnly) {
		t.Fatalf("WriteAt: %v", err)
	}
	if _, err := r.FetchAdd(0, 1); !errors.Is(err, mem.ErrReadOnly) {
		t.Fatalf("FetchAdd: %v", err)
	}
	got := make([]byte, 5)
	if _, err := r.ReadAt(got, 7); err != nil || string(got) != "world" {
		t.Fatalf("ReadAt = %q, %v", got, err)
	}
}

func TestLoggingAndStrings(t *testing.T) {
	var buf strings.Builder
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := mem.NewRegistry(mem.Options{Logger: logger})
	p := newRangeProvider("p", 4096)
	g.Register(p)
	r := mustRegister(t, g, mem.Request{Addr: p.lo, Length: 64, Write: true})
	if s := r.String(); !strings.Contains(s, "p [0x") || !strings.HasSuffix(s, "+64) valid") || r.ID() == 0 || !r.Writable() {
		t.Fatalf("String %q id %d", s, r.ID())
	}
	p.revokeAll(nil)
	if s := r.String(); !strings.HasSuffix(s, "invalidated") {
		t.Fatalf("String %q", s)
	}
	r.Deregister()
	g.RegisterMemory(mem.Request{Addr: 1, Length: 1})
	for _, want := range []string{"memory provider registered", "caps=base", "memory registered", "invalidated by its provider", "registration failed"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
	d := mem.Declinef(mem.Partial, "x %d", 1)
	if d.Error() != "mem: declined: partial overlap (x 1)" {
		t.Fatalf("Decline %q", d.Error())
	}
	if s := mem.DeclineReason(99).String(); s != "DeclineReason(99)" {
		t.Fatal(s)
	}
	le := &mem.LimitError{Err: mem.ErrTooManyRegions, Value: 3, Max: 2}
	if !strings.Contains(le.Error(), "3 > limit 2") {
		t.Fatal(le.Error())
	}
}
