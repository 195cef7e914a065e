package verbs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/mem/memtest"
)

// backing is provider memory registered as b's MR, with a way to read and
// write it that goes around the device (through the provider or the
// memory's owner), to verify what RDMA did.
type backing struct {
	mr   *MR
	peek func(t *testing.T, off, n int) []byte
	poke func(t *testing.T, off int, d []byte)
}

const provLen = 64 << 10

const provAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

func newBacking(t *testing.T, s *side, kind string) backing {
	t.Helper()
	reg := s.dev.MemoryRegistry()
	switch kind {
	case "heap":
		h := mem.NewHeap("heap-owned")
		if err := reg.Register(h); err != nil {
			t.Fatal(err)
		}
		b := h.Alloc(provLen)
		mr, err := s.pd.RegMem(mem.Request{Addr: uint64(uintptr(unsafe.Pointer(&b[0]))), Length: provLen}, provAccess)
		if err != nil {
			t.Fatal(err)
		}
		if p := mr.Region().Provider(); p != "heap-owned" && p != "heap" {
			t.Fatalf("heap memory taken by %q", p)
		}
		return backing{mr: mr,
			peek: func(t *testing.T, off, n int) []byte { return bytes.Clone(b[off : off+n]) },
			poke: func(t *testing.T, off int, d []byte) { copy(b[off:], d) }}
	case "mmap":
		m := mem.NewMmap(mem.MmapOptions{})
		if err := reg.Register(m); err != nil {
			t.Fatal(err)
		}
		b, err := m.Alloc(provLen)
		if err != nil {
			t.Skip("mmap provider:", err)
		}
		t.Cleanup(func() { m.Free(b) })
		mr, err := s.pd.RegMem(mem.Request{Addr: uint64(uintptr(unsafe.Pointer(&b[0]))), Length: provLen}, provAccess)
		if err != nil {
			t.Fatal(err)
		}
		if p := mr.Region().Provider(); p != "mmap" {
			t.Fatalf("mmap memory taken by %q", p)
		}
		return backing{mr: mr,
			peek: func(t *testing.T, off, n int) []byte { return bytes.Clone(b[off : off+n]) },
			poke: func(t *testing.T, off int, d []byte) { copy(b[off:], d) }}
	case "shm":
		if err := reg.Register(mem.NewShm("shm")); err != nil {
			t.Fatal(err)
		}
		id, err := mem.CreateShm(0, provLen+4096, 0o600)
		if err != nil {
			t.Skipf("cannot create a SysV shm segment (%v): needs SysV IPC", err)
		}
		t.Cleanup(func() { mem.RemoveShm(id) })
		seg, err := unix.SysvShmAttach(id, 0, 0) // the owner's own attachment
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.SysvShmDetach(seg) })
		mr, err := s.pd.RegMem(mem.Request{Addr: 0x10000, Length: provLen, Desc: mem.ShmByID(id, 4096)}, provAccess)
		if err != nil {
			t.Fatal(err)
		}
		if mr.Addr() != 0x10000 {
			t.Fatalf("shm MR address %#x, want the requested 0x10000", mr.Addr())
		}
		return backing{mr: mr,
			peek: func(t *testing.T, off, n int) []byte { return bytes.Clone(seg[4096+off : 4096+off+n]) },
			poke: func(t *testing.T, off int, d []byte) { copy(seg[4096+off:], d) }}
	case "fd":
		fd, err := mem.Memfd("softroce-test", provLen+8192)
		if err != nil {
			t.Skip("memfd:", err)
		}
		f := os.NewFile(uintptr(fd), "memfd")
		t.Cleanup(func() { f.Close() })
		mr, err := s.pd.RegDmabufMR(fd, 8192, provLen, 0x7000_0000, provAccess)
		if err != nil {
			t.Fatal(err)
		}
		if mr.Addr() != 0x7000_0000 || mr.Region().Provider() != "fd" {
			t.Fatalf("dmabuf MR at %#x from %q", mr.Addr(), mr.Region().Provider())
		}
		return backing{mr: mr,
			peek: func(t *testing.T, off, n int) []byte {
				b := make([]byte, n)
				if _, err := f.ReadAt(b, int64(8192+off)); err != nil {
					t.Fatal(err)
				}
				return b
			},
			poke: func(t *testing.T, off int, d []byte) {
				if _, err := f.WriteAt(d, int64(8192+off)); err != nil {
					t.Fatal(err)
				}
			}}
	case "accel":
		acc, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 20})
		if err != nil {
			t.Skip("accelerator:", err)
		}
		t.Cleanup(func() { acc.Close() })
		if err := reg.Register(acc); err != nil {
			t.Fatal(err)
		}
		dev, err := acc.Alloc(provLen)
		if err != nil {
			t.Fatal(err)
		}
		mr, err := s.pd.RegMem(mem.Request{Addr: dev, Length: provLen}, provAccess)
		if err != nil {
			t.Fatal(err)
		}
		if mr.Addr() != dev {
			t.Fatalf("accelerator MR at %#x, want device address %#x", mr.Addr(), dev)
		}
		return backing{mr: mr,
			peek: func(t *testing.T, off, n int) []byte {
				b := make([]byte, n)
				if err := acc.CopyFromDevice(b, dev+uint64(off)); err != nil {
					t.Fatal(err)
				}
				return b
			},
			poke: func(t *testing.T, off int, d []byte) {
				if err := acc.CopyToDevice(dev+uint64(off), d); err != nil {
					t.Fatal(err)
				}
			}}
	}
	t.Fatalf("unknown backing %q", kind)
	return backing{}
}

