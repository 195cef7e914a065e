package mem_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/softroce/softroce/mem"
)

func TestInvalidateListenersAndState(t *testing.T) {
	p := newRangeProvider("p", 4096)
	g := mem.NewRegistry(mem.Options{})
	g.Register(p)
	r := mustRegister(t, g, mem.Request{Addr: p.lo, Length: 4096, Write: true})
	var got []string
	var mu sync.Mutex
	for i := 0; i < 2; i++ {
		r.OnInvalidate(func(ev mem.Invalidation) {
			mu.Lock()
			defer mu.Unlock()
			// The memory is already unmapped and unpinned when listeners run.
			got = append(got, fmt.Sprintf("%d %v unmaps=%d puts=%d valid=%v", i, ev.Cause, p.unmaps.Load(), p.putPages.Load(), ev.Region.Valid()))
		})
	}
	cause := errors.New("device reset")
	p.revokeAll(cause)
	want := []string{"0 device reset unmaps=1 puts=1 valid=false", "1 device reset unmaps=1 puts=1 valid=false"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("listeners: %q, want %q", got, want)
	}
	if r.State() != mem.Invalidated || r.Valid() || !errors.Is(r.Cause(), cause) {
		t.Fatalf("state %v valid %v cause %v", r.State(), r.Valid(), r.Cause())
	}
	if _, err := r.Enter(); !errors.Is(err, mem.ErrInvalidated) {
		t.Fatalf("Enter: %v", err)
	}
	called := false
	if err := r.Access(func([]byte) error { called = true; return nil }); !errors.Is(err, mem.ErrInvalidated) || called {
		t.Fatalf("Access: %v called=%v", err, called)
	}
	for _, err := range []error{
		func() error { _, err := r.ReadAt(make([]byte, 4), 0); return err }(),
		func() error { _, err := r.WriteAt(make([]byte, 4), 0); return err }(),
		func() error { _, err := r.FetchAdd(0, 1); return err }(),
		func() error { _, err := r.CompareSwap(0, 0, 1); return err }(),
	} {
		if !errors.Is(err, mem.ErrInvalidated) {
			t.Fatalf("access after invalidation: %v", err)
		}
	}
	// A listener added later runs at once.
	late := make(chan error, 1)
	r.OnInvalidate(func(ev mem.Invalidation) { late <- ev.Cause })
	if c := <-late; !errors.Is(c, cause) {
		t.Fatalf("late listener cause %v", c)
	}
	// Idempotent; deregistration still releases, without a second unmap.
	p.revokeAll(nil)
	r.Invalidate(nil)
	if g.Stats().Invalidations.Load() != 1 {
		t.Fatalf("invalidations %d", g.Stats().Invalidations.Load())
	}
	if err := r.Deregister(); err != nil {
		t.Fatal(err)
	}
	if r.State() != mem.Deregistered {
		t.Fatalf("state %v", r.State())
	}
	if p.unmaps.Load() != 1 || p.putPages.Load() != 1 || p.releases.Load() != 1 {
		t.Fatalf("unmaps %d puts %d releases %d", p.unmaps.Load(), p.putPages.Load(), p.releases.Load())
	}
}

func TestListenerMayDeregister(t *testing.T) {
	p := newRangeProvider("p", 4096)
	g := mem.NewRegistry(mem.Options{})
	g.Register(p)
	r := mustRegister(t, g, mem.Request{Addr: p.lo, Length: 100})
	r.OnInvalidate(func(ev mem.Invalidation) {
		if err := ev.Region.Deregister(); err != nil {
			t.Error(err)
		}
	})
	p.revokeAll(nil)
	if r.State() != mem.Deregistered || g.Stats().LiveRegions.Load() != 0 {
		t.Fatalf("state %v live %d", r.State(), g.Stats().LiveRegions.Load())
	}
}

// TestInvalidateWaitsForAccess: Invalidate must not return while an
// accessor is inside Enter/Exit.
func TestInvalidateWaitsForAccess(t *testing.T) {
	p := newRangeProvider("p", 4096)
	g := mem.NewRegistry(mem.Options{})
	g.Register(p)
	r := mustRegister(t, g, mem.Request{Addr: p.lo, Length: 4096, Write: true})
	if _, err := r.Enter(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		p.revokeAll(nil)
		close(done)
	}()
	// New accessors fail at once even before the drain completes.
	deadline := time.Now().Add(5 * time.Second)
	for r.Valid() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if _, err := r.Enter(); !errors.Is(err, mem.ErrInvalidated) {
		t.Fatalf("Enter during drain: %v", err)
	}
	select {
	case <-done:
		t.Fatal("Invalidate returned while an access was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	if p.unmaps.Load() != 0 {
		t.Fatal("memory unmapped under an in-flight access")
	}
	r.Exit()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Invalidate did not return after the access ended")
	}
	if p.unmaps.Load() != 1 {
		t.Fatalf("unmaps %d", p.unmaps.Load())
	}
	r.Deregister()
}

