//go:build linux && cgo && softroce_capi

package main

import "testing"

// TestHandleGenerations checks the handle table's promise: a handle names
// its object until removed, and a slot's next object gets a handle that
// differs from every earlier one of that slot, so a stale handle finds
// nothing (the lookups a misbehaving program's freed pointer would make).
func TestHandleGenerations(t *testing.T) {
	var tab handleTable
	tab.next = 1
	a := tab.add("a")
	if a == 0 || tab.get(a) != "a" {
		t.Fatalf("add returned %#x, get %v", a, tab.get(a))
	}
	seen := map[uintptr]bool{a: true}
	prev := a
	for i := 0; i < 1000; i++ {
		if !tab.remove(prev) {
			t.Fatalf("remove(%#x) of a live handle reported false", prev)
		}
		if tab.get(prev) != nil || tab.remove(prev) {
			t.Fatalf("handle %#x still found after remove", prev)
		}
		h := tab.add(i)
		if uint32(h) != uint32(a) {
			t.Fatalf("add after remove took slot %d, want the freed slot %d", uint32(h), uint32(a))
		}
		if seen[h] {
			t.Fatalf("slot %d's object %d got handle %#x, which an earlier object had", uint32(h), i, h)
		}
		seen[h] = true
		if tab.get(h) != i {
			t.Fatalf("get(%#x) = %v, want %d", h, tab.get(h), i)
		}
		prev = h
	}
	// A handle of another slot, a forged index and index 0 find nothing.
	b := tab.add("b")
	if tab.get(b) != "b" || tab.get(b+1) != nil || tab.get(0) != nil || tab.get(uintptr(maxChunks*chunkSize)) != nil {
		t.Error("a forged or out-of-range handle found an object")
	}
	if n := testing.AllocsPerRun(100, func() { tab.remove(tab.add(1)) }); n > 1 {
		t.Errorf("%.1f allocations per add and remove of a reused slot, want at most 1 (its slot record)", n)
	}
}

// TestHandleTableGrowth pins what a new handle costs as the table grows:
// its slot record and nothing more (the generations live beside the slots;
// a map of them rehashed as the table grew, in the middle of a program's
// timed rdma_create_id loop).
func TestHandleTableGrowth(t *testing.T) {
	var tab handleTable
	tab.next = 1
	const n = 1000
	obj := new(int)
	// AllocsPerRun's warm-up run adds the first n (and the chunk); the
	// measured run the next n, in the same chunk.
	if a := testing.AllocsPerRun(1, func() {
		for i := 0; i < n; i++ {
			tab.add(obj)
		}
	}); a > n {
		t.Errorf("%v allocations for %d new handles, want %d (one slot record each)", a, n, n)
	}
}
