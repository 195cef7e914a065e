// Package sigwait lets a host that holds a thread's signals around a
// blocking call give the waits made inside that call the mask to wait with.
//
// The C library blocks a program's asynchronous signals on a thread for a
// blocking rsocket call, so that a signal that arrives between two waits
// stays pending and ends the next wait (EINTR) instead of being handled
// there and lost to the call. A wait made in Go (link/udp's ppoll) must
// then unblock them for its duration: Held gives the thread's mask from
// before the hold.
package sigwait
