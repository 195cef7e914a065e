package verbs

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/softroce/softroce/link/pipe"
	"golang.org/x/sys/unix"
)

// TestRegMRPrefaults: registering memory faults its pages in, as
// ibv_reg_mr's pinning does, so the receive loop's first touch of them
// costs no page fault (mem.Prefault; its tests check the write/read kind).
// So does Rereg with a new buffer.
func TestRegMRPrefaults(t *testing.T) {
	const pages = 32
	ps := os.Getpagesize()
	fresh := func() []byte {
		m, err := unix.Mmap(-1, 0, pages*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(m) })
		_ = unix.Madvise(m, unix.MADV_NOHUGEPAGE)
		return m
	}
	resident := func(b []byte) int {
		vec := make([]byte, pages)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	_, b := newPair(t, pairOpts{})
	for _, acc := range []Access{AccessLocalWrite | AccessRemoteWrite, AccessRemoteRead, 0} {
		buf := fresh()
		if n := resident(buf); n != 0 {
			t.Fatalf("%d pages resident before RegMR", n)
		}
		mr, err := b.pd.RegMR(buf, acc)
		if err != nil {
			t.Fatal(err)
		}
		if n := resident(buf); n != pages {
			t.Errorf("access %v: %d of %d pages resident after RegMR", acc, n, pages)
		}
		next := fresh()
		if err := mr.Rereg(ReregChangeTranslation, nil, next, 0); err != nil {
			t.Fatal(err)
		}
		if n := resident(next); n != pages {
			t.Errorf("access %v: %d of %d pages resident after Rereg", acc, n, pages)
		}
		if err := mr.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRegMRPrefaultFailsSoftly: memory the kernel will not fault in for
// writing (here a read-only mapping registered with LOCAL_WRITE, which
// verbs do not check against the mapping) still registers: the prefault is
// best effort, and why it failed goes to the device's logger at debug level.
func TestRegMRPrefaultFailsSoftly(t *testing.T) {
	ro, err := unix.Mmap(-1, 0, 4*os.Getpagesize(), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(ro)
	a, b, err := pipe.New(pipe.Config{MTU: 9000}, pipe.Config{MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var out strings.Builder
	d, err := Open(a, &Config{Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(ro, AccessLocalWrite)
	if err != nil {
		t.Fatalf("RegMR of memory that cannot be faulted in for writing: %v, want it registered", err)
	}
	defer mr.Deregister()
	if !strings.Contains(out.String(), "reg mr: pages not faulted in") {
		t.Errorf("no debug line for the failed prefault:\n%s", out.String())
	}
}