// TestProviderMemoryRDMA: RDMA WRITE, READ, FETCH_ADD and CMP_SWAP land in
// each provider's memory, verified around the device.
func TestProviderMemoryRDMA(t *testing.T) {
	for _, kind := range []string{"heap", "mmap", "shm", "fd", "accel"} {
		t.Run(kind, func(t *testing.T) {
			a, b := newPair(t, pairOpts{bufSize: 1 << 16})
			m := newBacking(t, b, kind)
			base := m.mr.Addr()
			key := m.mr.RKey()
			// WRITE (5 packets at PMTU 1024).
			fill(a.buf[:5000], byte(len(kind)))
			post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 5000), RemoteAddr: base + 64, RKey: key})
			wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
			mustEqual(t, m.peek(t, 64, 5000), a.buf[:5000])
			// READ what the owner wrote.
			pat := make([]byte, 3000)
			fill(pat, 99)
			m.poke(t, 8192, pat)
			post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 10000, 3000), RemoteAddr: base + 8192, RKey: key})
			wantWC(t, a.scq, WCSuccess, WCRDMARead)
			mustEqual(t, a.buf[10000:13000], pat)
			// Atomics.
			var w [8]byte
			binary.NativeEndian.PutUint64(w[:], 100)
			m.poke(t, 16384, w[:])
			post(t, a.qp, SendWR{WRID: 3, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGList: sge(a, 20000, 8), RemoteAddr: base + 16384, RKey: key, CompareAdd: 5})
			wantWC(t, a.scq, WCSuccess, WCFetchAdd)
			post(t, a.qp, SendWR{WRID: 4, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGList: sge(a, 20008, 8), RemoteAddr: base + 16384, RKey: key, CompareAdd: 105, Swap: 7})
			wantWC(t, a.scq, WCSuccess, WCCompSwap)
			if old1, old2, now := binary.NativeEndian.Uint64(a.buf[20000:]), binary.NativeEndian.Uint64(a.buf[20008:]),
				binary.NativeEndian.Uint64(m.peek(t, 16384, 8)); old1 != 100 || old2 != 105 || now != 7 {
				t.Fatalf("atomics: fetch-add old %d, cmp-swap old %d, memory %d; want 100 105 7", old1, old2, now)
			}
			// Local use of provider memory: SEND from it.
			postRecv(t, a, 9, 30000, 2000)
			post(t, b.qp, SendWR{WRID: 5, Opcode: WRSend, Flags: SendSignaled, SGList: []SGE{{Addr: base + 64, Length: 2000, LKey: m.mr.LKey()}}})
			wantWC(t, b.scq, WCSuccess, WCSend)
			wantWC(t, a.rcq, WCSuccess, WCRecv)
			mustEqual(t, a.buf[30000:32000], a.buf[:2000])
			r := m.mr.Region()
			if err := m.mr.Deregister(); err != nil {
				t.Fatal(err)
			}
			if r.State() != mem.Deregistered {
				t.Fatalf("region %v after Deregister of its RegMem MR", r)
			}
		})
	}
}

