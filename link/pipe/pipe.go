package pipe

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// Defaults used when a Config field is zero.
const (
	DefaultMTU            = 1500
	DefaultBatchSize      = 64
	DefaultQueueLen       = 1024
	DefaultReorderMax     = 3
	DefaultReorderTimeout = time.Millisecond
	// DefaultTTL is the TTL / hop limit reported in synthesized IP headers
	// when the sender left Packet.TTL zero.
	DefaultTTL = 64
)

// Default addresses of the two ends.
var (
	DefaultAddrA = netip.MustParseAddrPort("10.0.0.1:4791")
	DefaultAddrB = netip.MustParseAddrPort("10.0.0.2:4791")
)

var (
	// ErrBadAddr reports an unusable address in a Config or a destination
	// of the wrong family.
	ErrBadAddr = errors.New("pipe: bad address")
	// ErrShortPacket reports a datagram shorter than its 4-byte ICRC.
	ErrShortPacket = errors.New("pipe: packet shorter than its ICRC (4 bytes): build it with wire.Packet.Append")

	errClosed = fmt.Errorf("pipe: endpoint closed: %w", net.ErrClosed)
)

// Faults describes what happens to datagrams in one direction. Rates are
// probabilities in [0, 1] applied to each datagram independently.
type Faults struct {
	Loss      float64 // the datagram is dropped
	Duplicate float64 // a second copy is delivered right after it
	Corrupt   float64 // one random bit is flipped (never in BTH byte 4, which the ICRC does not cover)
	// Reorder is the rate at which a datagram is held back until 1 to
	// ReorderMax (default 3) later datagrams have passed it, or until
	// ReorderTimeout (default 1 ms) has elapsed if fewer follow.
	Reorder        float64
	ReorderMax     int
	ReorderTimeout time.Duration
	// Delay is added to every datagram, plus a uniform random extra in
	// [0, Jitter); datagrams due at different times may overtake each other.
	Delay, Jitter time.Duration
}

func (f *Faults) normalize() error {
	for _, r := range []float64{f.Loss, f.Duplicate, f.Corrupt, f.Reorder} {
		if !(r >= 0 && r <= 1) {
			return fmt.Errorf("pipe: fault rate %v outside [0, 1]", r)
		}
	}
	if f.Delay < 0 || f.Jitter < 0 || f.ReorderMax < 0 || f.ReorderTimeout < 0 {
		return errors.New("pipe: negative Delay, Jitter, ReorderMax or ReorderTimeout")
	}
	if f.ReorderMax == 0 {
		f.ReorderMax = DefaultReorderMax
	}
	if f.ReorderTimeout == 0 {
		f.ReorderTimeout = DefaultReorderTimeout
	}
	return nil
}

// Verdict is a Filter's decision about a datagram.
type Verdict int

// Verdicts.
const (
	Pass Verdict = iota // deliver (subject to the other faults)
	Drop                // drop and count in Stats.Filtered
)

// Filter is called with every datagram an endpoint sends, after its ICRC
// is filled in and before any other fault. p is the pipe's own copy: the
// filter may change p.Buf[:p.N] and p.N (within cap(p.Buf)), but must not
// keep p, nor call the pipe's methods. A filter that changes the payload
// should leave the ICRC alone to model corruption, or recompute it (see
// wire.FillICRC, IPv4 ID 0) to model a rewriting middlebox.
type Filter func(p *link.Packet) Verdict

// Config describes one end of a pipe.
type Config struct {
	// Addr is the end's IP address and UDP port (defaults: DefaultAddrA,
	// DefaultAddrB). Both ends must be of the same IP family.
	Addr netip.AddrPort
	// MTU is the IP MTU (default DefaultMTU): a datagram whose IP packet
	// would exceed it is refused with an error wrapping syscall.EMSGSIZE.
	MTU int
	// BatchSize is the most datagrams ReadBatch returns (default 64).
	BatchSize int
	// QueueLen bounds the datagrams waiting to be read at this end,
	// including delayed and held ones (default 1024).
	QueueLen int
	// Faults apply to datagrams this end sends.
	Faults Faults
	// Seed seeds the generator behind this end's fault decisions.
	Seed uint64
	// Filter, if not nil, sees every datagram this end sends to the peer.
	Filter Filter
	// ReceiveBuffer, if positive, is reported as this end's receive buffer
	// (link.Capabilities.ReceiveBuffer), as a socket's would be: a device on
	// the end sizes its send budget from it. The queue is still bounded by
	// QueueLen alone.
	ReceiveBuffer int
	// GatherWrite makes this end's WriteBatch honour link.Packet.Data
	// (link.Capabilities.GatherWrite): the datagram is put together from its
	// three pieces, so that a device on the end takes its zero-copy send
	// path. Without it Data is ignored.
	GatherWrite bool
}

