package dada

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestDetachKeepsForeignMappings attaches and detaches a contiguous ring
// over and over while other goroutines map and unmap memory: detaching must
// remove only this ring's own mappings. Every foreign mapping must still be
// there, with its content, afterwards.
func TestDetachKeepsForeignMappings(t *testing.T) {
	needIPC(t)
	const bufsz = 64 * 1024
	h := newHDU(t, Config{NBufs: 16, BufSize: bufsz})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(4, runtime.GOMAXPROCS(0))))
	type mapping struct {
		b    []byte
		mark byte
	}
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
		mu   sync.Mutex
		maps []mapping
	)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var own []mapping
			for i := 0; !stop.Load(); i++ {
				n := (1 + i%16) * 4096
				b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
				if err != nil {
					t.Error(err)
					return
				}
				m := mapping{b, byte(g*16 + i%16 + 1)}
				b[0], b[n-1] = m.mark, m.mark
				own = append(own, m)
				if len(own) > 512 {
					// keep the address space churning: give back the oldest
					unix.Munmap(own[0].b)
					own = own[1:]
				}
			}
			mu.Lock()
			maps = append(maps, own...)
			mu.Unlock()
		}()
	}
	deadline := time.Now().Add(3 * time.Second)
	iters := 0
	for ; iters < 300 && time.Now().Before(deadline); iters++ {
		c, err := Connect(h.Key(), AttachOptions{Layout: LayoutContiguous})
		if err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
		if err := c.Detach(); err != nil {
			t.Error(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	lost := 0
	vec := make([]byte, 16)
	for _, m := range maps {
		// mincore fails with ENOMEM on an address that is not mapped
		_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m.b[0])), uintptr(len(m.b)), uintptr(unsafe.Pointer(&vec[0])))
		if e != 0 || m.b[0] != m.mark || m.b[len(m.b)-1] != m.mark {
			lost++
			continue
		}
		unix.Munmap(m.b)
	}
	t.Logf("%d attach/detach cycles, %d foreign mappings checked", iters, len(maps))
	if lost > 0 {
		t.Fatalf("detaching the ring destroyed %d of %d mappings made by other goroutines", lost, len(maps))
	}
	// nothing of ours is left attached
	found := false
	for _, o := range ipcWith(t, h.Key()) {
		if o.Key == int32(h.Key().BlockKey(0)) {
			found = true
			if o.Nattch != 1 {
				t.Fatalf("block 0 has %d attachments after the cycles, want 1 (the creator's)", o.Nattch)
			}
		}
	}
	if !found {
		t.Fatal("block 0's segment not found")
	}
}
