package udp

import (
	"bytes"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
)

// localPair opens two Local endpoints on loopback and fails the test when
// the machine cannot give them lanes.
func localPair(t *testing.T, addr string, opts ...Option) (*Endpoint, *Endpoint) {
	t.Helper()
	opts = append([]Option{WithLocal()}, opts...)
	a, b := listen(t, addr, opts...), listen(t, addr, opts...)
	if a.inbox == nil || b.inbox == nil {
		t.Fatalf("no same-host lanes (no %s or SIOCGSKNS)", inboxDir)
	}
	return a, b
}

// TestLocalLanes sends both ways between two Local endpoints and checks
// that every datagram went through the lanes, intact, without an ICRC
// computed (Local set on write and on read), and
// that a reader blocked in ReadBatch is woken by a lane write.
func TestLocalLanes(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		for _, opts := range [][]Option{nil, {WithoutGRO()}} {
			a, b := localPair(t, addr, opts...)
			const n = 300
			var want [][]byte
			for i := 0; i < n; i += 30 {
				pkts := linktest.Batch(30, 0)
				for j := range pkts {
					pkts[j].Buf = linktest.Packet(nil, 0x11, uint32(i+j), linktest.Payload(i+j, 1+(i+j)*37%4096))
					pkts[j].N, pkts[j].Dst, pkts[j].TOS = len(pkts[j].Buf), b.LocalAddr(), 0x68
					// The bytes as given, before WriteBatch: a writer that
					// computed the ICRC (in place, as the socket path does)
					// would deliver other last 4 bytes.
					want = append(want, bytes.Clone(pkts[j].Bytes()))
				}
				if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
					t.Fatalf("WriteBatch = %d, %v", k, err)
				}
				for j := range pkts {
					if !pkts[j].Local {
						t.Fatalf("%s: datagram %d written to a lane: Local false (a tap would not fill in its ICRC)", addr, i+j)
					}
				}
			}
			got := readN(t, b, n)
			for i, p := range got {
				if !bytes.Equal(p.Bytes(), want[i]) {
					t.Fatalf("%s: datagram %d differs from the bytes given to WriteBatch (an ICRC computed for a lane, which nothing checks?)", addr, i)
				}
				if p.Src != a.SendAddr() || p.Dst != b.LocalAddr() || p.TOS != 0x68 {
					t.Errorf("%s: datagram %d: Src %v Dst %v TOS %#x; want %v %v 0x68", addr, i, p.Src, p.Dst, p.TOS, a.SendAddr(), b.LocalAddr())
				}
				if !p.Local {
					t.Errorf("%s: datagram %d from a lane: Local false", addr, i)
				}
			}
			if as, bs := a.Stats(), b.Stats(); as.LocalOut != n || bs.LocalIn != n || as.WriteCalls != 0 {
				t.Errorf("%s: sender LocalOut %d WriteCalls %d, receiver LocalIn %d; want %d, 0, %d", addr, as.LocalOut, as.WriteCalls, bs.LocalIn, n, n)
			}

			// A reader waiting in ReadBatch is woken by what a lane brings.
			done := make(chan []link.Packet, 1)
			go func() { done <- readN(t, a, 1) }()
			waitSleeper(t, a)
			before := b.Stats().LocalWakes
			sendOne(t, b, a.LocalAddr(), netip.AddrPort{}, 0)
			select {
			case p := <-done:
				if p[0].N == 0 {
					t.Errorf("%s: woken with an empty datagram", addr)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: a reader waiting in ReadBatch was not woken by a lane write", addr)
			}
			if w := b.Stats().LocalWakes - before; w != 1 {
				t.Errorf("%s: %d wake-ups sent for one datagram to a sleeping reader, want 1", addr, w)
			}
		}
	}
}