func (c *Config) normalize(def netip.AddrPort) error {
	if !c.Addr.IsValid() {
		c.Addr = def
	}
	a := c.Addr.Addr().Unmap()
	if a.IsUnspecified() || c.Addr.Port() == 0 {
		return fmt.Errorf("%w: %v: give a specific IP address and a port", ErrBadAddr, c.Addr)
	}
	c.Addr = netip.AddrPortFrom(a, c.Addr.Port())
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.QueueLen == 0 {
		c.QueueLen = DefaultQueueLen
	}
	if c.MTU < 576 || c.MTU > 65536 || c.BatchSize < 1 || c.QueueLen < 1 {
		return fmt.Errorf("pipe: MTU %d (576..65536), BatchSize %d or QueueLen %d out of range", c.MTU, c.BatchSize, c.QueueLen)
	}
	return c.Faults.normalize()
}

// Stats is a snapshot of an endpoint's counters. The fault counters are
// about the datagrams this end sent; once nothing is in flight, the peer
// has read PacketsOut - NoRoute - Filtered - Lost + Duplicated - QueueDrops
// - PeerClosed of them.
type Stats struct {
	PacketsOut, BytesOut uint64 // datagrams accepted by WriteBatch, and their bytes
	PacketsIn, BytesIn   uint64 // datagrams returned by ReadBatch, and their bytes
	Lost                 uint64 // dropped by the Loss fault
	Duplicated           uint64 // extra copies made by the Duplicate fault (each then delivered or dropped like any datagram)
	Corrupted            uint64 // datagrams with a flipped bit
	Reordered            uint64 // datagrams held back by the Reorder fault
	Delayed              uint64 // datagrams given a non-zero delay
	Filtered             uint64 // dropped by the Filter
	QueueDrops           uint64 // datagrams (copies included) dropped because the peer's queue was full
	NoRoute              uint64 // dropped because Dst was not the peer's address
	PeerClosed           uint64 // datagrams (copies included) dropped because the peer was closed
	Truncated            uint64 // received datagrams larger than the read buffer (N = 0)
}

type counters struct {
	packetsOut, bytesOut, packetsIn, bytesIn                  atomic.Uint64
	lost, duplicated, corrupted, reordered, delayed, filtered atomic.Uint64
	queueDrops, noRoute, peerClosed, truncated                atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		PacketsOut: c.packetsOut.Load(), BytesOut: c.bytesOut.Load(),
		PacketsIn: c.packetsIn.Load(), BytesIn: c.bytesIn.Load(),
		Lost: c.lost.Load(), Duplicated: c.duplicated.Load(), Corrupted: c.corrupted.Load(),
		Reordered: c.reordered.Load(), Delayed: c.delayed.Load(), Filtered: c.filtered.Load(),
		QueueDrops: c.queueDrops.Load(), NoRoute: c.noRoute.Load(), PeerClosed: c.peerClosed.Load(),
		Truncated: c.truncated.Load(),
	}
}

// buf is a datagram in flight.
type buf struct {
	pkt      link.Packet
	due      int64  // ns since the pipe's start when it may be read
	seq      uint64 // order among datagrams due at the same time
	holdLeft int    // reorder: later datagrams still to pass it
	holdEnd  int64  // reorder: release time if fewer pass it
}

// pool is a free list of datagram buffers shared by both ends.
type pool struct {
	mu   sync.Mutex
	free []*buf
	size int
}

func (p *pool) get() *buf {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	return &buf{pkt: link.Packet{Buf: make([]byte, p.size)}}
}

