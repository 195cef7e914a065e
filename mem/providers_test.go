//go:build linux

package mem_test

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/mem/memtest"
)

// backend is one provider under test: a request for its memory and a way
// to read and write that memory behind the region's back.
type backend struct {
	req      mem.Request
	provider string
	peek     func(t *testing.T, off, n int) []byte
	poke     func(t *testing.T, off int, b []byte)
}

func setupBackend(t *testing.T, kind string, g *mem.Registry, n int) backend {
	t.Helper()
	switch kind {
	case "heap-bytes":
		h := mem.NewHeap("")
		if err := g.Register(h); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		return backend{
			req:      mem.Request{Addr: uint64(uintptr(unsafe.Pointer(&b[0]))), Length: uint64(n), Write: true, Desc: mem.Bytes(b)},
			provider: "heap",
			peek:     func(t *testing.T, off, k int) []byte { return bytes.Clone(b[off : off+k]) },
			poke:     func(t *testing.T, off int, d []byte) { copy(b[off:], d) },
		}
	case "heap-alloc":
		h := mem.NewHeap("")
		if err := g.Register(h); err != nil {
			t.Fatal(err)
		}
		b := h.Alloc(n + 100)
		return backend{
			req:      mem.Request{Addr: uint64(uintptr(unsafe.Pointer(&b[100]))), Length: uint64(n), Write: true},
			provider: "heap",
			peek:     func(t *testing.T, off, k int) []byte { return bytes.Clone(b[100+off : 100+off+k]) },
			poke:     func(t *testing.T, off int, d []byte) { copy(b[100+off:], d) },
		}
	case "mmap":
		linuxOnly(t)
		m := mem.NewMmap(mem.MmapOptions{Lock: true})
		t.Cleanup(func() { m.Close() })
		// The heap is registered after mmap: the mmap buffer must go to mmap.
		if err := g.Register(m); err != nil {
			t.Fatal(err)
		}
		if err := g.Register(mem.NewHeap("")); err != nil {
			t.Fatal(err)
		}
		b, err := m.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		return backend{
			req:      mem.Request{Addr: uint64(uintptr(unsafe.Pointer(&b[0]))), Length: uint64(n), Write: true, Desc: mem.Bytes(b)},
			provider: "mmap",
			peek:     func(t *testing.T, off, k int) []byte { return bytes.Clone(b[off : off+k]) },
			poke:     func(t *testing.T, off int, d []byte) { copy(b[off:], d) },
		}
	case "shm":
		linuxOnly(t)
		if err := g.Register(mem.NewShm("")); err != nil {
			t.Fatal(err)
		}
		id, err := mem.CreateShm(0, n+4096, 0o600)
		if err != nil {
			t.Skipf("cannot create a SysV shm segment (%v); needs SysV IPC", err)
		}
		t.Cleanup(func() { mem.RemoveShm(id) })
		seg, err := unix.SysvShmAttach(id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.SysvShmDetach(seg) })
		return backend{
			req:      mem.Request{Addr: 0x1000, Length: uint64(n), Write: true, Desc: mem.ShmByID(id, 4096)},
			provider: "shm",
			peek:     func(t *testing.T, off, k int) []byte { return bytes.Clone(seg[4096+off : 4096+off+k]) },
			poke:     func(t *testing.T, off int, d []byte) { copy(seg[4096+off:], d) },
		}
	case "shm-key":
		if err := g.Register(mem.NewShm("")); err != nil {
			t.Fatal(err)
		}
		var id, key int
		var err error
		for i := 0; i < 16; i++ {
			key = 0x5e000000 | (os.Getpid()&0xffff)<<4 | i
			if id, err = mem.CreateShm(key, n, 0o600); err == nil {
				break
			}
		}
		if err != nil {
			t.Skipf("cannot create a keyed SysV shm segment: %v", err)
		}
		t.Cleanup(func() { mem.RemoveShm(id) })
		seg, err := unix.SysvShmAttach(id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.SysvShmDetach(seg) })
		return backend{
			req:      mem.Request{Addr: 0x1000, Length: uint64(n), Write: true, Desc: mem.ShmByKey(key, 0)},
			provider: "shm",
			peek:     func(t *testing.T, off, k int) []byte { return bytes.Clone(seg[off : off+k]) },
			poke:     func(t *testing.T, off int, d []byte) { copy(seg[off:], d) },
		}
	case "memfd":
		linuxOnly(t)
		if err := g.Register(mem.NewFD("")); err != nil {
			t.Fatal(err)
		}
		fd, err := mem.Memfd("softroce-test", int64(n+8192))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		const off = 8192 + 100 // not page aligned on purpose
		n = min(n, 8192-100)
		return backend{
			req:      mem.Request{Addr: 0x10000, Length: uint64(n), Write: true, Desc: mem.FileDesc{FD: fd, Offset: off - 8192}},
			provider: "fd",
			peek: func(t *testing.T, o, k int) []byte {
				b := make([]byte, k)
				if _, err := unix.Pread(fd, b, int64(off-8192+o)); err != nil {
					t.Fatal(err)
				}
				return b
			},
			poke: func(t *testing.T, o int, d []byte) {
				if _, err := unix.Pwrite(fd, d, int64(off-8192+o)); err != nil {
					t.Fatal(err)
				}
			},
		}
	case "accel":
		linuxOnly(t)
		a, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		if err := g.Register(a); err != nil {
			t.Fatal(err)
		}
		if err := g.Register(mem.NewHeap("")); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Alloc(5000); err != nil { // something before ours
			t.Fatal(err)
		}
		dev, err := a.Alloc(uint64(n) + 64)
		if err != nil {
			t.Fatal(err)
		}
		if dev < mem.DefaultDeviceBase {
			t.Fatalf("device address %#x below the device base", dev)
		}
		return backend{
			req:      mem.Request{Addr: dev + 64, Length: uint64(n), Write: true},
			provider: "accel",
			peek: func(t *testing.T, off, k int) []byte {
				b := make([]byte, k)
				if err := a.CopyFromDevice(b, dev+64+uint64(off)); err != nil {
					t.Fatal(err)
				}
				return b
			},
			poke: func(t *testing.T, off int, d []byte) {
				if err := a.CopyToDevice(dev+64+uint64(off), d); err != nil {
					t.Fatal(err)
				}
			},
		}
	}
	t.Fatalf("unknown backend %q", kind)
	return backend{}
}

