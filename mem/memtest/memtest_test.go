//go:build linux

package memtest_test

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/mem/memtest"
)

func TestCounters(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	n := memtest.OpenFDs()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if got := memtest.OpenFDs(); got != n+1 {
		t.Fatalf("OpenFDs %d after opening one, was %d", got, n)
	}
	f.Close()
	id, err := mem.CreateShm(0, 4096, 0o600)
	if err != nil {
		t.Skipf("SysV shm unavailable: %v", err)
	}
	defer mem.RemoveShm(id)
	if memtest.ShmSegments() < 1 {
		t.Fatal("ShmSegments does not see the new segment")
	}
	if a := memtest.Attached(id); a != 0 {
		t.Fatalf("Attached %d", a)
	}
	b, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a := memtest.Attached(id); a != 1 {
		t.Fatalf("Attached %d", a)
	}
	unix.SysvShmDetach(b)
}

func TestBaseOnlyHidesCapabilities(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("accelerator needs Linux")
	}
	a, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if c := mem.CapabilitiesOf(memtest.BaseOnly(a)); c != 0 {
		t.Fatalf("BaseOnly caps %v", c)
	}
	r := memtest.Renamed(a, "other")
	if r.Name() != "other" || mem.CapabilitiesOf(r) != 0 {
		t.Fatalf("Renamed %q caps %v", r.Name(), mem.CapabilitiesOf(r))
	}
}