// TestDmabufZeroBased: a zero-based fd MR is addressed from 0.
func TestDmabufZeroBased(t *testing.T) {
	a, b := newPair(t, pairOpts{bufSize: 1 << 14})
	fd, err := mem.Memfd("zb", 1<<14)
	if err != nil {
		t.Skip("memfd:", err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	if _, err := b.pd.RegDmabufMR(fd, 0, 1<<14, 0x1000, provAccess|AccessZeroBased); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("zero-based with iova != 0: %v", err)
	}
	mr, err := b.pd.RegDmabufMR(fd, 0, 1<<14, 0, provAccess|AccessZeroBased)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	fill(a.buf[:100], 1)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 100), RemoteAddr: 50, RKey: mr.RKey()})
	wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
	got := make([]byte, 100)
	f.ReadAt(got, 50)
	mustEqual(t, got, a.buf[:100])
}

// TestMWOnDmabuf: traffic through a type 2 window over fd memory.
func TestMWOnDmabuf(t *testing.T) {
	a, b := newPair(t, pairOpts{bufSize: 1 << 14})
	fd, err := mem.Memfd("mw", 1<<14)
	if err != nil {
		t.Skip("memfd:", err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	mr, err := b.pd.RegDmabufMR(fd, 0, 1<<14, 0x40000, provAccess|AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	mw, _ := b.pd.AllocMW(MWType2)
	key := bind2(t, b, mw, MWBindInfo{MR: mr, Addr: 0x40000 + 4096, Length: 4096, Access: AccessRemoteWrite | AccessRemoteRead | AccessZeroBased})
	fill(a.buf[:1000], 5)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 1000), RemoteAddr: 10, RKey: key})
	wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
	got := make([]byte, 1000)
	f.ReadAt(got, 4096+10)
	mustEqual(t, got, a.buf[:1000])
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 2000, 1000), RemoteAddr: 10, RKey: key})
	wantWC(t, a.scq, WCSuccess, WCRDMARead)
	mustEqual(t, a.buf[2000:3000], a.buf[:1000])
}