// TestLocalFallback: a destination without an inbox, or whose inbox
// closed, is sent to through the socket.
func TestLocalFallback(t *testing.T) {
	a := listen(t, "127.0.0.1:0", WithLocal())
	plain := listen(t, "127.0.0.1:0")
	sendOne(t, a, plain.LocalAddr(), netip.AddrPort{}, 0)
	if p := readN(t, plain, 1); p[0].Local {
		t.Error("a datagram through the socket: Local true")
	}
	if s := a.Stats(); s.LocalOut != 0 || s.PacketsOut != 1 || s.WriteCalls != 1 {
		t.Errorf("to a plain endpoint: LocalOut %d PacketsOut %d WriteCalls %d; want 0, 1, 1", s.LocalOut, s.PacketsOut, s.WriteCalls)
	}
	b := listen(t, "127.0.0.1:0", WithLocal())
	// b also reads its socket: what came through it is not Local.
	sendOne(t, plain, b.LocalAddr(), netip.AddrPort{}, 0)
	if p := readN(t, b, 1); p[0].Local {
		t.Error("a datagram through a Local endpoint's socket: Local true")
	}
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	readN(t, b, 1)
	if s := a.Stats(); s.LocalOut != 1 {
		t.Fatalf("to a Local endpoint: LocalOut %d, want 1", s.LocalOut)
	}
	path := b.inbox.path
	b.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("inbox %s left after Close: %v", path, err)
	}
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	if s := a.Stats(); s.LocalOut != 1 || s.WriteCalls != 2 {
		t.Errorf("after the receiver closed: LocalOut %d WriteCalls %d; want 1, 2 (through the socket)", s.LocalOut, s.WriteCalls)
	}
}

// TestLocalBrokenLane writes records that break the format into a lane:
// the reader drops the lane's contents, counts it, and goes on.
func TestLocalBrokenLane(t *testing.T) {
	a, b := localPair(t, "127.0.0.1:0")
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0) // claims lane 0
	readN(t, b, 1)
	m := b.inbox.m
	ring := laneRing(m, 0)
	for _, bad := range []func(tail uint64) uint64{
		func(tail uint64) uint64 { // a length past the ring
			*(*uint32)(unsafe.Pointer(&ring[tail%laneSize])) = laneSize
			return tail + 64
		},
		func(tail uint64) uint64 { // a length under the ICRC
			*(*uint32)(unsafe.Pointer(&ring[tail%laneSize])) = 2
			return tail + 32
		},
		func(tail uint64) uint64 { // a bad address size
			r := ring[tail%laneSize:]
			*(*uint32)(unsafe.Pointer(&r[0])) = 40
			r[7] = 9
			return tail + 64
		},
		func(tail uint64) uint64 { // a head far past the tail
			return tail + 5*laneSize
		},
	} {
		tail := atomic.LoadUint64(m.u64(laneTail(0)))
		atomic.StoreUint64(m.u64(laneHead(0)), bad(tail))
		before := b.Stats().LocalCorrupt
		pk, err := b.PollBatch(linktest.Batch(8, 65536))
		if err != nil || pk != 0 {
			t.Errorf("PollBatch of a broken lane = %d, %v; want 0, nil", pk, err)
		}
		if b.Stats().LocalCorrupt != before+1 {
			t.Errorf("LocalCorrupt %d, want %d", b.Stats().LocalCorrupt, before+1)
		}
	}
	// The lane goes on: the sender writes after what the reader dropped.
	want := sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	if got := readN(t, b, 1); !bytes.Equal(got[0].Bytes(), want) {
		t.Errorf("after a broken lane: got %x, want %x", got[0].Bytes(), want)
	}
}

