// Package sysv is a small wrapper around System V IPC on Linux: semaphore
// sets through raw syscalls (semget, semtimedop, semctl; golang.org/x/sys has
// shared memory but no semaphores), shared memory segments through
// golang.org/x/sys/unix, address-space reservations for attaching segments at
// chosen addresses, and listings of /proc/sysvipc.
//
// Every blocking semaphore operation takes a context: it is carried out with
// semtimedop in bounded slices so that cancellation is noticed promptly.
//
// The implementation is Linux-only and limited to 64-bit architectures (the
// PSRDADA ABI assumes 8-byte aligned 64-bit fields); on other systems every
// function returns ErrUnsupported so that dependent packages still build.
package sysv
