package pipeline

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// needIPC skips tests that create System V rings unless running as root on Linux.
func needIPC(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("PSRDADA rings need Linux System V IPC")
	}
	if os.Geteuid() != 0 {
		t.Skip("creates system-wide System V shared memory and semaphores; run as root (CI does)")
	}
}

// randomKey returns a key with no ring at it (random low bits, so that
// parallel tests and other programs do not collide).
func randomKey(t testing.TB) dada.Key {
	t.Helper()
	for range 100 {
		k := dada.Key(int32(rand.Uint32N(0x3000)+0x1000)<<16 | int32(rand.Uint32N(0xfff0)+1))
		if _, err := dada.Connect(k, dada.AttachOptions{}); errors.Is(err, dada.ErrNotFound) {
			if _, err := dada.Connect(k+1, dada.AttachOptions{}); errors.Is(err, dada.ErrNotFound) {
				return k
			}
		}
	}
	t.Fatal("no free random key")
	return 0
}

// newRing creates a ring at a random key, destroyed (and checked for
// leftovers) when the test ends.
func newRing(t testing.TB, nbufs int, bufsz uint64, layout dada.Layout) *dada.HDU {
	t.Helper()
	needIPC(t)
	k := randomKey(t)
	h, err := dada.Create(dada.Config{Key: k, NBufs: nbufs, BufSize: bufsz, AttachOptions: dada.AttachOptions{Layout: layout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Destroy()
		if left := leftovers(k); left != "" {
			t.Errorf("ring %s left System V objects behind:\n%s", k.Short(), left)
		}
	})
	return h
}

// leftovers lists /proc/sysvipc lines of objects with k's or k+1's low 16 bits.
func leftovers(k dada.Key) string {
	var out []string
	for _, f := range []string{"/proc/sysvipc/shm", "/proc/sysvipc/sem"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) == 0 {
				continue
			}
			v, err := strconv.ParseInt(fs[0], 10, 64)
			if err != nil {
				continue
			}
			if lo := uint32(v) & 0xffff; lo == uint32(k)&0xffff || lo == uint32(k+1)&0xffff {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n")
}

// rcPair connects two RC QPs on two devices joined by a pipe.
func rcPair(t testing.TB) (a, b *rcGroup) {
	t.Helper()
	da, db, err := verbs.OpenPipe(pipe.Config{MTU: 9000}, pipe.Config{MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	mk := func(d *verbs.Device) *rcGroup {
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		c, err := newRCGroup(pd, 1, 16, 16)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.close)
		return c
	}
	a, b = mk(da), mk(db)
	ia, err := a.infos()
	if err != nil {
		t.Fatal(err)
	}
	ib, err := b.infos()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.connect(ib); err != nil {
		t.Fatal(err)
	}
	if err := b.connect(ia); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*1e9)
	t.Cleanup(cancel)
	return ctx
}
