//go:build linux && (amd64 || arm64 || riscv64 || ppc64le || loong64 || s390x || mips64 || mips64le || ppc64)

package sysv

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creates system-wide SysV objects; run as root (CI does)")
	}
}

func key() int32 { return int32(rand.Uint32N(0x3000)+0x4000)<<16 | int32(rand.Uint32N(0xffff)) }

func TestSemaphores(t *testing.T) {
	needRoot(t)
	id, err := SemGet(key(), 2, Perm|IPCCreat|IPCExcl)
	if err != nil {
		t.Fatal(err)
	}
	defer SemRemove(id)
	ctx := context.Background()
	if err := SemOp(ctx, id, []Sembuf{{Num: 1, Op: 3}}, 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := SemGetVal(id, 1); v != 3 {
		t.Fatalf("GETVAL = %d", v)
	}
	if pid, _ := SemGetPid(id, 1); pid != os.Getpid() {
		t.Fatalf("GETPID = %d", pid)
	}
	// would block: IPC_NOWAIT gives EAGAIN, a context deadline ends the wait
	if err := SemOp(ctx, id, []Sembuf{{Num: 0, Op: -1, Flg: IPCNoWait}}, 0); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("NOWAIT: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 80*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := SemOp(cctx, id, []Sembuf{{Num: 0, Op: -1}}, 20*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocking op: %v", err)
	}
	if d := time.Since(start); d < 80*time.Millisecond || d > time.Second {
		t.Fatalf("waited %v", d)
	}
	if err := SemSetVal(id, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := SemOp(ctx, id, []Sembuf{{Num: 0, Op: -1, Flg: SemUndo}}, 0); err != nil {
		t.Fatal(err)
	}
	objs, err := ListSem()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range objs {
		if o.ID == id && o.Size == 2 {
			found = true
		}
	}
	if !found {
		t.Fatalf("set %d not in /proc/sysvipc/sem", id)
	}
	SemRemove(id)
	if err := SemOp(ctx, id, []Sembuf{{Num: 0, Op: 1}}, 0); err == nil {
		t.Fatal("operation on a removed set succeeded")
	}
}

func TestReserveAndRemap(t *testing.T) {
	needRoot(t)
	ps := uintptr(PageSize())
	var ids []int
	for range 3 {
		id, err := ShmGet(key(), uint64(2*ps), Perm|IPCCreat|IPCExcl)
		if err != nil {
			t.Fatal(err)
		}
		defer ShmRemove(id)
		ids = append(ids, id)
	}
	base, err := Reserve(6 * ps)
	if err != nil {
		t.Fatal(err)
	}
	defer Release(base, 6*ps)
	for i, id := range ids {
		addr := uintptr(base) + uintptr(i)*2*ps
		b, err := ShmAttach(id, addr, ShmRemap)
		if err != nil {
			t.Fatal(err)
		}
		if uintptr(unsafe.Pointer(&b[0])) != addr || len(b) != int(2*ps) {
			t.Fatalf("segment %d at %p len %d, want %#x", i, &b[0], len(b), addr)
		}
		b[0] = byte(i + 1)
		defer ShmDetach(b)
	}
	whole := unsafe.Slice((*byte)(base), 6*ps)
	for i := range ids {
		if whole[uintptr(i)*2*ps] != byte(i+1) {
			t.Fatalf("byte of segment %d not visible through the reservation", i)
		}
	}
	if sz, err := ShmSize(ids[0]); err != nil || sz != uint64(2*ps) {
		t.Fatalf("ShmSize = %d, %v", sz, err)
	}
	if _, err := ReadLimits(); err != nil {
		t.Fatal(err)
	}
}

func TestSemOpAllocs(t *testing.T) {
	needRoot(t)
	id, err := SemGet(key(), 1, Perm|IPCCreat|IPCExcl)
	if err != nil {
		t.Fatal(err)
	}
	defer SemRemove(id)
	ops := []Sembuf{{Op: 1}}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { SemOp(ctx, id, ops, 0) }); n != 0 {
		t.Fatalf("SemOp allocates %v times", n)
	}
}