// TestRevokeDuringTraffic hammers an accelerator region from several
// goroutines, revokes it mid-stream and checks that, once Revoke returned,
// not a single byte of device memory changed (the canary) and every later
// access reported ErrInvalidated.
func TestRevokeDuringTraffic(t *testing.T) {
	linuxOnly(t)
	a, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g := mem.NewRegistry(mem.Options{})
	g.Register(a)
	const n = 64 << 10
	dev, err := a.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	canary := bytes.Repeat([]byte("CANARY!!"), n/8)
	if err := a.CopyToDevice(dev, canary); err != nil {
		t.Fatal(err)
	}
	r := mustRegister(t, g, mem.Request{Addr: dev, Length: n, Write: true})
	events := make(chan mem.Invalidation, 1)
	r.OnInvalidate(func(ev mem.Invalidation) { events <- ev })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var (
		wg            sync.WaitGroup
		writes, fails atomic.Int64
		started       = make(chan struct{}, 4)
	)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := bytes.Repeat([]byte{byte('a' + w)}, 1024)
			first := true
			for i := 0; ctx.Err() == nil; i++ {
				_, err := r.WriteAt(buf, int64((i*1024+w*256)%(n-1024)))
				if first {
					started <- struct{}{}
					first = false
				}
				if errors.Is(err, mem.ErrInvalidated) {
					fails.Add(1)
					if fails.Load() > 1000 {
						return
					}
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				writes.Add(1)
			}
		}(w)
	}
	for i := 0; i < 4; i++ {
		<-started
	}
	time.Sleep(5 * time.Millisecond)
	if err := a.Revoke(dev); err != nil {
		t.Fatal(err)
	}
	// Revoke has returned: the region is unmapped; snapshot device memory.
	snap := make([]byte, n)
	if err := a.CopyFromDevice(snap, dev); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(snap, canary) {
		t.Log("no write landed before the revoke (machine very slow?)")
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("writers did not all see ErrInvalidated in time")
	}
	after := make([]byte, n)
	a.CopyFromDevice(after, dev)
	if !bytes.Equal(snap, after) {
		t.Fatal("device memory changed after Revoke returned")
	}
	select {
	case ev := <-events:
		if !errors.Is(ev.Cause, mem.ErrRevoked) {
			t.Fatalf("event cause %v", ev.Cause)
		}
	default:
		t.Fatal("no invalidation event")
	}
	t.Logf("%d writes before revoke, %d refused after", writes.Load(), fails.Load())
	if err := r.Deregister(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Revocations.Load() != 1 || s.Maps.Load() != 1 || s.Unmaps.Load() != 1 {
		t.Fatalf("revocations %d maps %d unmaps %d", s.Revocations.Load(), s.Maps.Load(), s.Unmaps.Load())
	}
	// The allocation survives Revoke and can be registered again.
	r2 := mustRegister(t, g, mem.Request{Addr: dev, Length: n, Write: true})
	r2.Deregister()
}

// TestRevokedViewFaults proves the old view of revoked accelerator memory
// is inaccessible: touching it faults (recovered here with SetPanicOnFault).
func TestRevokedViewFaults(t *testing.T) {
	linuxOnly(t)
	a, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g := mem.NewRegistry(mem.Options{})
	g.Register(a)
	dev, _ := a.Alloc(8192)
	r := mustRegister(t, g, mem.Request{Addr: dev, Length: 8192, Write: true})
	view, err := r.Enter()
	if err != nil {
		t.Fatal(err)
	}
	view[0] = 1 // accessible while mapped
	r.Exit()
	stale := uintptr(unsafe.Pointer(&view[0]))
	if perm := mapsPerm(t, stale); !strings.HasPrefix(perm, "rw") {
		t.Fatalf("live view perms %q", perm)
	}
	if err := a.Free(dev); err != nil {
		t.Fatal(err)
	}
	if r.State() != mem.Invalidated {
		t.Fatalf("state after Free %v", r.State())
	}
	if perm := mapsPerm(t, stale); perm != "---p" {
		t.Fatalf("revoked view perms %q, want ---p", perm)
	}
	faulted := func() (f bool) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { f = recover() != nil }()
		view[1] = 2 // stray write through a view kept illegally
		return false
	}()
	if !faulted {
		t.Fatal("write through the revoked view did not fault")
	}
	r.Deregister()
	// Freed memory is gone: registering it again fails.
	if _, err := g.RegisterMemory(mem.Request{Addr: dev, Length: 8192}); !errors.Is(err, mem.ErrBadAddress) {
		t.Fatalf("re-register freed memory: %v", err)
	}
}