// TestRegMemErrors: spanning providers, no provider, and the limits.
func TestRegMemErrors(t *testing.T) {
	a1, err := mem.NewAccelerator(mem.AcceleratorOptions{Name: "gpu0", Size: 1 << 20})
	if err != nil {
		t.Skip("accelerator:", err)
	}
	defer a1.Close()
	a2, err := mem.NewAccelerator(mem.AcceleratorOptions{Name: "gpu1", Base: mem.DefaultDeviceBase + 1<<20, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	reg := mem.NewRegistry(mem.Options{})
	reg.Register(a1)
	reg.Register(a2)
	ep1, ep2 := newPipePair(t, &pairOpts{})
	defer ep2.Close()
	d, err := Open(ep1, &Config{Memory: reg, MaxMR: 3, MaxMRSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	_, err = pd.RegMem(mem.Request{Addr: mem.DefaultDeviceBase + 1<<20 - 4096, Length: 8192}, AccessLocalWrite)
	var re *mem.ResolveError
	if !errors.Is(err, mem.ErrSpansProviders) || !errors.Is(err, syscall.EINVAL) || !errors.As(err, &re) {
		t.Fatalf("MR over two providers: %v", err)
	}
	t.Log(err)
	if _, err := pd.RegMem(mem.Request{Addr: 0x1000, Length: 4096}, AccessLocalWrite); !errors.Is(err, mem.ErrNoProvider) || !errors.Is(err, syscall.EFAULT) {
		t.Fatalf("MR nobody owns: %v", err)
	}
	if _, err := pd.RegMR(make([]byte, 1<<16+1), AccessLocalWrite); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("MR above MaxMRSize: %v", err)
	}
	if _, err := pd.RegMem(mem.Request{Addr: mem.DefaultDeviceBase, Length: 1<<16 + 1}, AccessLocalWrite); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("provider MR above MaxMRSize: %v", err)
	}
	if at := d.QueryDevice(); at.MaxMR != 3 || at.MaxMRSize != 1<<16 {
		t.Fatalf("QueryDevice MaxMR %d MaxMRSize %d", at.MaxMR, at.MaxMRSize)
	}
	var mrs []*MR
	for range 3 {
		mr, err := pd.RegMR(make([]byte, 64), AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		mrs = append(mrs, mr)
	}
	if _, err := pd.RegMR(make([]byte, 64), AccessLocalWrite); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("MR beyond MaxMR: %v", err)
	}
	mrs[0].Deregister()
	if _, err := pd.RegMR(make([]byte, 64), AccessLocalWrite); err != nil {
		t.Fatalf("MR after a deregistration: %v", err)
	}
	// Write access to read-only provider memory is refused.
	dev, _ := a1.Alloc(4096)
	r, err := reg.RegisterMemory(mem.Request{Addr: dev, Length: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Deregister()
	if _, err := pd.RegRegion(r, AccessLocalWrite|AccessRemoteWrite); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("write MR on a read-only region: %v", err)
	}
}

// TestReregProviderMR: rereg of access and PD keeps provider memory;
// rereg of the translation moves the MR to plain memory and releases the region.
func TestReregProviderMR(t *testing.T) {
	a, b := newPair(t, pairOpts{bufSize: 1 << 16})
	m := newBacking(t, b, "fd")
	r := m.mr.Region()
	old := m.mr.RKey()
	if err := m.mr.Rereg(ReregChangeAccess, nil, nil, AccessLocalWrite|AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	if m.mr.Region() != r {
		t.Fatalf("rereg of access moved the MR off its provider region")
	}
	if m.mr.RKey() == old || m.mr.RKey()>>8 != old>>8 {
		t.Fatalf("rereg key %#x from %#x", m.mr.RKey(), old)
	}
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 8), RemoteAddr: m.mr.Addr(), RKey: m.mr.RKey()})
	wantWC(t, a.scq, WCRemAccessErr, WCRDMAWrite) // no REMOTE_WRITE any more

	a, b = newPair(t, pairOpts{bufSize: 1 << 16})
	m = newBacking(t, b, "fd")
	r = m.mr.Region()
	plain := make([]byte, 4096)
	if err := m.mr.Rereg(ReregChangeTranslation, nil, plain, 0); err != nil {
		t.Fatal(err)
	}
	if m.mr.Region() != nil || r.State() != mem.Deregistered {
		t.Fatalf("after translation rereg: region %v", r)
	}
	fill(a.buf[:100], 3)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 100), RemoteAddr: m.mr.Addr() + 10, RKey: m.mr.RKey()})
	wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
	mustEqual(t, plain[10:110], a.buf[:100])
}

