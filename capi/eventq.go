//go:build linux && cgo && softroce_capi

package main

import (
	"encoding/binary"
	"sync"
	"syscall"
)

// eventQueue is what stands behind each of the library's event fds (a
// completion channel, a context's async fd, an rdma_cm channel): a FIFO
// of events and an eventfd in semaphore mode that counts them, so the fd
// is readable while events wait, each read takes one, and an empty
// non-blocking read is EAGAIN, as the kernel's event files behave. The
// event is queued before the count is added: a reader woken by the fd
// always finds it.
type eventQueue[T any] struct {
	fd    int
	mu    sync.Mutex
	items []T
}

// push queues v and counts it on the fd.
func (q *eventQueue[T]) push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	signalFd(q.fd)
}

// take returns the oldest event, if any.
func (q *eventQueue[T]) take() (T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var zero T
	if len(q.items) == 0 {
		return zero, false
	}
	v := q.items[0]
	q.items[0] = zero
	q.items = q.items[1:]
	return v, true
}

// drop removes the events gone reports true for (their object was
// destroyed, as the kernel's queues forget them), taking their counts
// back from the fd.
func (q *eventQueue[T]) drop(gone func(T) bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kept := q.items[:0]
	for _, v := range q.items {
		if gone(v) {
			var b [8]byte
			syscall.Read(q.fd, b[:])
			continue
		}
		kept = append(kept, v)
	}
	q.items = kept
}

// signalFd adds one to an eventfd (EFD_SEMAPHORE): one read per event.
func signalFd(fd int) { addFd(fd, 1) }

// addFd adds n to an eventfd.
func addFd(fd int, n uint64) {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], n)
	for {
		_, err := syscall.Write(fd, b[:])
		if err != syscall.EINTR {
			return
		}
	}
}