// mapsPerm returns the permissions of the mapping containing addr.
func mapsPerm(t *testing.T, addr uintptr) string {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		var lo, hi uintptr
		var perm string
		if _, err := fmt.Sscanf(s.Text(), "%x-%x %s", &lo, &hi, &perm); err == nil && addr >= lo && addr < hi {
			return perm
		}
	}
	return "unmapped"
}

func TestFreeInvalidates(t *testing.T) {
	linuxOnly(t)
	h := mem.NewHeap("")
	m := mem.NewMmap(mem.MmapOptions{})
	defer m.Close()
	g := mem.NewRegistry(mem.Options{})
	g.Register(m)
	g.Register(h)
	hb := h.Alloc(4096)
	mb, err := m.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	rh := mustRegister(t, g, mem.Request{Addr: uint64(uintptr(unsafe.Pointer(&hb[0]))), Length: 4096, Write: true})
	rm, err := g.RegisterBytes(mb[100:200], true)
	if err != nil {
		t.Fatal(err)
	}
	if rh.Provider() != "heap" || rm.Provider() != "mmap" {
		t.Fatalf("providers %q %q", rh.Provider(), rm.Provider())
	}
	if err := h.Free(hb); err != nil {
		t.Fatal(err)
	}
	if err := m.Free(mb); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*mem.Region{rh, rm} {
		if !errors.Is(r.Access(func([]byte) error { return nil }), mem.ErrInvalidated) {
			t.Fatalf("%s region still accessible after Free", r.Provider())
		}
		r.Deregister()
	}
	if err := m.Free(mb); !errors.Is(err, mem.ErrBadAddress) {
		t.Fatalf("double Free: %v", err)
	}
	// mmap Close revokes what is still registered.
	mb2, _ := m.Alloc(100)
	r := mustRegister(t, g, mem.Request{Addr: uint64(uintptr(unsafe.Pointer(&mb2[0]))), Length: 100})
	m.Close()
	if r.Valid() {
		t.Fatal("region valid after the provider closed")
	}
	r.Deregister()
}

// TestConcurrentRegisterRevoke races registrations, accesses, revocations
// and deregistrations (meaningful under -race).
func TestConcurrentRegisterRevoke(t *testing.T) {
	linuxOnly(t)
	a, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g := mem.NewRegistry(mem.Options{})
	g.Register(a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30 && ctx.Err() == nil; i++ {
				dev, err := a.Alloc(8192)
				if err != nil {
					t.Error(err)
					return
				}
				r, err := g.RegisterMemory(mem.Request{Addr: dev, Length: 8192, Write: true})
				if err != nil {
					t.Error(err)
					return
				}
				var inner sync.WaitGroup
				inner.Add(1)
				go func() {
					defer inner.Done()
					for j := 0; j < 200; j++ {
						if _, err := r.FetchAdd(0, 1); err != nil {
							if !errors.Is(err, mem.ErrInvalidated) {
								t.Error(err)
							}
							return
						}
					}
				}()
				if i%2 == 0 {
					a.Free(dev)
				} else {
					a.Revoke(dev)
					a.Free(dev)
				}
				inner.Wait()
				r.Deregister()
			}
		}()
	}
	wg.Wait()
	if n := g.Stats().LiveRegions.Load(); n != 0 {
		t.Fatalf("live regions %d", n)
	}
}

// TestOnDrain: a teardown that has to wait for an accessor calls the
// OnDrain hooks (here the hook ends the access, as a queued zero-copy send
// is flushed), and one that need not wait does not call them.
func TestOnDrain(t *testing.T) {
	p := newRangeProvider("p", 8192)
	g := mem.NewRegistry(mem.Options{})
	g.Register(p)
	idle := mustRegister(t, g, mem.Request{Addr: p.lo, Length: 4096, Write: true})
	busy := mustRegister(t, g, mem.Request{Addr: p.lo + 4096, Length: 4096, Write: true})
	var idleCalls, busyCalls atomic.Int32
	idle.OnDrain(func() { idleCalls.Add(1) })
	if err := idle.Deregister(); err != nil {
		t.Fatal(err)
	}
	if n := idleCalls.Load(); n != 0 {
		t.Fatalf("OnDrain called %d times by a teardown with no accessor", n)
	}
	if _, err := busy.Enter(); err != nil {
		t.Fatal(err)
	}
	busy.OnDrain(func() {
		if busyCalls.Add(1) == 1 {
			busy.Exit()
		}
	})
	done := make(chan error, 1)
	go func() { done <- busy.Deregister() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Deregister still waiting: the OnDrain hook was not called")
	}
	if n := busyCalls.Load(); n != 1 {
		t.Fatalf("OnDrain called %d times, want 1", n)
	}
}