// TestInvalidationDuringWrites: the provider revokes accelerator memory in
// the middle of a stream of RDMA WRITEs. The writer gets REM_ACCESS_ERR,
// nothing touches the memory after the revocation returns (a canary
// written then stays intact), and the MR's owner gets EventMRInvalidated.
func TestInvalidationDuringWrites(t *testing.T) {
	a, b := newPair(t, pairOpts{bufSize: 1 << 16, wr: 64})
	acc, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 20})
	if err != nil {
		t.Skip("accelerator:", err)
	}
	defer acc.Close()
	if err := b.dev.MemoryRegistry().Register(acc); err != nil {
		t.Fatal(err)
	}
	dev, _ := acc.Alloc(provLen)
	mr, err := b.pd.RegMem(mem.Request{Addr: dev, Length: provLen}, provAccess)
	if err != nil {
		t.Fatal(err)
	}
	fill(a.buf[:4096], 7)

	var (
		mu       sync.Mutex
		ok       int
		firstErr WC
	)
	done := make(chan struct{})
	go func() { // the writer: keeps 8 writes in flight until one fails
		defer close(done)
		deadline := time.Now().Add(10 * time.Second)
		inflight, id := 0, uint64(0)
		wcs := make([]WC, 16)
		for time.Now().Before(deadline) {
			for inflight < 8 {
				id++
				wr := []SendWR{{WRID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 4096),
					RemoteAddr: dev + (id%15)*4096, RKey: mr.RKey()}}
				if _, err := a.qp.PostSend(wr); err != nil {
					t.Error(err)
					return
				}
				inflight++
			}
			n := a.scq.Poll(wcs)
			for _, wc := range wcs[:n] {
				inflight--
				mu.Lock()
				if wc.Status == WCSuccess {
					ok++
				} else if firstErr.Status == WCSuccess {
					firstErr = wc
				}
				stop := firstErr.Status != WCSuccess
				mu.Unlock()
				if stop {
					return
				}
			}
			if n == 0 {
				time.Sleep(20 * time.Microsecond)
			}
		}
		t.Error("writer never saw an error completion")
	}()
	// Let the stream run, then revoke.
	for start := time.Now(); ; {
		mu.Lock()
		n := ok
		mu.Unlock()
		if n >= 50 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("only %d writes completed", n)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if err := acc.Revoke(dev); err != nil {
		t.Fatal(err)
	}
	canary := bytes.Repeat([]byte{0xEE}, provLen)
	if err := acc.CopyToDevice(dev, canary); err != nil {
		t.Fatal(err)
	}
	<-done
	if firstErr.Status != WCRemAccessErr || firstErr.Opcode != WCRDMAWrite {
		t.Fatalf("writer's first error %+v, want REM_ACCESS_ERR", firstErr)
	}
	time.Sleep(10 * time.Millisecond) // any straggler would land now
	got := make([]byte, provLen)
	acc.CopyFromDevice(got, dev)
	if !bytes.Equal(got, canary) {
		t.Fatal("revoked memory was written after the revocation returned")
	}
	timeout := time.After(5 * time.Second)
	for got := false; !got; {
		select {
		case ev := <-b.dev.AsyncEvents():
			if ev.Type == EventMRInvalidated {
				if ev.MR != mr {
					t.Fatalf("EventMRInvalidated for %p, want %p", ev.MR, mr)
				}
				got = true
			}
		case <-timeout:
			t.Fatal("no EventMRInvalidated")
		}
	}
	if mr.Valid() {
		t.Fatal("MR valid after revocation")
	}
	// Local use of the revoked MR fails at post time.
	if _, err := b.qp.PostSend([]SendWR{{Opcode: WRSend, SGList: []SGE{{Addr: dev, Length: 8, LKey: mr.LKey()}}}}); err == nil {
		t.Fatal("posting a revoked MR's SGE succeeded")
	}
	t.Logf("%d writes completed before the revocation", ok)
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
}

