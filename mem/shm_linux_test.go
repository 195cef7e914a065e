package mem_test

import (
	"errors"
	"runtime/debug"
	"syscall"
	"testing"

	"github.com/softroce/softroce/mem"
)

// TestShmAttachMode: the Shm provider attaches a segment read-only unless
// the request writes (a store through a read-only attachment faults), and
// says which call failed on which segment.
func TestShmAttachMode(t *testing.T) {
	const n = 4096
	id, err := mem.CreateShm(0, n, 0o600)
	if err != nil {
		t.Skipf("cannot create a SysV shm segment (%v); needs SysV IPC", err)
	}
	t.Cleanup(func() { mem.RemoveShm(id) })
	s := mem.NewShm("")
	for _, write := range []bool{false, true} {
		cc, err := s.Acquire(mem.Request{Length: n, Write: write, Desc: mem.ShmByID(id, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.GetPages(cc, write, mem.CoreContext{}); err != nil {
			t.Fatal(err)
		}
		b, err := s.Map(cc)
		if err != nil {
			t.Fatal(err)
		}
		faulted := func() (faulted bool) {
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			defer func() { faulted = recover() != nil }()
			b[0] = 1
			return false
		}()
		s.PutPages(cc)
		s.Release(cc)
		if faulted == write {
			t.Errorf("write %v: a store faulted: %v, want %v", write, faulted, !write)
		}
	}
	_, err = s.Acquire(mem.Request{Length: n, Desc: mem.ShmByKey(0x7fff_fff0, 0)})
	if !errors.Is(err, syscall.ENOENT) || err.Error() != "mem: shmget key 0x7ffffff0: no such file or directory" {
		t.Errorf("unknown key: %v, want ENOENT from shmget, naming the key", err)
	}
}