// FuzzLaneRecords hands the lane reader arbitrary records, head and tail:
// it must never panic nor read outside the ring, and what it delivers
// must fit the reader's buffers.
func FuzzLaneRecords(f *testing.F) {
	rec := func(n int, alen byte) []byte {
		r := make([]byte, (recHdr+n+7)&^7)
		*(*uint32)(unsafe.Pointer(&r[0])) = uint32(n)
		r[4], r[6], r[7] = 0x12, 0x68, alen
		return r
	}
	good := append(rec(100, 4), rec(100, 4)...)
	f.Add(good, uint64(0), uint64(len(good)), false)
	f.Add(good, uint64(laneSize-8), uint64(laneSize-8+uint64(len(good))), true)
	f.Add(append(rec(64, 16), rec(4000, 16)...), uint64(0), uint64(4200), true)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint64(0), uint64(8), false)
	mem := make([]byte, inboxHdrSize+laneSize)
	f.Fuzz(func(t *testing.T, data []byte, tail, head uint64, gro bool) {
		clear(mem[:inboxHdrSize])
		ring := mem[inboxHdrSize:]
		if len(data) > 1<<16 {
			data = data[:1<<16]
		}
		pos := int(tail % laneSize)
		n := copy(ring[pos:], data)
		copy(ring, data[n:])
		m := &mapping{mem: mem}
		*m.u64(laneHead(0)) = head
		*m.u64(laneTail(0)) = tail
		e := &Endpoint{inbox: &inbox{m: m}, gro: gro, batch: 8}
		q := &rxQueue{}
		q.alloc(8, gro)
		pkts := linktest.Batch(8, 2048)
		want := e.armRecv(q, pkts)
		k, _ := e.fillLocal(q.hdrs[:want])
		if k > want {
			t.Fatalf("filled %d of %d messages", k, want)
		}
		for i := 0; i < k; i++ {
			h := &q.hdrs[i]
			if h.hdr.Flags&0x20 == 0 && int(h.n) > int(q.iovs[i].Len) { // MSG_TRUNC
				t.Fatalf("message %d: %d bytes in a buffer of %d", i, h.n, q.iovs[i].Len)
			}
		}
		if nt := *m.u64(laneTail(0)); nt != head && k < want {
			t.Fatalf("tail %d short of head %d with messages to spare", nt, head)
		}
		e.decodeAll(q, k)

		// The same records handed in place (viewLocal).
		*m.u64(laneHead(0)) = head
		*m.u64(laneTail(0)) = tail
		e.inbox.reads = 0
		var sum byte
		n = 0
		k, _ = e.viewLocal(pkts, func(v []link.Packet) {
			for i := range v {
				p := &v[i]
				if p.N != len(p.Buf) || p.N > link.MaxDatagram || !p.Local {
					t.Fatalf("view %d: N %d, len %d, Local %v", i, p.N, len(p.Buf), p.Local)
				}
				for _, b := range p.Buf { // every byte inside the ring
					sum += b
				}
				n++
			}
		})
		if k != n || k > len(pkts) {
			t.Fatalf("viewLocal = %d, handed %d of %d", k, n, len(pkts))
		}
		if nt := *m.u64(laneTail(0)); nt != head && k < len(pkts) {
			t.Fatalf("viewLocal: tail %d short of head %d with packets to spare", nt, head)
		}
		e.inbox.pf.end() // the reader's page-in of the lane, started above
		e.inbox.pf.stop.Store(false)
		_ = sum
	})
}

