package dada

import (
	"context"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/sysv"
)

// needIPC skips tests that create System V objects unless running as root
// on Linux.
func needIPC(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("System V ring tests need Linux")
	}
	if os.Geteuid() != 0 {
		t.Skip("System V ring tests create system-wide shared memory and semaphores; run as root (CI does)")
	}
	if _, err := sysv.ListShm(); err != nil {
		t.Skipf("cannot read /proc/sysvipc: %v", err)
	}
}

// randomKey returns a key whose data and header key sets are free. The low
// 16 bits are random so that other tests and programs do not collide.
func randomKey(t testing.TB) Key {
	t.Helper()
	for range 100 {
		k := Key(int32(rand.Uint32N(0x3000)+0x1000)<<16 | int32(rand.Uint32N(0xfff0)+1))
		if checkKeysFree(k, ringConfig{nbufs: 64, bufsz: 1, nreaders: MaxReaders}) == nil &&
			checkKeysFree(k+1, ringConfig{nbufs: Xfers, bufsz: 1, nreaders: MaxReaders, header: true}) == nil {
			return k
		}
	}
	t.Fatal("no free random key")
	return 0
}

// ipcWith lists the shm and sem objects whose key has the low 16 bits of k
// or k+1 (every object of the rings at k).
func ipcWith(t testing.TB, k Key) []sysv.Object {
	t.Helper()
	var out []sysv.Object
	shm, err := sysv.ListShm()
	if err != nil {
		t.Fatal(err)
	}
	sem, err := sysv.ListSem()
	if err != nil {
		t.Fatal(err)
	}
	lo := func(x Key) uint32 { return uint32(x) & 0xffff }
	for _, o := range append(shm, sem...) {
		if l := lo(Key(o.Key)); l == lo(k) || l == lo(k+1) {
			out = append(out, o)
		}
	}
	return out
}

// noStrays registers a cleanup that fails the test if any IPC object of the
// rings at k is left, and removes them.
func noStrays(t *testing.T, k Key) {
	t.Helper()
	t.Cleanup(func() {
		if left := ipcWith(t, k); len(left) > 0 {
			t.Errorf("stray IPC objects for key %s: %v", k.Short(), left)
			Destroy(k)
			for _, o := range ipcWith(t, k) {
				sysv.ShmRemove(o.ID)
				sysv.SemRemove(o.ID)
			}
		}
	})
}

// newHDU creates a ring at a random key that is destroyed at the end of the
// test, and checks that nothing is left behind.
func newHDU(t *testing.T, cfg Config) *HDU {
	t.Helper()
	needIPC(t)
	if cfg.Key == 0 {
		cfg.Key = randomKey(t)
	}
	noStrays(t, cfg.Key)
	h, err := Create(cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { h.Destroy() })
	return h
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testHeader(t testing.TB) *Header {
	b, err := os.ReadFile("testdata/header.dada")
	if err != nil {
		t.Fatal(err)
	}
	return ParseHeader(b)
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed + byte(i>>11)
	}
	return b
}
