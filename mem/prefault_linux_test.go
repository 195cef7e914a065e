package mem

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pageState reads /proc/self/pagemap for each page of b: present, and
// mapped by this process alone (a page of its own, not the shared zero
// page a read fault maps).
func pageState(t *testing.T, b []byte) (present, own int) {
	t.Helper()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Skipf("no pagemap: %v", err)
	}
	defer f.Close()
	ps := uintptr(os.Getpagesize())
	var e [8]byte
	for p := uintptr(unsafe.Pointer(&b[0])); p < uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b)); p += ps {
		if _, err := f.ReadAt(e[:], int64(p/ps*8)); err != nil {
			t.Fatal(err)
		}
		v := binary.LittleEndian.Uint64(e[:])
		if v&(1<<63) != 0 {
			present++
		}
		if v&(1<<56) != 0 {
			own++
		}
	}
	return present, own
}

// readFaultOwn reports whether a plain read of an untouched private
// anonymous page maps a page of the process's own. Most kernels map the
// shared zero page; some (a kernel that forbids the zero page) a new page.
func readFaultOwn(t *testing.T) bool {
	t.Helper()
	m, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	readSink += m[0]
	p, own := pageState(t, m)
	if p != 1 {
		t.Fatalf("a read fault left %d pages present", p)
	}
	return own == 1
}

// readSink keeps readFaultOwn's read from being dropped.
var readSink byte

func TestPrefault(t *testing.T) {
	const pages = 64
	ps := os.Getpagesize()
	// A read populate maps what a read fault maps.
	readOwn := 0
	if readFaultOwn(t) {
		readOwn = pages
		t.Log("this kernel maps a page of the process's own on a read fault, not the zero page")
	}
	for _, tc := range []struct {
		name        string
		mlock       bool // the path for kernels without MADV_POPULATE_*
		lockPages   int  // >0: RLIMIT_MEMLOCK's soft limit in pages, for the mlock path
		write       bool
		lo, hi      int // the slice of the mapping handed over
		wantPresent int
		wantOwn     int
	}{
		{"populate-write", false, 0, true, 0, pages * ps, pages, pages},
		{"populate-read", false, 0, false, 0, pages * ps, pages, readOwn},
		{"populate-unaligned", false, 0, true, 100, 9*ps + 1, 10, 10},
		{"mlock-write", true, 0, true, 0, pages * ps, pages, pages},
		{"mlock-in-pieces", true, 3, true, 0, pages * ps, pages, pages},
		{"mlock-unaligned", true, 0, true, ps - 1, 2*ps + 1, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mlock {
				noPopulate.Store(true)
				defer noPopulate.Store(false)
			}
			if tc.lockPages > 0 {
				var old unix.Rlimit
				if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &old); err != nil {
					t.Fatal(err)
				}
				lim := old
				lim.Cur = uint64(tc.lockPages * ps)
				if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
					t.Fatal(err)
				}
				defer unix.Setrlimit(unix.RLIMIT_MEMLOCK, &old)
			}
			m, err := unix.Mmap(-1, 0, pages*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(m)
			_ = unix.Madvise(m, unix.MADV_NOHUGEPAGE) // count 4 KiB pages, whatever THP's setting
			if p, _ := pageState(t, m); p != 0 {
				t.Fatalf("%d pages present before the prefault", p)
			}
			if err := Prefault(m[tc.lo:tc.hi], tc.write); err != nil {
				t.Fatal(err)
			}
			p, own := pageState(t, m)
			if p != tc.wantPresent || own != tc.wantOwn {
				t.Fatalf("after Prefault: %d pages present, %d of them the process's own; want %d and %d",
					p, own, tc.wantPresent, tc.wantOwn)
			}
		})
	}
}

func TestPrefaultKeepsBytes(t *testing.T) {
	for _, mlock := range []bool{false, true} {
		noPopulate.Store(mlock)
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = byte(i * 7)
		}
		if err := Prefault(b[3:], true); err != nil {
			t.Fatal(err)
		}
		for i := range b {
			if b[i] != byte(i*7) {
				t.Fatalf("mlock %v: byte %d changed", mlock, i)
			}
		}
	}
	noPopulate.Store(false)
	if err := Prefault(nil, true); err != nil {
		t.Fatal(err)
	}
}
