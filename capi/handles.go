//go:build linux && cgo && softroce_capi

package main

import (
	"sync"
	"sync/atomic"
)

// A handle names a Go object for C: the table index in the low 32 bits and
// the slot's generation above, so that a stale or forged handle from a
// misbehaving program finds nothing (or an object of another kind, which
// the typed lookups refuse) instead of a freed object. Lookups are lock-free:
// two array indexes and an atomic load, on every poll and post.
const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
	maxChunks = 1 << 12
)

type slot struct {
	gen uint32
	v   any
}

type handleTable struct {
	mu     sync.Mutex
	chunks [maxChunks]atomic.Pointer[[chunkSize]atomic.Pointer[slot]]
	free   []uint32
	gens   map[uint32]uint32
	next   uint32
}

var handles = handleTable{next: 1, gens: map[uint32]uint32{}}

// add stores v and returns its handle (0 when the table is full).
func (t *handleTable) add(v any) uintptr {
	t.mu.Lock()
	defer t.mu.Unlock()
	var idx uint32
	if n := len(t.free); n > 0 {
		idx = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if t.next >= maxChunks*chunkSize {
			return 0
		}
		idx = t.next
		t.next++
	}
	c := t.chunks[idx>>chunkBits].Load()
	if c == nil {
		c = new([chunkSize]atomic.Pointer[slot])
		t.chunks[idx>>chunkBits].Store(c)
	}
	gen := t.gens[idx] + 1
	t.gens[idx] = gen
	c[idx&(chunkSize-1)].Store(&slot{gen: gen, v: v})
	return uintptr(gen)<<32 | uintptr(idx)
}

// get returns the object of handle h, or nil.
func (t *handleTable) get(h uintptr) any {
	idx := uint32(h)
	if idx == 0 || idx >= maxChunks*chunkSize {
		return nil
	}
	c := t.chunks[idx>>chunkBits].Load()
	if c == nil {
		return nil
	}
	s := c[idx&(chunkSize-1)].Load()
	if s == nil || s.gen != uint32(h>>32) {
		return nil
	}
	return s.v
}

// remove forgets handle h; it reports whether h was live.
func (t *handleTable) remove(h uintptr) bool {
	idx := uint32(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.get(h) == nil {
		return false
	}
	t.chunks[idx>>chunkBits].Load()[idx&(chunkSize-1)].Store(nil)
	t.free = append(t.free, idx)
	return true
}

// lookup returns handle h's object if it is a T.
func lookup[T any](h uintptr) (T, bool) {
	v, ok := handles.get(h).(T)
	return v, ok
}