func (p *pool) put(b *buf) {
	p.mu.Lock()
	p.free = append(p.free, b)
	p.mu.Unlock()
}

// Endpoint is one end of a pipe.
type Endpoint struct {
	addr  netip.AddrPort
	mtu   int
	batch int
	qlen  int
	peer  *Endpoint
	pool  *pool
	start time.Time
	ctr   counters
	caps  link.Capabilities

	// Send side.
	txMu   sync.Mutex
	faults Faults
	filter Filter
	rng    *rand.Rand

	// Receive side.
	mu     sync.Mutex
	q      []*buf // min-heap by (due, seq)
	held   []*buf // reordered datagrams not yet released
	seq    uint64
	closed bool
	notify chan struct{}
	done   chan struct{}
	timer  *time.Timer
}

var (
	_ link.Endpoint = (*Endpoint)(nil)
	_ link.Capable  = (*Endpoint)(nil)
	_ link.Pender   = (*Endpoint)(nil)
)

// New returns the two connected ends of a pipe configured by a and b.
func New(a, b Config) (*Endpoint, *Endpoint, error) {
	if err := a.normalize(DefaultAddrA); err != nil {
		return nil, nil, err
	}
	if err := b.normalize(DefaultAddrB); err != nil {
		return nil, nil, err
	}
	if a.Addr.Addr().Is4() != b.Addr.Addr().Is4() || a.Addr == b.Addr {
		return nil, nil, fmt.Errorf("%w: %v and %v: the ends need distinct addresses of one IP family", ErrBadAddr, a.Addr, b.Addr)
	}
	p := &pool{size: max(a.MTU, b.MTU)}
	start := time.Now()
	ea, eb := newEndpoint(&a, p, start), newEndpoint(&b, p, start)
	ea.peer, eb.peer = eb, ea
	return ea, eb, nil
}

func newEndpoint(c *Config, p *pool, start time.Time) *Endpoint {
	e := &Endpoint{
		addr: c.Addr, mtu: c.MTU, batch: c.BatchSize, qlen: c.QueueLen,
		pool: p, start: start,
		caps:   link.Capabilities{ReceiveBuffer: max(c.ReceiveBuffer, 0), GatherWrite: c.GatherWrite},
		faults: c.Faults, filter: c.Filter,
		rng:    rand.New(rand.NewPCG(c.Seed, c.Seed^0x9E3779B97F4A7C15)),
		q:      make([]*buf, 0, c.QueueLen),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		timer:  time.NewTimer(time.Hour),
	}
	e.timer.Stop()
	return e
}

// LocalAddr returns the end's address.
func (e *Endpoint) LocalAddr() netip.AddrPort { return e.addr }

// MTU returns the configured IP MTU.
func (e *Endpoint) MTU() int { return e.mtu }

// Capabilities returns what Config.ReceiveBuffer and Config.GatherWrite
// set; the end sends from LocalAddr and leaves Packet.Src alone.
func (e *Endpoint) Capabilities() link.Capabilities { return e.caps }

// BatchSize returns the most datagrams ReadBatch returns per call.
func (e *Endpoint) BatchSize() int { return e.batch }

// Peer returns the other end.
func (e *Endpoint) Peer() *Endpoint { return e.peer }

// Stats returns a snapshot of the end's counters.
func (e *Endpoint) Stats() Stats { return e.ctr.snapshot() }

// SetFaults replaces the faults applied to datagrams this end sends from
// now on (held and delayed datagrams keep their fate).
func (e *Endpoint) SetFaults(f Faults) error {
	if err := f.normalize(); err != nil {
		return err
	}
	e.txMu.Lock()
	e.faults = f
	e.txMu.Unlock()
	return nil
}

// SetFilter replaces the filter (nil: none).
func (e *Endpoint) SetFilter(f Filter) {
	e.txMu.Lock()
	e.filter = f
	e.txMu.Unlock()
}

func (e *Endpoint) now() int64 { return int64(time.Since(e.start)) }

// ipOverhead is the IP and UDP header size of the end's family.
func (e *Endpoint) ipOverhead() int {
	if e.addr.Addr().Is4() {
		return 20 + 8
	}
	return 40 + 8
}

