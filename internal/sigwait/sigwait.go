// Package sigwait lets a host that holds a thread's signals around a
// blocking call give the waits made inside that call the mask to wait with.
//
// The C library blocks a program's asynchronous signals on a thread from a
// blocking call's first wait until the call returns, so that a signal that
// arrives between two waits stays pending and ends the next wait (EINTR)
// instead of being handled there and lost to the call. A wait made in Go
// (link/udp's ppoll) must then unblock them for its duration: Held reports
// the thread's mask from before the hold.
package sigwait

import "golang.org/x/sys/unix"

// Held, when set, puts into m the signal mask a wait on the calling thread
// should use and reports true if the thread holds its signals; false
// leaves m alone. It is set once, before any wait (the C library's init),
// and called on the waiting thread.
var Held func(m *unix.Sigset_t) bool
