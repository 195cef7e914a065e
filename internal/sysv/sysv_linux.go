//go:build linux && (amd64 || arm64 || riscv64 || ppc64le || loong64 || s390x || mips64 || mips64le || ppc64)

package sysv

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// semctl commands.
const (
	ipcRMID = 0
	getPID  = 11
	getVal  = 12
	setVal  = 16
)

// DefaultSlice is how long one semtimedop call may block before the context
// is checked again.
const DefaultSlice = 50 * time.Millisecond

// SemGet returns the id of the semaphore set with key, creating it with
// nsems semaphores when flag has IPCCreat (semget).
func SemGet(key int32, nsems, flag int) (int, error) {
	id, _, e := unix.Syscall(unix.SYS_SEMGET, uintptr(key), uintptr(nsems), uintptr(flag))
	if e != 0 {
		return -1, e
	}
	return int(id), nil
}

// SemOp applies ops atomically to set id (semtimedop). If ops would block and
// none of them has IPCNoWait, it waits in slices of at most slice (0 means
// DefaultSlice) until the operation succeeds or ctx is done, in which case it
// returns ctx.Err(). EINTR is retried. With IPCNoWait on an operation that
// cannot proceed it returns unix.EAGAIN. A removed set gives unix.EIDRM or
// unix.EINVAL.
func SemOp(ctx context.Context, id int, ops []Sembuf, slice time.Duration) error {
	if len(ops) == 0 {
		return nil
	}
	if slice <= 0 {
		slice = DefaultSlice
	}
	nowait := false
	for _, o := range ops {
		if o.Flg&IPCNoWait != 0 {
			nowait = true
		}
	}
	ts := unix.NsecToTimespec(int64(slice))
	for {
		var tsp uintptr
		if !nowait {
			tsp = uintptr(unsafe.Pointer(&ts))
		}
		_, _, e := unix.Syscall6(unix.SYS_SEMTIMEDOP, uintptr(id),
			uintptr(unsafe.Pointer(&ops[0])), uintptr(len(ops)), tsp, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if nowait {
				return unix.EAGAIN
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		default:
			return e
		}
	}
}

func semctl(id, num, cmd int, arg uintptr) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), uintptr(num), uintptr(cmd), arg, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// SemGetVal returns the value of semaphore num of set id (GETVAL).
func SemGetVal(id, num int) (int, error) { return semctl(id, num, getVal, 0) }

// SemSetVal sets semaphore num of set id to val (SETVAL).
func SemSetVal(id, num, val int) error {
	_, err := semctl(id, num, setVal, uintptr(val))
	return err
}

// SemGetPid returns the pid of the last process that operated on semaphore
// num of set id (GETPID); the kernel also records a process whose SEM_UNDO
// adjustments were applied at its exit.
func SemGetPid(id, num int) (int, error) { return semctl(id, num, getPID, 0) }

// SemRemove removes the semaphore set id (IPC_RMID).
func SemRemove(id int) error {
	_, err := semctl(id, 0, ipcRMID, 0)
	return err
}

// PageSize is the system page size.
func PageSize() int { return os.Getpagesize() }

// Reserve reserves size bytes of address space that is not accessible
// (mmap PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE), for attaching
// segments into with ShmRemap.
func Reserve(size uintptr) (unsafe.Pointer, error) {
	return unix.MmapPtr(-1, 0, nil, size, unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
}

// Unattach detaches a segment that was attached with ShmRemap inside a
// range from Reserve, and keeps that part of the range reserved: one
// mmap(MAP_FIXED, PROT_NONE) replaces the segment's mapping, which the
// kernel counts as its detach. Plain shmdt would free the addresses at once,
// and a mapping another thread (the Go runtime included) makes there before
// Release would then be unmapped by Release.
func Unattach(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&b[0]), uintptr(len(b)), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED)
	return err
}

// Release unmaps a range obtained from Reserve. Segments attached inside it
// must be taken out with Unattach first (never ShmDetach), so that the whole
// range is still this caller's own when it is unmapped.
func Release(addr unsafe.Pointer, size uintptr) error {
	return unix.MunmapPtr(addr, size)
}

// ListShm lists the shared memory segments of /proc/sysvipc/shm.
func ListShm() ([]Object, error) { return list("/proc/sysvipc/shm", true) }

// ListSem lists the semaphore sets of /proc/sysvipc/sem.
func ListSem() ([]Object, error) { return list("/proc/sysvipc/sem", false) }

func list(path string, shm bool) ([]Object, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Object
	sc := bufio.NewScanner(f)
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 {
			continue
		}
		k, err1 := strconv.ParseInt(fs[0], 10, 64)
		id, err2 := strconv.Atoi(fs[1])
		sz, err3 := strconv.ParseUint(fs[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, errors.New("sysv: cannot parse " + path)
		}
		o := Object{Key: int32(k), ID: id, Size: sz}
		if shm && len(fs) >= 7 {
			o.CPID, _ = strconv.Atoi(fs[4])
			o.LPID, _ = strconv.Atoi(fs[5])
			o.Nattch, _ = strconv.Atoi(fs[6])
		}
		out = append(out, o)
	}
	return out, sc.Err()
}

// Limits are the kernel's System V shared memory limits.
type Limits struct {
	ShmMax   uint64 // kernel.shmmax: largest segment, bytes
	ShmAll   uint64 // kernel.shmall: all segments together, pages
	ShmMni   uint64 // kernel.shmmni: number of segments
	SemMni   uint64 // fourth field of kernel.sem: number of semaphore sets
	MemAvail uint64 // MemAvailable from /proc/meminfo, bytes (0 if unknown)
}

// ReadLimits reads the limits from /proc/sys/kernel and /proc/meminfo.
func ReadLimits() (Limits, error) {
	var l Limits
	var err error
	rd := func(name string) uint64 {
		b, e := os.ReadFile("/proc/sys/kernel/" + name)
		if e != nil {
			err = e
			return 0
		}
		v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return v
	}
	l.ShmMax = rd("shmmax")
	l.ShmAll = rd("shmall")
	l.ShmMni = rd("shmmni")
	if b, e := os.ReadFile("/proc/sys/kernel/sem"); e == nil {
		if fs := strings.Fields(string(b)); len(fs) == 4 {
			l.SemMni, _ = strconv.ParseUint(fs[3], 10, 64)
		}
	}
	if b, e := os.ReadFile("/proc/meminfo"); e == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemAvailable:") {
				fs := strings.Fields(line)
				if len(fs) >= 2 {
					kb, _ := strconv.ParseUint(fs[1], 10, 64)
					l.MemAvail = kb * 1024
				}
			}
		}
	}
	return l, err
}
