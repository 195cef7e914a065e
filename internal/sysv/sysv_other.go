//go:build !(linux && (amd64 || arm64 || riscv64 || ppc64le || loong64 || s390x || mips64 || mips64le || ppc64))

package sysv

import (
	"context"
	"time"
	"unsafe"
)

// DefaultSlice is how long one semtimedop call may block before the context
// is checked again.
const DefaultSlice = 50 * time.Millisecond

// SemGet is not supported on this system.
func SemGet(key int32, nsems, flag int) (int, error) { return -1, ErrUnsupported }

// SemOp is not supported on this system.
func SemOp(ctx context.Context, id int, ops []Sembuf, slice time.Duration) error {
	return ErrUnsupported
}

// SemGetVal is not supported on this system.
func SemGetVal(id, num int) (int, error) { return -1, ErrUnsupported }

// SemSetVal is not supported on this system.
func SemSetVal(id, num, val int) error { return ErrUnsupported }

// SemGetPid is not supported on this system.
func SemGetPid(id, num int) (int, error) { return -1, ErrUnsupported }

// SemRemove is not supported on this system.
func SemRemove(id int) error { return ErrUnsupported }

// PageSize returns 4096 on this system.
func PageSize() int { return 4096 }

// Reserve is not supported on this system.
func Reserve(size uintptr) (unsafe.Pointer, error) { return nil, ErrUnsupported }

// Unattach is not supported on this system.
func Unattach(b []byte) error { return ErrUnsupported }

// Release is not supported on this system.
func Release(addr unsafe.Pointer, size uintptr) error { return ErrUnsupported }

// ListShm is not supported on this system.
func ListShm() ([]Object, error) { return nil, ErrUnsupported }

// ListSem is not supported on this system.
func ListSem() ([]Object, error) { return nil, ErrUnsupported }

// Limits are the kernel's System V shared memory limits.
type Limits struct {
	ShmMax   uint64 // kernel.shmmax: largest segment, bytes
	ShmAll   uint64 // kernel.shmall: all segments together, pages
	ShmMni   uint64 // kernel.shmmni: number of segments
	SemMni   uint64 // fourth field of kernel.sem: number of semaphore sets
	MemAvail uint64 // MemAvailable from /proc/meminfo, bytes (0 if unknown)
}

// ReadLimits is not supported on this system.
func ReadLimits() (Limits, error) { return Limits{}, ErrUnsupported }
