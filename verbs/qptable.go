package verbs

import "sync/atomic"

// qpTable maps QP numbers to QPs: a two-level radix table whose lookups
// are two atomic loads (the receive path takes no lock and allocates
// nothing) and whose writers (serialised by the device's qpMu) insert and
// remove in O(1). A chunk is allocated when its first QP arrives and
// dropped when its last one goes, except the chunk the allocator is in
// (cur): a program that creates and destroys one QP at a time (a server
// taking connections one after another) would otherwise allocate and
// clear a 32 KiB chunk for every QP. That chunk is dropped, if empty,
// once the allocator moves on.
//
// QPNs are handed out cyclically, as rxe does: the next number after the
// last one given, first to last, wrapping to first, skipping numbers in
// use. Until the first wrap that is one probe; after it, full chunks are
// skipped whole, so an allocation costs at most a chunk's worth of probes
// plus one per chunk, however many QPs there are.
type qpTable struct {
	chunks [qpChunks]atomic.Pointer[qpChunk]
	first  uint32 // allocation range [first, last]
	last   uint32
	next   uint32 // where the next allocation looks first
	cur    uint32 // chunk index of the last number allocated: kept when empty
	inUse  int    // allocated numbers in [first, last]
}

const (
	qpChunkBits = 12
	qpChunkLen  = 1 << qpChunkBits
	qpChunks    = 1 << 24 / qpChunkLen // QPNs are 24 bits
)

type qpChunk struct {
	qps  [qpChunkLen]atomic.Pointer[QP]
	live int // QPs in the chunk (writers only)
}

func newQPTable(first, last uint32) *qpTable {
	return &qpTable{first: first, last: last, next: first, cur: first >> qpChunkBits}
}

// get returns the QP numbered qpn, or nil.
func (t *qpTable) get(qpn uint32) *QP {
	if qpn >= 1<<24 {
		return nil
	}
	c := t.chunks[qpn>>qpChunkBits].Load()
	if c == nil {
		return nil
	}
	return c.qps[qpn&(qpChunkLen-1)].Load()
}

// put stores qp as qpn, which must be free and below 1<<24.
func (t *qpTable) put(qpn uint32, qp *QP) {
	ci := qpn >> qpChunkBits
	c := t.chunks[ci].Load()
	if c == nil {
		c = new(qpChunk)
		t.chunks[ci].Store(c)
	}
	c.qps[qpn&(qpChunkLen-1)].Store(qp)
	c.live++
	if qpn >= t.first && qpn <= t.last {
		t.inUse++
	}
}

// del removes qpn if it holds qp; it reports whether it did.
func (t *qpTable) del(qpn uint32, qp *QP) bool {
	if qpn >= 1<<24 {
		return false
	}
	ci := qpn >> qpChunkBits
	c := t.chunks[ci].Load()
	if c == nil || c.qps[qpn&(qpChunkLen-1)].Load() != qp {
		return false
	}
	c.qps[qpn&(qpChunkLen-1)].Store(nil)
	if qpn >= t.first && qpn <= t.last {
		t.inUse--
	}
	if c.live--; c.live == 0 && ci != t.cur {
		t.chunks[ci].Store(nil)
	}
	return true
}

// alloc returns a free QPN of the range, cyclically; ok is false when
// every number is in use.
func (t *qpTable) alloc() (qpn uint32, ok bool) {
	if t.inUse > int(t.last-t.first) {
		return 0, false
	}
	n := t.next
	for {
		if n > t.last || n < t.first {
			n = t.first
		}
		c := t.chunks[n>>qpChunkBits].Load()
		if c == nil || c.qps[n&(qpChunkLen-1)].Load() == nil {
			break
		}
		if c.live == qpChunkLen {
			n = (n | (qpChunkLen - 1)) + 1 // skip the full chunk
			continue
		}
		n++
	}
	t.next = n + 1
	if ci := n >> qpChunkBits; ci != t.cur {
		if c := t.chunks[t.cur].Load(); c != nil && c.live == 0 {
			t.chunks[t.cur].Store(nil) // the allocator left it empty
		}
		t.cur = ci
	}
	return n, true
}

// each calls f for every QP (writers only).
func (t *qpTable) each(f func(*QP)) {
	for i := range t.chunks {
		c := t.chunks[i].Load()
		if c == nil {
			continue
		}
		for j := range c.qps {
			if qp := c.qps[j].Load(); qp != nil {
				f(qp)
			}
		}
	}
}