// TestLocalWakeAllocs: a write to a sleeping reader, wake-up included,
// allocates nothing.
func TestLocalWakeAllocs(t *testing.T) {
	a, b := localPair(t, "127.0.0.1:0")
	wr := linktest.Batch(1, 0)
	wr[0].Buf = linktest.Packet(nil, 1, 1, make([]byte, 256))
	wr[0].N, wr[0].Dst = len(wr[0].Buf), b.LocalAddr()
	rd := linktest.Batch(b.BatchSize(), 65536)
	if !b.sleepLocal() { // b now looks asleep to its senders
		t.Fatal("sleepLocal with empty lanes = false")
	}
	defer b.wakeLocal()
	before, calls := a.Stats().LocalWakes, b.Stats().Syscalls
	allocs := testing.AllocsPerRun(50, func() {
		if k, err := a.WriteBatch(wr); k != 1 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for got := 0; got < 1; {
			if time.Now().After(deadline) {
				t.Fatal("the datagram did not arrive")
			}
			k, err := b.PollBatch(rd)
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
		b.PollBatch(rd) // the wake-up, dropped
		b.wakeLocal()   // b ran, and sleeps again
		if !b.sleepLocal() {
			t.Fatal("sleepLocal with empty lanes = false")
		}
	})
	if w := a.Stats().LocalWakes - before; w < 50 {
		t.Fatalf("%d wake-ups for 51 writes to a sleeping reader", w)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per write to a sleeping reader, want 0", allocs)
	}
	// Per write: a lane read (no system call), then a socket read for the
	// wake-up.
	if c := b.Stats().Syscalls - calls; c > 51 {
		t.Errorf("reader made %d system calls for 51 writes, want at most 51 (lane reads make none)", c)
	}
}

// TestLocalWakeCoalesced: writes to a reader that has not run since its
// wake-up send no second one; once it sleeps again, the next write wakes
// it (its socket turns readable); a wake-up the kernel refused lets the
// next writer send one, and so does one claimed wakeHold ago and never
// sent.
func TestLocalWakeCoalesced(t *testing.T) {
	old := wakeHold
	wakeHold = time.Hour // the rounds' writes, however slow the machine
	t.Cleanup(func() { wakeHold = old })
	a, b := localPair(t, "127.0.0.1:0")
	wr := linktest.Batch(1, 0)
	wr[0].Buf = linktest.Packet(nil, 1, 1, make([]byte, 256))
	wr[0].N, wr[0].Dst = len(wr[0].Buf), b.LocalAddr()
	rd := linktest.Batch(b.BatchSize(), 65536)
	fd := -1
	b.rc.Control(func(s uintptr) { fd = int(s) })
	readable := func() bool {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(p, 2000)
		return n == 1
	}
	// drain takes the k datagrams written and the wake-ups, and reports
	// how many datagrams came.
	drain := func(k int) int {
		got := 0
		for deadline := time.Now().Add(5 * time.Second); got < k && time.Now().Before(deadline); {
			n, err := b.PollBatch(rd)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		for {
			if n, _ := b.PollBatch(rd); n == 0 {
				return got
			}
		}
	}
	write := func() {
		t.Helper()
		if k, err := a.WriteBatch(wr); k != 1 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
	}
	for round := 0; round < 3; round++ {
		if !b.sleepLocal() {
			t.Fatalf("round %d: sleepLocal with empty lanes = false", round)
		}
		before := a.Stats().LocalWakes
		for range 5 {
			write()
		}
		if w := a.Stats().LocalWakes - before; w != 1 {
			t.Fatalf("round %d: %d wake-ups for 5 writes to a reader that slept once, want 1", round, w)
		}
		if !readable() {
			t.Fatalf("round %d: the reader's socket is not readable after the writes", round)
		}
		b.wakeLocal()
		if got := drain(5); got != 5 {
			t.Fatalf("round %d: %d datagrams, want 5", round, got)
		}
	}
	// A wake-up the kernel refused: the flag is cleared for the next writer.
	if !b.sleepLocal() {
		t.Fatal("sleepLocal with empty lanes = false")
	}
	defer b.wakeLocal()
	pr := a.tx.peers[b.LocalAddr()]
	if pr == nil || pr.m == nil {
		t.Fatal("a has no lane to b")
	}
	a.tx.mu.Lock()
	saved := a.tx.fd
	bad, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0) // sendto to an IP address fails
	if err != nil {
		a.tx.mu.Unlock()
		t.Fatal(err)
	}
	a.tx.fd = bad
	a.wakeSleepers(pr.m, b.LocalAddr())
	a.tx.fd = saved
	a.tx.mu.Unlock()
	unix.Close(bad)
	if v := atomic.LoadUint64(pr.m.u64(offWoken)); v != 0 {
		t.Fatalf("after a refused wake-up the wake-up time is %d, want 0", v)
	}
	write()
	if !readable() {
		t.Fatal("the write after a refused wake-up did not wake the reader")
	}
	drain(1)
	// A wake-up claimed and never sent (its writer died): it stands for
	// wakeHold only.
	b.wakeLocal()
	if !b.sleepLocal() {
		t.Fatal("sleepLocal with empty lanes = false")
	}
	wakeHold = 10 * time.Millisecond
	atomic.StoreUint64(pr.m.u64(offWoken), uint64(time.Now().UnixNano()))
	time.Sleep(2 * wakeHold)
	before := a.Stats().LocalWakes
	write()
	if w := a.Stats().LocalWakes - before; w != 1 {
		t.Fatalf("%d wake-ups after a stale one, want 1", w)
	}
	if !readable() {
		t.Fatal("the write after a stale wake-up did not wake the reader")
	}
	drain(1)
}

// TestLocalSweep: an inbox left by a process that ended without closing it
// is removed when another endpoint opens; a live one is kept.
func TestLocalSweep(t *testing.T) {
	dir := t.TempDir()
	old := inboxDir
	inboxDir = dir
	t.Cleanup(func() { inboxDir = old })
	write := func(name string, pid uint32) string {
		path := dir + "/" + name
		hdr := make([]byte, 16)
		*(*uint32)(unsafe.Pointer(&hdr[offMagic])) = inboxMagic
		*(*uint32)(unsafe.Pointer(&hdr[offPid])) = pid
		if err := os.WriteFile(path, hdr, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	prefix := "softroce." + strconv.Itoa(os.Getuid()) + "."
	dead := write(prefix+"1.7f000009.4791", 1<<22+12345) // above pid_max's default: no such process
	live := write(prefix+"1.7f00000a.4791", uint32(os.Getpid()))
	other := write("softroce.x.1.7f00000b.4791", 1<<22+12345)
	a := listen(t, "127.0.0.1:0", WithLocal())
	if a.inbox == nil {
		t.Fatal("no inbox")
	}
	for path, want := range map[string]bool{dead: false, live: true, other: true, a.inbox.path: true} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", path, err == nil, want)
		}
	}
}

// TestLocalFullLane: a writer waits for room in a full lane rather than
// drop (flow control); a lane whose reader takes nothing for localFullWait
// is stalled, and its writes drop at once until the reader takes
// something.
func TestLocalFullLane(t *testing.T) {
	a, b := localPair(t, "127.0.0.1:0")
	const per = 4000
	batch := linktest.Batch(32, 0)
	for i := range batch {
		batch[i].Buf = linktest.Packet(nil, 1, uint32(i), make([]byte, per))
		batch[i].N, batch[i].Dst = len(batch[i].Buf), b.LocalAddr()
	}
	fill := 2 * laneSize / (32 * per) // batches: twice what a lane holds
	// The reader starts 20 ms late: the writer waits for it. (Its
	// buffers are made first: made late, their megabytes of first touches
	// under the race detector on a loaded machine took it past
	// localFullWait.)
	got := make(chan int, 1)
	rd := linktest.Batch(b.BatchSize(), 65536)
	for i := range rd {
		clear(rd[i].Buf[:cap(rd[i].Buf)])
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		n := 0
		for deadline := time.Now().Add(10 * time.Second); n < fill*32 && time.Now().Before(deadline); {
			k, _ := b.PollBatch(rd)
			for _, p := range rd[:k] {
				if p.N > 0 {
					n++
				}
			}
		}
		got <- n
	}()
	for i := 0; i < fill; i++ {
		if k, err := a.WriteBatch(batch); k != 32 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
	}
	if n := <-got; n != fill*32 {
		t.Errorf("read %d of %d datagrams", n, fill*32)
	}
	if s := a.Stats(); s.LocalDrops != 0 || s.LocalFull == 0 {
		t.Errorf("LocalDrops %d LocalFull %d; want 0 and some", s.LocalDrops, s.LocalFull)
	}

	// Nobody reads now: the lane fills, one write waits localFullWait,
	// then the lane is stalled and drops without waiting.
	start := time.Now()
	for i := 0; i < fill; i++ {
		a.WriteBatch(batch)
	}
	if d := time.Since(start); d > 20*localFullWait {
		t.Errorf("writing to a stalled lane took %v", d)
	}
	drops := a.Stats().LocalDrops
	if drops == 0 {
		t.Fatal("no drops on a lane nobody reads")
	}
	// The reader takes something: the lane takes writes again.
	b.PollBatch(linktest.Batch(b.BatchSize(), 65536))
	if k, err := a.WriteBatch(batch[:1]); k != 1 || err != nil || a.Stats().LocalDrops != drops {
		t.Errorf("after the reader took some: WriteBatch = %d, %v; drops %d, want %d", k, err, a.Stats().LocalDrops, drops)
	}
}

// TestLocalDeadReceiver: a sender whose receiver's process is gone (killed:
// its inbox never closed) sends through the socket after its next check.
func TestLocalDeadReceiver(t *testing.T) {
	a, b := localPair(t, "127.0.0.1:0")
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	readN(t, b, 1)
	if s := a.Stats(); s.LocalOut != 1 {
		t.Fatalf("LocalOut %d, want 1", s.LocalOut)
	}
	// The receiver's process "dies": a pid that cannot exist, and the
	// sender's next check is due now.
	a.tx.mu.Lock()
	pr := a.tx.peers[b.LocalAddr()]
	pr.pid, pr.retry = 1<<22+12345, 0
	a.tx.mu.Unlock()
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	if s := a.Stats(); s.LocalOut != 1 || s.WriteCalls != 1 {
		t.Errorf("after the receiver's process ended: LocalOut %d WriteCalls %d; want 1, 1 (through the socket)", s.LocalOut, s.WriteCalls)
	}
}

// TestLocalLaneMapped: once a lane has carried prefaultAfter bytes, its
// whole ring is mapped in both the writer's and the reader's mapping of
// the inbox (prefaultLane, mapLane), and not before. Left to page faults,
// a lane's first pass stopped its writer and its reader at every 4 KiB
// page: on a VM with costly faults a 64 KiB ping-pong's first 64 round
// trips took ten times as long as the rest.
func TestLocalLaneMapped(t *testing.T) {
	a, b := localPair(t, "127.0.0.1:0")
	send := func(n int) {
		pkts := linktest.Batch(n, 0)
		for j := range pkts {
			pkts[j].Buf = linktest.Packet(nil, 0x11, uint32(j), make([]byte, 4000))
			pkts[j].N, pkts[j].Dst = len(pkts[j].Buf), b.LocalAddr()
		}
		if k, err := a.WriteBatch(pkts); k != n || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
		readN(t, b, n)
	}
	send(1)
	time.Sleep(50 * time.Millisecond)
	if sum := inboxResident(t, b.inbox.path); sum >= laneSize {
		t.Fatalf("%d KiB of the inbox resident after one datagram: paged in before the lane carried %d KiB", sum/1024, prefaultAfter/1024)
	}
	for sent := 0; sent < 2*prefaultAfter; sent += 32 * 4000 {
		send(32)
	}
	// The work runs beside the traffic: give it 10 s.
	var rss []int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		// Two mappings (the race detector's runtime may split them).
		rss = inboxRSS(t, b.inbox.path)
		sum := 0
		for _, kb := range rss {
			sum += kb * 1024
		}
		if sum >= 2*laneSize {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("resident KiB of each mapping of %s: %v 10 s after %d KiB; want the reader's and the writer's to hold at least a lane's %d KiB each", b.inbox.path, rss, 2*prefaultAfter/1024, laneSize/1024)
}

// inboxResident returns the resident bytes of path's mappings in this
// process.
func inboxResident(t *testing.T, path string) int {
	sum := 0
	for _, kb := range inboxRSS(t, path) {
		sum += kb * 1024
	}
	return sum
}

// inboxRSS returns the resident KiB of each mapping of path in this
// process.
func inboxRSS(t *testing.T, path string) []int {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatalf("reading /proc/self/smaps: %v", err)
	}
	var out []int
	in := false
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.Fields(line)
		switch {
		case len(f) >= 6 && bytes.Contains(f[0], []byte("-")) && !bytes.HasSuffix(f[0], []byte(":")):
			in = string(f[5]) == path
		case in && len(f) >= 2 && string(f[0]) == "Rss:":
			kb, _ := strconv.Atoi(string(f[1]))
			out = append(out, kb)
		}
	}
	return out
}