// TestBaseOnlyAndCapableProviders: a provider seen only through the base
// contract and one with the optional capabilities (context private data,
// version) both register and carry RDMA through the device.
func TestBaseOnlyAndCapableProviders(t *testing.T) {
	a, b := newPair(t, pairOpts{bufSize: 1 << 16})
	full, err := mem.NewAccelerator(mem.AcceleratorOptions{Name: "gpu-full", Size: 1 << 20})
	if err != nil {
		t.Skip("accelerator:", err)
	}
	defer full.Close()
	inner, err := mem.NewAccelerator(mem.AcceleratorOptions{Name: "gpu-base", Base: mem.DefaultDeviceBase + 1<<24, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	base := memtest.BaseOnly(inner)
	if _, ok := base.(mem.ContextProvider); ok {
		t.Fatal("BaseOnly kept the optional capability")
	}
	reg := b.dev.MemoryRegistry()
	for _, p := range []mem.Provider{base, full} {
		if err := reg.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	pc := reg.OpenContext(42)
	defer pc.Close()
	for _, acc := range []*mem.Accelerator{inner, full} {
		dev, err := acc.Alloc(8192)
		if err != nil {
			t.Fatal(err)
		}
		mr, err := b.pd.RegMem(mem.Request{Addr: dev, Length: 8192, PeerContext: pc}, provAccess)
		if err != nil {
			t.Fatal(err)
		}
		if mr.Region().Provider() != acc.Name() {
			t.Fatalf("device memory of %s taken by %s", acc.Name(), mr.Region().Provider())
		}
		fill(a.buf[:3000], 11)
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 3000), RemoteAddr: dev + 8, RKey: mr.RKey()})
		wantWC(t, a.scq, WCSuccess, WCRDMAWrite)
		got := make([]byte, 3000)
		acc.CopyFromDevice(got, dev+8)
		mustEqual(t, got, a.buf[:3000])
		post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 4000, 3000), RemoteAddr: dev + 8, RKey: mr.RKey()})
		wantWC(t, a.scq, WCSuccess, WCRDMARead)
		mustEqual(t, a.buf[4000:7000], got)
		if err := acc.Revoke(dev); err != nil {
			t.Fatal(err)
		}
		if mr.Valid() {
			t.Fatalf("%s: MR valid after the provider revoked its memory", acc.Name())
		}
		if err := mr.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProviderMemoryAllocs: RDMA WRITE and READ on provider memory (inside
// the region's guard) do not allocate in steady state.
func TestProviderMemoryAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts need a run without -race or -short")
	}
	a, b := newPair(t, pairOpts{bufSize: 1 << 16})
	m := newBacking(t, b, "accel")
	wcs := make([]WC, 1)
	wr := []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 16384), RemoteAddr: m.mr.Addr(), RKey: m.mr.RKey()}}
	rd := []SendWR{{Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 16384), RemoteAddr: m.mr.Addr(), RKey: m.mr.RKey()}}
	run := func() {
		for _, w := range [][]SendWR{wr, rd} {
			if _, err := a.qp.PostSend(w); err != nil {
				t.Fatal(err)
			}
			for a.scq.Poll(wcs) == 0 {
				runtime.Gosched()
			}
			if wcs[0].Status != WCSuccess {
				t.Fatalf("%+v", wcs[0])
			}
		}
	}
	for range 10 {
		run()
	}
	if n := allocsPerRun(50, run); n != 0 {
		t.Errorf("%.2f allocations per WRITE+READ on accelerator memory, want 0", n)
	}
}

// TestCloseReleasesProviderMemory: closing a device releases the provider
// regions of RegMem MRs left registered (here: the fd provider's duplicate
// descriptors and mappings).
func TestCloseReleasesProviderMemory(t *testing.T) {
	fd, err := mem.Memfd("close", 1<<16)
	if err != nil {
		t.Skip("memfd:", err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	before := memtest.OpenFDs()
	ea, eb := newPipePair(t, &pairOpts{})
	defer eb.Close()
	d, err := Open(ea, nil)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := d.AllocPD()
	mr, err := pd.RegDmabufMR(fd, 0, 1<<16, 0, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	r := mr.Region()
	if memtest.OpenFDs() <= before {
		t.Fatal("the fd provider holds no duplicate descriptor")
	}
	d.Close()
	if r.State() != mem.Deregistered || mr.Valid() {
		t.Fatalf("after Close: region %v, MR valid %v", r, mr.Valid())
	}
	if n := memtest.OpenFDs(); n != before {
		t.Fatalf("%d open descriptors after Close, %d before", n, before)
	}
	if err := mr.Deregister(); err != nil {
		t.Fatalf("Deregister after Close: %v", err)
	}
}