var backends = []string{"heap-bytes", "heap-alloc", "mmap", "shm", "shm-key", "memfd", "accel"}

// TestProviderRoundTrip registers each provider's memory, writes and reads
// through the region, and checks the data through the provider itself.
func TestProviderRoundTrip(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			g := mem.NewRegistry(mem.Options{})
			const n = 6000
			be := setupBackend(t, kind, g, n)
			r := mustRegister(t, g, be.req)
			defer r.Deregister()
			if got := r.Provider(); got != be.provider {
				t.Fatalf("provider = %q, want %q", got, be.provider)
			}
			if r.Len() != int(be.req.Length) || r.Addr() != be.req.Addr || r.PageSize() <= 0 || !r.Valid() {
				t.Fatalf("region len %d addr %#x page %d valid %v", r.Len(), r.Addr(), r.PageSize(), r.Valid())
			}

			// Region → provider.
			w := pattern(int(be.req.Length)-16, 3)
			if _, err := r.WriteAt(w, 8); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(w, be.peek(t, 8, len(w))); diff != "" {
				t.Fatalf("provider sees other bytes (-wrote +read):\n%s", diff)
			}
			// Provider → region.
			w2 := pattern(100, 99)
			be.poke(t, 200, w2)
			got := make([]byte, 100)
			if _, err := r.ReadAt(got, 200); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(w2, got); diff != "" {
				t.Fatalf("region sees other bytes:\n%s", diff)
			}
			// Atomics on an aligned word.
			off := int64(0)
			for ; off < 64; off++ {
				b, _ := r.Enter()
				aligned := uintptr(unsafe.Pointer(&b[off]))%8 == 0
				r.Exit()
				if aligned {
					break
				}
			}
			if _, err := r.CompareSwap(off, 0xdead, 1); err != nil { // no swap
				t.Fatal(err)
			}
			if _, err := r.WriteAt(make([]byte, 8), off); err != nil {
				t.Fatal(err)
			}
			if old, err := r.FetchAdd(off, 5); err != nil || old != 0 {
				t.Fatalf("FetchAdd = %d, %v", old, err)
			}
			if old, err := r.CompareSwap(off, 5, 42); err != nil || old != 5 {
				t.Fatalf("CompareSwap = %d, %v", old, err)
			}
			var want [8]byte
			*(*uint64)(unsafe.Pointer(&want[0])) = 42
			if diff := cmp.Diff(want[:], be.peek(t, int(off), 8)); diff != "" {
				t.Fatalf("atomic result not in provider memory:\n%s", diff)
			}
			if _, err := r.FetchAdd(off+1, 1); !errors.Is(err, mem.ErrMisaligned) {
				t.Fatalf("misaligned FetchAdd: %v", err)
			}
			if _, err := r.ReadAt(got, int64(r.Len()-50)); !errors.Is(err, mem.ErrOutOfBounds) {
				t.Fatalf("ReadAt past the end: %v", err)
			}

			if err := r.Deregister(); err != nil {
				t.Fatal(err)
			}
			if err := r.Deregister(); !errors.Is(err, mem.ErrDeregistered) {
				t.Fatalf("second Deregister: %v", err)
			}
			if _, err := r.ReadAt(got, 0); !errors.Is(err, mem.ErrDeregistered) {
				t.Fatalf("ReadAt after Deregister: %v", err)
			}
			if s := g.Stats(); s.LiveRegions.Load() != 0 || s.LiveBytes.Load() != 0 || s.Registrations.Load() != 1 || s.Deregistrations.Load() != 1 {
				t.Fatalf("stats live %d bytes %d reg %d dereg %d", s.LiveRegions.Load(), s.LiveBytes.Load(), s.Registrations.Load(), s.Deregistrations.Load())
			}
		})
	}
}