// waitSleeper waits until a reader of e is counted asleep in its inbox
// (within 10 s).
func waitSleeper(t *testing.T, e *Endpoint) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		e.inbox.mu.Lock()
		n := atomic.LoadInt32(e.inbox.m.i32(offSleepers))
		e.inbox.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no reader asleep on the inbox after 10 s")
		}
	}
}

// viewSink keeps TestLocalCloseDuringView's reads.
var viewSink byte

// TestLocalCloseDuringView: an endpoint closed while a handler holds lane
// records in place (viewLocal) keeps the ring mapped until the handler
// returns, then unmaps it: the views stay readable.
func TestLocalCloseDuringView(t *testing.T) {
	a, b := localPair(t, "127.0.0.1:0")
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	pkts := linktest.Batch(b.BatchSize(), 0)
	handled := 0
	for deadline := time.Now().Add(5 * time.Second); handled == 0 && time.Now().Before(deadline); {
		b.Poll(pkts, func(v []link.Packet) {
			b.Close()
			var sum byte
			for i := range v {
				for _, c := range v[i].Bytes() { // a fault here if the ring was unmapped
					sum += c
				}
			}
			handled += len(v)
			viewSink += sum
		})
	}
	if handled == 0 {
		t.Fatal("Poll handed nothing from the lane")
	}
	b.inbox.mu.Lock()
	m := b.inbox.m
	b.inbox.mu.Unlock()
	if m != nil {
		t.Error("the inbox is still mapped after the last handler returned")
	}
}

