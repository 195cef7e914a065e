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

// chunk holds chunkSize slots and, beside them, each slot's last
// generation (under the table's mu): a slot's next object gets the next
// generation, with no map to grow as the table does.
type chunk struct {
	slots [chunkSize]atomic.Pointer[slot]
	gens  [chunkSize]uint32
}

type handleTable struct {
	mu     sync.Mutex
	chunks [maxChunks]atomic.Pointer[chunk]
	free   []uint32
	next   uint32
}

var handles = handleTable{next: 1}

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
		c = new(chunk)
		t.chunks[idx>>chunkBits].Store(c)
	}
	i := idx & (chunkSize - 1)
	c.gens[i]++
	c.slots[i].Store(&slot{gen: c.gens[i], v: v})
	return uintptr(c.gens[i])<<32 | uintptr(idx)
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
	s := c.slots[idx&(chunkSize-1)].Load()
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
	t.chunks[idx>>chunkBits].Load().slots[idx&(chunkSize-1)].Store(nil)
	t.free = append(t.free, idx)
	return true
}

// lookup returns handle h's object if it is a T.
func lookup[T any](h uintptr) (T, bool) {
	v, ok := handles.get(h).(T)
	return v, ok
}