// Close closes this end: its pending datagrams are discarded and its
// blocked and later calls return an error wrapping net.ErrClosed. The peer
// is not closed.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	for _, b := range e.q {
		e.pool.put(b)
	}
	for _, b := range e.held {
		e.pool.put(b)
	}
	e.q, e.held = nil, nil
	close(e.done)
	e.timer.Stop()
	return nil
}

func (e *Endpoint) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// WriteBatch fills in each datagram's ICRC (for IPv4 ID 0 with DF, as the
// UDP link sends) and puts it on the wire to the peer, applying this end's
// faults. It never blocks. It returns how many datagrams were accepted; it
// stops at the first invalid one (too short, over the MTU, a destination of
// the wrong family) with an error. Datagrams lost on the way are not
// errors: they are counted in Stats.
func (e *Endpoint) WriteBatch(pkts []link.Packet) (int, error) {
	if e.isClosed() {
		return 0, errClosed
	}
	e.txMu.Lock()
	defer e.txMu.Unlock()
	sent := 0
	for i := range pkts {
		p := &pkts[i]
		if err := e.check(p); err != nil {
			e.peer.wake()
			return sent, err
		}
		dst := netip.AddrPortFrom(p.Dst.Addr().Unmap(), p.Dst.Port())
		b := p.Buf[:p.N]
		if e.gathers(p) {
			at := p.DataAt
			wire.PutICRC(b, wire.ICRCForGather(e.addr, dst, 0, b[:at], p.Data, b[at:len(b)-wire.ICRCLen]))
		} else {
			wire.FillICRC(b, e.addr, dst, 0)
		}
		sent++
		e.ctr.packetsOut.Add(1)
		e.ctr.bytesOut.Add(uint64(e.length(p)))
		if dst != e.peer.addr {
			e.ctr.noRoute.Add(1)
			continue
		}
		e.transmit(p, dst)
	}
	e.peer.wake()
	return sent, nil
}

// gathers reports whether p's datagram is gathered from Buf and Data.
func (e *Endpoint) gathers(p *link.Packet) bool { return e.caps.GatherWrite && len(p.Data) > 0 }

// length returns the length of p's datagram.
func (e *Endpoint) length(p *link.Packet) int {
	if e.gathers(p) {
		return p.Len()
	}
	return p.N
}

func (e *Endpoint) check(p *link.Packet) error {
	if p.N > cap(p.Buf) {
		return fmt.Errorf("pipe: packet length %d exceeds its buffer (cap %d)", p.N, cap(p.Buf))
	}
	if p.N < wire.ICRCLen {
		return ErrShortPacket
	}
	if e.gathers(p) && (p.DataAt < 0 || p.DataAt > p.N-wire.ICRCLen) {
		return fmt.Errorf("pipe: Packet.DataAt %d outside the headers and pad of a %d-byte buffer", p.DataAt, p.N)
	}
	if n := e.length(p); n+e.ipOverhead() > e.mtu {
		return fmt.Errorf("pipe: datagram of %d bytes to %v exceeds the MTU %d (RoCE does not fragment): %w", n, p.Dst, e.mtu, syscall.EMSGSIZE)
	}
	d := p.Dst.Addr().Unmap()
	if !d.IsValid() || p.Dst.Port() == 0 || d.Is4() != e.addr.Addr().Is4() {
		return fmt.Errorf("%w: destination %v from %v", ErrBadAddr, p.Dst, e.addr)
	}
	return nil
}

