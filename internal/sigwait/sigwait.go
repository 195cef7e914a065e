package sigwait

import "golang.org/x/sys/unix"

// Held, when set, puts into m the signal mask a wait on the calling thread
// should use and reports true if the thread holds its signals; false
// leaves m alone. It is set once, before any wait (the C library's init),
// and called on the waiting thread.
var Held func(m *unix.Sigset_t) bool