// TestLocalReplacedInbox: a new endpoint at a peer's address replaces its
// inbox (the peer's process ended without closing it: killed, or a C
// program's exit); a sender that still maps the old one must write to the
// new one at its next batch, not into the old ring until its next check of
// the peer's process (a second later). The old file is marked closed
// before it goes (markClosed), and a sender that finds its peer closed
// looks for the address's inbox again at once.
func TestLocalReplacedInbox(t *testing.T) {
	a, b := localPair(t, "127.0.0.1:0")
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	readN(t, b, 1)
	in2, err := openInbox(-1, b.netns, b.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer in2.close()
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	in2.mu.Lock()
	got := in2.pendingLocked()
	in2.mu.Unlock()
	if !got {
		t.Errorf("the datagram sent after the inbox was replaced is not in the new inbox (LocalOut %d)", a.Stats().LocalOut)
	}
}

// TestLocalDeadInboxFile: an inbox file whose process ended (killed, its
// file not yet replaced by a new process at the address) is not written
// to: its lanes are never read, and a connection's first messages were
// lost so until a resend.
func TestLocalDeadInboxFile(t *testing.T) {
	dir := t.TempDir()
	old := inboxDir
	inboxDir = dir
	t.Cleanup(func() { inboxDir = old })
	a := listen(t, "127.0.0.1:0", WithLocal())
	if a.inbox == nil {
		t.Skip("no same-host lanes here")
	}
	dst := netip.MustParseAddrPort("127.0.0.1:9") // nothing listens
	path := inboxPath(a.netns, dst)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, inboxFileSize); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 16)
	*(*uint32)(unsafe.Pointer(&hdr[offMagic])) = inboxMagic
	*(*uint32)(unsafe.Pointer(&hdr[offVersion])) = inboxVersion
	*(*uint32)(unsafe.Pointer(&hdr[offPid])) = 1<<22 + 12345 // above pid_max's default: no such process
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(hdr, 0)
	f.Close()
	sendOne(t, a, dst, netip.AddrPort{}, 0)
	if s := a.Stats(); s.LocalOut != 0 || s.LocalPeers != 0 {
		t.Errorf("LocalOut %d, LocalPeers %d: a lane of a dead process's inbox was written", s.LocalOut, s.LocalPeers)
	}
}