// transmit copies p into a pooled buffer, applies the faults and queues it
// at the peer. Called with txMu held.
func (e *Endpoint) transmit(p *link.Packet, dst netip.AddrPort) {
	b := e.pool.get()
	q := &b.pkt
	if e.gathers(p) {
		all := q.Buf[:cap(q.Buf)]
		n := copy(all, p.Buf[:p.DataAt])
		n += copy(all[n:], p.Data)
		q.N = n + copy(all[n:], p.Buf[p.DataAt:p.N])
	} else {
		q.N = copy(q.Buf[:cap(q.Buf)], p.Buf[:p.N])
	}
	q.Src, q.Dst, q.TOS, q.TTL = e.addr, dst, p.TOS, p.TTL
	if e.filter != nil {
		own := q.Buf
		v := e.filter(q)
		if len(q.Buf) == 0 || &q.Buf[0] != &own[0] { // the filter swapped the buffer
			q.N = copy(own[:cap(own)], q.Buf[:min(max(q.N, 0), cap(q.Buf))])
			q.Buf = own
		}
		q.N = min(max(q.N, 0), cap(q.Buf))
		if v == Drop {
			e.ctr.filtered.Add(1)
			e.pool.put(b)
			return
		}
	}
	f := &e.faults
	if f.Loss > 0 && e.rng.Float64() < f.Loss {
		e.ctr.lost.Add(1)
		e.pool.put(b)
		return
	}
	if f.Corrupt > 0 && e.rng.Float64() < f.Corrupt && q.N > 0 {
		e.ctr.corrupted.Add(1)
		var bit int
		if q.N > 5 {
			bit = e.rng.IntN(q.N*8 - 8) // skip BTH byte 4 (not covered by the ICRC)
			if bit >= 4*8 {
				bit += 8
			}
		} else {
			bit = e.rng.IntN(q.N * 8)
		}
		q.Buf[bit/8] ^= 1 << (bit % 8)
	}
	var dup *buf
	if f.Duplicate > 0 && e.rng.Float64() < f.Duplicate {
		e.ctr.duplicated.Add(1)
		dup = e.pool.get()
		dup.pkt.N = copy(dup.pkt.Buf[:cap(dup.pkt.Buf)], q.Buf[:q.N])
		dup.pkt.Src, dup.pkt.Dst, dup.pkt.TOS, dup.pkt.TTL = q.Src, q.Dst, q.TOS, q.TTL
	}
	now := e.now()
	b.due = now + int64(f.Delay)
	if f.Jitter > 0 {
		b.due += e.rng.Int64N(int64(f.Jitter))
	}
	b.holdLeft = 0
	if f.Reorder > 0 && e.rng.Float64() < f.Reorder {
		b.holdLeft = 1 + e.rng.IntN(f.ReorderMax)
		b.holdEnd = max(b.due, now+int64(f.ReorderTimeout))
	}
	if b.due > now {
		e.ctr.delayed.Add(1)
	}
	e.peer.enqueue(e, b, dup)
}

// enqueue adds b (and its duplicate) to e's queue, sent by from.
func (e *Endpoint) enqueue(from *Endpoint, b, dup *buf) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || len(e.q)+len(e.held) >= e.qlen {
		c := &from.ctr.queueDrops
		if e.closed {
			c = &from.ctr.peerClosed
		}
		c.Add(1)
		e.pool.put(b)
		if dup != nil {
			c.Add(1)
			e.pool.put(dup)
		}
		return
	}
	// Release expired held datagrams first, as the reader would, so that
	// the order does not depend on whether the reader ran in between.
	e.releaseExpired(from.now())
	if b.holdLeft > 0 {
		from.ctr.reordered.Add(1)
		e.held = append(e.held, b)
	} else {
		e.push(b)
		// Held datagrams that b has passed.
		for i := 0; i < len(e.held); {
			h := e.held[i]
			if h.holdLeft--; h.holdLeft > 0 {
				i++
				continue
			}
			h.due = max(h.due, b.due)
			e.push(h)
			e.held = append(e.held[:i], e.held[i+1:]...)
		}
	}
	if dup != nil {
		if len(e.q)+len(e.held) >= e.qlen {
			from.ctr.queueDrops.Add(1)
			e.pool.put(dup)
			return
		}
		dup.due = b.due
		e.push(dup)
	}
}

