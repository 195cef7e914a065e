package sysv

import (
	"errors"
	"fmt"
)

// Flags and commands, with the Linux values (they are the same on every
// Linux architecture this package supports).
const (
	IPCCreat  = 0o1000 // IPC_CREAT: create the object if it does not exist
	IPCExcl   = 0o2000 // IPC_EXCL: fail with EEXIST if it exists
	IPCNoWait = 0o4000 // IPC_NOWAIT: do not block
	SemUndo   = 0x1000 // SEM_UNDO: undo the operation when the process exits

	ShmRdonly = 0o10000 // SHM_RDONLY: attach read-only
	ShmRemap  = 0o40000 // SHM_REMAP: replace existing mappings at the address
	ShmLock   = 11      // SHM_LOCK shmctl command
	ShmUnlk   = 12      // SHM_UNLOCK shmctl command

	// Perm is the permission PSRDADA uses for every object (IPCUTIL_PERM).
	Perm = 0o666
)

// Sembuf is one semaphore operation (struct sembuf).
type Sembuf struct {
	Num uint16 // semaphore index in the set
	Op  int16  // value to add (negative: wait until it can be subtracted)
	Flg int16  // IPCNoWait, SemUndo
}

// ErrUnsupported is returned on systems without the System V IPC support this
// package needs.
var ErrUnsupported = errors.New("sysv: System V IPC is only supported on 64-bit Linux")

// Object is one entry of /proc/sysvipc/shm or /proc/sysvipc/sem.
type Object struct {
	Key    int32  // IPC key (0 for IPC_PRIVATE)
	ID     int    // shmid or semid
	Size   uint64 // segment bytes (shm) or number of semaphores (sem)
	CPID   int    // creator pid (shm only; 0 for sem)
	LPID   int    // last shmat/shmdt pid (shm only)
	Nattch int    // attach count (shm only)
}

// String formats the object like ipcs does.
func (o Object) String() string {
	return fmt.Sprintf("key=0x%08x id=%d size=%d", uint32(o.Key), o.ID, o.Size)
}