// TestPending: Pending reports datagrams waiting, in a lane or in the
// socket, without reading them; nothing after they are read.
func TestPending(t *testing.T) {
	for _, local := range []bool{true, false} {
		var a, b *Endpoint
		if local {
			a, b = localPair(t, "127.0.0.1:0")
		} else {
			a, b = listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
		}
		var _ link.Pender = b
		if b.Pending() {
			t.Fatalf("local %v: Pending before anything was sent", local)
		}
		pkts := linktest.Batch(3, 0)
		for j := range pkts {
			pkts[j].Buf = linktest.Packet(nil, 0x11, uint32(j), linktest.Payload(j, 100))
			pkts[j].N, pkts[j].Dst = len(pkts[j].Buf), b.LocalAddr()
		}
		if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for !b.Pending() {
			if time.Now().After(deadline) {
				t.Fatalf("local %v: Pending false for 5 s after 3 datagrams", local)
			}
			time.Sleep(time.Millisecond)
		}
		readN(t, b, 3)
		for b.Pending() { // a lane's wake-up datagram may follow
			if n, _ := b.PollBatch(linktest.Batch(4, 65536)); n != 0 || time.Now().After(deadline) {
				t.Fatalf("local %v: Pending with %d more datagrams read", local, n)
			}
		}
		if st := b.Stats(); local && st.LocalIn != 3 {
			t.Errorf("LocalIn %d, want 3", st.LocalIn)
		}
		b.Close()
		if b.Pending() {
			t.Errorf("local %v: Pending after Close", local)
		}
	}
}