func (e *Endpoint) wake() {
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// push adds b to the heap with the next sequence number.
func (e *Endpoint) push(b *buf) {
	e.seq++
	b.seq = e.seq
	e.q = append(e.q, b)
	for i := len(e.q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !less(e.q[i], e.q[parent]) {
			break
		}
		e.q[i], e.q[parent] = e.q[parent], e.q[i]
		i = parent
	}
}

func less(a, b *buf) bool { return a.due < b.due || a.due == b.due && a.seq < b.seq }

func (e *Endpoint) pop() *buf {
	q := e.q
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = nil
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && less(q[l], q[m]) {
			m = l
		}
		if r := l + 1; r < n && less(q[r], q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	e.q = q
	return top
}

// Pending reports datagrams due for ReadBatch (link.Pender), without
// reading them.
func (e *Endpoint) Pending() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.closed && len(e.q) > 0 && e.q[0].due <= e.now()
}

// ReadBatch blocks until at least one datagram is due and returns up to
// min(len(pkts), BatchSize()) of them. Each packet gets Buf[:N], Src, Dst,
// TOS and TTL as sent, and IPHdr[:IPHdrLen], the IP header the datagram
// would have carried (IPv4 ID 0 with DF).
func (e *Endpoint) ReadBatch(pkts []link.Packet) (int, error) {
	lim := min(len(pkts), e.batch)
	if lim == 0 {
		if e.isClosed() {
			return 0, errClosed
		}
		return 0, nil
	}
	for i := range pkts[:lim] {
		if cap(pkts[i].Buf) == 0 {
			return 0, fmt.Errorf("pipe: ReadBatch: packet %d has a buffer of capacity 0: give each packet a buffer of at least MTU bytes", i)
		}
	}
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return 0, errClosed
		}
		now := e.now()
		wait := e.releaseExpired(now)
		n := 0
		for n < lim && len(e.q) > 0 && e.q[0].due <= now {
			b := e.pop()
			e.deliver(&pkts[n], &b.pkt)
			e.pool.put(b)
			n++
		}
		if len(e.q) > 0 && e.q[0].due > now {
			wait = min(wait, e.q[0].due-now)
		}
		e.mu.Unlock()
		if n > 0 {
			return n, nil
		}
		if wait == noWait {
			select {
			case <-e.notify:
			case <-e.done:
			}
			continue
		}
		e.timer.Reset(time.Duration(wait))
		select {
		case <-e.notify:
		case <-e.done:
		case <-e.timer.C:
		}
		e.timer.Stop()
	}
}

const noWait = int64(1<<63 - 1)

// releaseExpired moves held datagrams whose timeout has passed into the
// queue and returns the time until the next one expires (noWait if none).
func (e *Endpoint) releaseExpired(now int64) int64 {
	wait := noWait
	for i := 0; i < len(e.held); {
		h := e.held[i]
		if h.holdEnd <= now {
			h.due = h.holdEnd
			e.push(h)
			e.held = append(e.held[:i], e.held[i+1:]...)
			continue
		}
		wait = min(wait, h.holdEnd-now)
		i++
	}
	return wait
}

// deliver copies q into the caller's packet p.
func (e *Endpoint) deliver(p, q *link.Packet) {
	if q.N > cap(p.Buf) {
		p.N = 0
		e.ctr.truncated.Add(1)
	} else {
		p.N = copy(p.Buf[:cap(p.Buf)], q.Buf[:q.N])
	}
	p.Src, p.Dst, p.TOS, p.TTL = q.Src, q.Dst, q.TOS, q.TTL
	p.IPHdrLen = putIPHeader(p.IPHdr[:], q)
	e.ctr.packetsIn.Add(1)
	e.ctr.bytesIn.Add(uint64(p.N))
}

// putIPHeader writes the IP header q would carry on a real network.
func putIPHeader(h []byte, q *link.Packet) int {
	ttl := q.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	ulen := 8 + q.N
	if q.Src.Addr().Is4() {
		ih := wire.IPv4Header{TOS: q.TOS, TotalLen: uint16(wire.IPv4HeaderLen + ulen), DF: true, TTL: ttl,
			Src: q.Src.Addr().As4(), Dst: q.Dst.Addr().As4()}
		ih.Put(h)
		return wire.IPv4HeaderLen
	}
	ih := wire.IPv6Header{TrafficClass: q.TOS, PayloadLen: uint16(ulen), HopLimit: ttl,
		Src: q.Src.Addr().As16(), Dst: q.Dst.Addr().As16()}
	ih.Put(h)
	return wire.IPv6HeaderLen
}