func TestFDReadOnlyFile(t *testing.T) {
	linuxOnly(t)
	g := mem.NewRegistry(mem.Options{})
	g.Register(mem.NewFD(""))
	path := t.TempDir() + "/f"
	if err := os.WriteFile(path, pattern(10000, 1), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	desc := mem.FileDesc{FD: int(f.Fd()), Offset: 5000}
	if _, err := g.RegisterMemory(mem.Request{Length: 100, Write: true, Desc: desc}); err == nil {
		t.Fatal("writable registration of a read-only fd succeeded")
	} else {
		t.Logf("write on read-only fd: %v", err)
	}
	r, err := g.RegisterMemory(mem.Request{Length: 100, Desc: desc})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Deregister()
	got := make([]byte, 100)
	r.ReadAt(got, 0)
	if diff := cmp.Diff(pattern(10000, 1)[5000:5100], got); diff != "" {
		t.Fatal(diff)
	}
	if _, err := g.RegisterMemory(mem.Request{Length: 6000, Desc: desc}); !errors.Is(err, mem.ErrOutOfBounds) {
		t.Fatalf("range past EOF: %v", err)
	}
}

func TestHugePages(t *testing.T) {
	linuxOnly(t)
	t.Run("require", func(t *testing.T) {
		m := mem.NewMmap(mem.MmapOptions{HugePages: mem.HugeRequire})
		defer m.Close()
		b, err := m.Alloc(3 << 20)
		if errors.Is(err, mem.ErrNoHugePages) {
			t.Skipf("no huge pages reserved on this machine (vm.nr_hugepages=0): %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		g := mem.NewRegistry(mem.Options{})
		g.Register(m)
		r, err := g.RegisterBytes(b, true)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Deregister()
		if r.PageSize() < 1<<20 {
			t.Fatalf("huge page region page size %d", r.PageSize())
		}
	})
	t.Run("prefer", func(t *testing.T) {
		m := mem.NewMmap(mem.MmapOptions{HugePages: mem.HugePrefer})
		defer m.Close()
		b, err := m.Alloc(3 << 20)
		if err != nil {
			t.Fatal(err)
		}
		ps := m.PageSizeOf(b)
		if ps != os.Getpagesize() && ps < 1<<20 {
			t.Fatalf("page size %d", ps)
		}
		t.Logf("HugePrefer page size %d", ps)
		g := mem.NewRegistry(mem.Options{})
		g.Register(m)
		r, err := g.RegisterBytes(b, true)
		if err != nil {
			t.Fatal(err)
		}
		if r.PageSize() != ps {
			t.Fatalf("region page size %d, buffer %d", r.PageSize(), ps)
		}
		if _, err := r.WriteAt(pattern(1<<20, 5), 1<<20); err != nil {
			t.Fatal(err)
		}
		r.Deregister()
	})
}

// TestNoLeaks checks that fd, shm and accelerator registrations give back
// every fd and shm attachment.
func TestNoLeaks(t *testing.T) {
	linuxOnly(t)
	fds0 := memtest.OpenFDs()
	g := mem.NewRegistry(mem.Options{})
	g.Register(mem.NewFD(""))
	g.Register(mem.NewShm(""))
	a, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	g.Register(a)

	fd, err := mem.Memfd("leak", 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	id, err := mem.CreateShm(0, 1<<16, 0o600)
	if err != nil {
		t.Skipf("SysV shm unavailable: %v", err)
	}
	defer mem.RemoveShm(id)
	dev, _ := a.Alloc(1 << 16)
	for i := 0; i < 20; i++ {
		var rs []*mem.Region
		for _, req := range []mem.Request{
			{Length: 4096, Write: true, Desc: mem.FileDesc{FD: fd, Offset: 4096}},
			{Length: 4096, Write: true, Desc: mem.ShmByID(id, 0)},
			{Addr: dev, Length: 4096, Write: true},
		} {
			rs = append(rs, mustRegister(t, g, req))
		}
		if n := memtest.Attached(id); n != 1 {
			t.Fatalf("shm nattch while registered = %d, want 1", n)
		}
		for _, r := range rs {
			if err := r.Deregister(); err != nil {
				t.Fatal(err)
			}
		}
		if n := memtest.Attached(id); n != 0 {
			t.Fatalf("shm nattch after deregistration = %d, want 0", n)
		}
	}
	unix.Close(fd)
	if err := mem.RemoveShm(id); err != nil {
		t.Fatal(err)
	}
	if n := memtest.Attached(id); n != -1 {
		t.Fatalf("shm segment %d still listed after removal (nattch %d)", id, n)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Maps.Load() != 20 || s.Unmaps.Load() != 20 {
		t.Fatalf("accelerator maps %d unmaps %d", s.Maps.Load(), s.Unmaps.Load())
	}
	if fds := memtest.OpenFDs(); fds != fds0 {
		t.Fatalf("open fds %d, was %d", fds, fds0)
	}
}

// pattern returns n bytes that are not periodic in small strides, offset by seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}
