//go:build linux

package mem_test

import (
	"errors"
	"testing"

	"github.com/softroce/softroce/mem"
)

func TestAcceleratorAllocator(t *testing.T) {
	a, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 4 * mem.DevicePageSize, Base: 0x100000000})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Base() != 0x100000000 || a.Size() != 4*mem.DevicePageSize {
		t.Fatalf("base %#x size %d", a.Base(), a.Size())
	}
	var addrs []uint64
	for i := 0; i < 4; i++ {
		d, err := a.Alloc(1) // rounds up to one device page
		if err != nil {
			t.Fatal(err)
		}
		if want := a.Base() + uint64(i)*mem.DevicePageSize; d != want {
			t.Fatalf("alloc %d at %#x, want %#x", i, d, want)
		}
		addrs = append(addrs, d)
	}
	if _, err := a.Alloc(1); !errors.Is(err, mem.ErrDeviceFull) {
		t.Fatalf("full device: %v", err)
	}
	if err := a.Free(addrs[1]); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(addrs[1]); !errors.Is(err, mem.ErrBadAddress) {
		t.Fatalf("double free: %v", err)
	}
	if d, err := a.Alloc(100); err != nil || d != addrs[1] {
		t.Fatalf("hole not reused: %#x, %v", d, err)
	}
	if _, err := a.Alloc(0); !errors.Is(err, mem.ErrZeroLength) {
		t.Fatalf("Alloc(0): %v", err)
	}
	// Copies stay inside one allocation of the requested size.
	if err := a.CopyToDevice(addrs[2], make([]byte, 2)); !errors.Is(err, mem.ErrOutOfBounds) {
		t.Fatalf("copy past a 1-byte allocation: %v", err)
	}
	if err := a.CopyToDevice(0x1000, []byte{1}); !errors.Is(err, mem.ErrBadAddress) {
		t.Fatalf("copy to a host address: %v", err)
	}
	if err := a.Revoke(0x42); !errors.Is(err, mem.ErrBadAddress) {
		t.Fatalf("revoke a host address: %v", err)
	}
	// Requests crossing the device's edge are partial, outside are not mine.
	g := mem.NewRegistry(mem.Options{})
	g.Register(a)
	var re *mem.ResolveError
	if _, err := g.Resolve(mem.Request{Addr: a.Base() - 8, Length: 16}); !errors.As(err, &re) || re.Declines[0].Reason != mem.Partial {
		t.Fatalf("edge: %v", err)
	}
	if _, err := g.Resolve(mem.Request{Addr: 0x1000, Length: 16, Desc: mem.Bytes(make([]byte, 16))}); !errors.As(err, &re) || re.Declines[0].Reason != mem.NotMine {
		t.Fatalf("host slice: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(1); !errors.Is(err, mem.ErrClosed) {
		t.Fatalf("Alloc after Close: %v", err)
	}
	if _, err := g.Resolve(mem.Request{Addr: a.Base(), Length: 16}); !errors.As(err, &re) || re.Declines[0].Reason != mem.Unavailable {
		t.Fatalf("closed: %v", err)
	}
}
