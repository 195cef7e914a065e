package udp

import (
	"syscall"
	_ "unsafe" // go:linkname
)

// A thread that waits in WaitReadable (a C program's thread blocked in
// rdma_get_cm_event, a blocking rsocket call) gives its Go processor away
// for the wait, as the runtime's own blocking system calls do
// (runtime.entersyscallblock). Through syscall.Syscall6 it kept the
// processor, and the runtime's monitor (sysmon) took it back once the wait
// passed 10 ms, leaving a preemption request that made the thread's next
// call into Go yield at once, on a CPU the program's other threads and the
// runtime's shared (stock cmtime's client, 2026-11-30: connect 67.8 against
// 84.7 µs a connection, all steps 14.2 against 17.0 ms, 15 alternated
// rounds; docs/speed.md). entersyscallblock and exitsyscall are among the
// runtime functions it keeps reachable by linkname for such callers
// (go.dev/issue/67401; gVisor uses them the same way).

//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

// ppollBlocking is ppoll(2) on fds (n of them) with timeout ts and signal
// mask mask (8 bytes), with the processor given away for the wait. Between
// the two runtime calls nothing may grow the stack or be instrumented:
// nosplit, norace, and a raw system call.
//
//go:nosplit
//go:norace
func ppollBlocking(fds, n, ts, mask uintptr) (uintptr, syscall.Errno) {
	entersyscallblock()
	r, _, e := syscall.RawSyscall6(syscall.SYS_PPOLL, fds, n, ts, mask, 8, 0)
	exitsyscall()
	return r, e
}
