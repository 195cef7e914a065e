package pipe

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newPair(t testing.TB, a, b Config) (*Endpoint, *Endpoint) {
	t.Helper()
	ea, eb, err := New(a, b)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { ea.Close(); eb.Close() })
	return ea, eb
}

func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		a, b Config
	}{
		{"IPv4", Config{}, Config{}},
		{"IPv6-jumbo", Config{Addr: netip.MustParseAddrPort("[fd00::1]:4791"), MTU: 9000},
			Config{Addr: netip.MustParseAddrPort("[fd00::2]:4791"), MTU: 9000}},
		{"small-batch", Config{BatchSize: 3}, Config{BatchSize: 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			linktest.Run(t, func(t testing.TB) (link.Endpoint, link.Endpoint) {
				return newPair(t, c.a, c.b)
			})
		})
	}
}

func TestDefaults(t *testing.T) {
	a, b := newPair(t, Config{}, Config{})
	if a.LocalAddr() != DefaultAddrA || b.LocalAddr() != DefaultAddrB || a.MTU() != DefaultMTU || a.BatchSize() != DefaultBatchSize {
		t.Errorf("got %v %v MTU %d batch %d", a.LocalAddr(), b.LocalAddr(), a.MTU(), a.BatchSize())
	}
	if a.Peer() != b || b.Peer() != a {
		t.Error("Peer() does not return the other end")
	}
}

func TestBadConfig(t *testing.T) {
	v6 := Config{Addr: netip.MustParseAddrPort("[fd00::1]:4791")}
	for _, c := range []struct{ a, b Config }{
		{v6, Config{}},
		{Config{Addr: DefaultAddrB}, Config{}},
		{Config{Addr: netip.MustParseAddrPort("0.0.0.0:4791")}, Config{}},
		{Config{Addr: netip.MustParseAddrPort("10.0.0.1:0")}, Config{}},
		{Config{MTU: 100}, Config{}},
		{Config{QueueLen: -1}, Config{}},
		{Config{Faults: Faults{Loss: 1.5}}, Config{}},
		{Config{Faults: Faults{Delay: -1}}, Config{}},
	} {
		if _, _, err := New(c.a, c.b); err == nil {
			t.Errorf("New(%+v, %+v) succeeded", c.a, c.b)
		}
	}
	a, _ := newPair(t, Config{}, Config{})
	if err := a.SetFaults(Faults{Corrupt: -0.1}); err == nil {
		t.Error("SetFaults with a negative rate succeeded")
	}
}

// packets returns n datagrams to dst with PSNs first, first+1, ...
func packets(dst netip.AddrPort, first, n, size int) []link.Packet {
	pkts := linktest.Batch(n, 0)
	for i := range pkts {
		pkts[i].Buf = linktest.Packet(make([]byte, 0, 64+size), 0x11, uint32(first+i), linktest.Payload(first+i, size))
		pkts[i].N = len(pkts[i].Buf)
		pkts[i].Dst = dst
	}
	return pkts
}

func psn(b []byte) uint32 { return binary.BigEndian.Uint32(b[8:]) & 0xFFFFFF }

// arrival is what the receiver saw of one datagram.
type arrival struct {
	PSN  uint32
	At   time.Duration // since the first write
	ICRC bool          // VerifyICRC with the reported header
}

// run sends n datagrams from a to b inside a synctest bubble, batch
// datagrams every millisecond, and returns what b received and a's stats.
func run(t *testing.T, a, b Config, n, batch int) (got []arrival, st Stats) {
	synctest.Test(t, func(t *testing.T) {
		ea, eb, err := New(a, b)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := linktest.Batch(eb.BatchSize(), 2048)
			for {
				k, err := eb.ReadBatch(buf)
				if err != nil {
					return
				}
				for _, p := range buf[:k] {
					got = append(got, arrival{psn(p.Bytes()), time.Since(start),
						wire.VerifyICRC(p.IPHdr[:p.IPHdrLen], p.Src.Port(), p.Dst.Port(), p.Bytes())})
				}
			}
		}()
		for i := 0; i < n; i += batch {
			pkts := packets(eb.LocalAddr(), i, min(batch, n-i), 64+i%200)
			if k, err := ea.WriteBatch(pkts); k != len(pkts) || err != nil {
				t.Errorf("WriteBatch = %d, %v", k, err)
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		st = ea.Stats()
		eb.Close()
		<-done
		ea.Close()
	})
	return got, st
}

func psns(as []arrival) []uint32 {
	r := make([]uint32, len(as))
	for i, a := range as {
		r[i] = a.PSN
	}
	return r
}

// checkDeterministic runs the same scenario twice with one seed and once
// with another and returns the first run.
func checkDeterministic(t *testing.T, f Faults, n, batch int) ([]arrival, Stats) {
	t.Helper()
	got1, st1 := run(t, Config{Faults: f, Seed: 1}, Config{}, n, batch)
	got2, st2 := run(t, Config{Faults: f, Seed: 1}, Config{}, n, batch)
	if d := cmp.Diff(got1, got2); d != "" {
		t.Errorf("same seed, different arrivals (-run1 +run2):\n%s", d)
	}
	if st1 != st2 {
		t.Errorf("same seed, different stats: %+v vs %+v", st1, st2)
	}
	got3, _ := run(t, Config{Faults: f, Seed: 2}, Config{}, n, batch)
	if cmp.Equal(got1, got3) {
		t.Errorf("seeds 1 and 2 gave identical arrivals")
	}
	return got1, st1
}

func TestNoFaults(t *testing.T) {
	got, st := run(t, Config{}, Config{}, 100, 10)
	want := make([]uint32, 100)
	for i := range want {
		want[i] = uint32(i)
	}
	if d := cmp.Diff(want, psns(got)); d != "" {
		t.Errorf("arrivals (-want +got):\n%s", d)
	}
	for _, a := range got {
		if !a.ICRC || a.At != time.Duration(a.PSN/10)*time.Millisecond {
			t.Errorf("arrival %+v: want ICRC ok, no delay", a)
		}
	}
	if st.PacketsOut != 100 || st.Lost+st.Duplicated+st.Corrupted+st.Reordered+st.Delayed != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestLoss(t *testing.T) {
	got, st := checkDeterministic(t, Faults{Loss: 0.2}, 1000, 16)
	if len(got)+int(st.Lost) != 1000 || st.Lost < 120 || st.Lost > 280 {
		t.Errorf("received %d, lost %d of 1000 at rate 0.2", len(got), st.Lost)
	}
	for i := 1; i < len(got); i++ {
		if got[i].PSN <= got[i-1].PSN {
			t.Fatalf("loss reordered: %d after %d", got[i].PSN, got[i-1].PSN)
		}
	}
}

func TestDuplicate(t *testing.T) {
	got, st := checkDeterministic(t, Faults{Duplicate: 0.1}, 1000, 16)
	if len(got) != 1000+int(st.Duplicated) || st.Duplicated < 50 || st.Duplicated > 150 {
		t.Errorf("received %d, duplicated %d of 1000 at rate 0.1", len(got), st.Duplicated)
	}
	dups := 0
	for i := 1; i < len(got); i++ {
		switch {
		case got[i].PSN == got[i-1].PSN:
			dups++
		case got[i].PSN != got[i-1].PSN+1:
			t.Fatalf("duplication reordered: %d after %d", got[i].PSN, got[i-1].PSN)
		}
	}
	if dups != int(st.Duplicated) {
		t.Errorf("%d adjacent duplicates, Stats.Duplicated %d", dups, st.Duplicated)
	}
}

func TestReorder(t *testing.T) {
	const max = 4
	got, st := checkDeterministic(t, Faults{Reorder: 0.1, ReorderMax: max}, 1000, 16)
	if len(got) != 1000 || st.Reordered < 50 || st.Reordered > 150 {
		t.Fatalf("received %d, reordered %d of 1000 at rate 0.1", len(got), st.Reordered)
	}
	seen := make(map[uint32]bool)
	late := 0
	for i, a := range got {
		if seen[a.PSN] {
			t.Fatalf("PSN %d twice", a.PSN)
		}
		seen[a.PSN] = true
		if d := i - int(a.PSN); d > 2*max || d < -2*max {
			t.Errorf("PSN %d displaced by %d (max %d)", a.PSN, d, max)
		}
		if i > 0 && a.PSN < got[i-1].PSN {
			late++
		}
	}
	if late == 0 || late > int(st.Reordered) {
		t.Errorf("%d late arrivals, %d reordered", late, st.Reordered)
	}
}

// TestReorderTimeout: a held datagram with nothing behind it arrives after
// ReorderTimeout.
func TestReorderTimeout(t *testing.T) {
	got, st := run(t, Config{Faults: Faults{Reorder: 1, ReorderTimeout: 5 * time.Millisecond}}, Config{}, 1, 1)
	if len(got) != 1 || got[0].At != 5*time.Millisecond || st.Reordered != 1 {
		t.Errorf("got %+v, stats %+v; want one arrival at 5ms", got, st)
	}
}

func TestDelay(t *testing.T) {
	got, st := run(t, Config{Faults: Faults{Delay: 10 * time.Millisecond}}, Config{}, 50, 5)
	if len(got) != 50 || st.Delayed != 50 {
		t.Fatalf("received %d, delayed %d", len(got), st.Delayed)
	}
	for _, a := range got {
		if want := time.Duration(a.PSN/5)*time.Millisecond + 10*time.Millisecond; a.At != want {
			t.Errorf("PSN %d arrived at %v, want %v", a.PSN, a.At, want)
		}
	}
	got, _ = checkDeterministic(t, Faults{Delay: 10 * time.Millisecond, Jitter: 5 * time.Millisecond}, 200, 5)
	if len(got) != 200 {
		t.Fatalf("received %d of 200", len(got))
	}
	for _, a := range got {
		sent := time.Duration(a.PSN/5) * time.Millisecond
		if d := a.At - sent; d < 10*time.Millisecond || d >= 15*time.Millisecond {
			t.Errorf("PSN %d delayed %v, want [10ms, 15ms)", a.PSN, d)
		}
	}
}

func TestCorrupt(t *testing.T) {
	got, st := checkDeterministic(t, Faults{Corrupt: 0.3}, 1000, 16)
	if len(got) != 1000 || st.Corrupted < 200 || st.Corrupted > 400 {
		t.Fatalf("received %d, corrupted %d of 1000 at rate 0.3", len(got), st.Corrupted)
	}
	bad := 0
	for _, a := range got {
		if !a.ICRC {
			bad++
		}
	}
	if bad != int(st.Corrupted) {
		t.Errorf("%d datagrams fail the ICRC, %d corrupted", bad, st.Corrupted)
	}
}

// TestCorruptDetectedByAddrs: the address-only check a UDP receiver does
// also catches corruption.
func TestCorruptDetectedByAddrs(t *testing.T) {
	a, b := newPair(t, Config{Faults: Faults{Corrupt: 1}, Seed: 7}, Config{})
	pkts := packets(b.LocalAddr(), 0, 50, 100)
	a.WriteBatch(pkts)
	buf := linktest.Batch(64, 2048)
	n, err := b.ReadBatch(buf)
	if err != nil || n != 50 {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}
	for _, p := range buf[:n] {
		if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); ok {
			t.Errorf("corrupted PSN %d passes VerifyICRCAddrs", psn(p.Bytes()))
		}
	}
}

func TestFilter(t *testing.T) {
	var tapped []uint32
	f := func(p *link.Packet) Verdict {
		n := psn(p.Bytes())
		tapped = append(tapped, n)
		switch n % 3 {
		case 0:
			return Drop
		case 1:
			p.Buf[p.N-5] ^= 0xFF // damage the payload: the ICRC fails
		}
		return Pass
	}
	got, st := run(t, Config{Filter: f}, Config{}, 30, 5)
	if len(tapped) != 30 || st.Filtered != 10 || len(got) != 20 {
		t.Fatalf("tapped %d, filtered %d, received %d", len(tapped), st.Filtered, len(got))
	}
	for _, a := range got {
		if a.PSN%3 == 0 || a.ICRC != (a.PSN%3 == 2) {
			t.Errorf("arrival %+v", a)
		}
	}
	a, _ := newPair(t, Config{}, Config{})
	a.SetFilter(nil)
}

func TestQueueFull(t *testing.T) {
	a, b := newPair(t, Config{}, Config{QueueLen: 8})
	if n, err := a.WriteBatch(packets(b.LocalAddr(), 0, 20, 10)); n != 20 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	if st := a.Stats(); st.QueueDrops != 12 {
		t.Errorf("QueueDrops = %d, want 12", st.QueueDrops)
	}
	buf := linktest.Batch(64, 2048)
	if n, err := b.ReadBatch(buf); n != 8 || err != nil || psn(buf[7].Bytes()) != 7 {
		t.Errorf("ReadBatch = %d, %v", n, err)
	}
}

func TestNoRoute(t *testing.T) {
	a, b := newPair(t, Config{}, Config{})
	pkts := packets(netip.MustParseAddrPort("10.0.0.9:4791"), 0, 1, 10)
	pkts = append(pkts, packets(netip.AddrPortFrom(b.LocalAddr().Addr(), 1234), 1, 1, 10)...)
	pkts = append(pkts, packets(b.LocalAddr(), 2, 1, 10)...)
	if n, err := a.WriteBatch(pkts); n != 3 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	buf := linktest.Batch(4, 2048)
	if n, err := b.ReadBatch(buf); n != 1 || err != nil || psn(buf[0].Bytes()) != 2 {
		t.Errorf("ReadBatch = %d, %v", n, err)
	}
	if st := a.Stats(); st.NoRoute != 2 {
		t.Errorf("NoRoute = %d, want 2", st.NoRoute)
	}
}

func TestMTU(t *testing.T) {
	a, b := newPair(t, Config{MTU: 1500}, Config{})
	ok := packets(b.LocalAddr(), 0, 1, 1500-28-12-4)
	if n, err := a.WriteBatch(ok); n != 1 || err != nil {
		t.Fatalf("WriteBatch of a 1500-byte IP packet = %d, %v", n, err)
	}
	big := packets(b.LocalAddr(), 0, 1, 1500-28-12-4+1)
	if n, err := a.WriteBatch(big); n != 0 || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("WriteBatch of a 1501-byte IP packet = %d, %v; want EMSGSIZE", n, err)
	}
	bad := packets(netip.MustParseAddrPort("[fd00::2]:4791"), 0, 1, 10)
	if n, err := a.WriteBatch(bad); n != 0 || !errors.Is(err, ErrBadAddr) {
		t.Fatalf("WriteBatch to IPv6 = %d, %v; want ErrBadAddr", n, err)
	}
	small := linktest.Batch(1, 1000)
	big = packets(b.LocalAddr(), 1, 1, 1200)
	a.WriteBatch(big)
	buf := linktest.Batch(1, 2048)
	b.ReadBatch(buf) // the first one
	if n, err := b.ReadBatch(small); n != 1 || err != nil || small[0].N != 0 || b.Stats().Truncated != 1 {
		t.Errorf("ReadBatch into a small buffer = %d, %v, N %d, stats %+v", n, err, small[0].N, b.Stats())
	}
}

// TestHeader checks the synthesized IP header and TOS/TTL.
func TestHeader(t *testing.T) {
	for _, c := range []struct{ a, b string }{{"192.0.2.1:4791", "192.0.2.2:5000"}, {"[2001:db8::1]:4791", "[2001:db8::2]:4791"}} {
		a, b := newPair(t, Config{Addr: netip.MustParseAddrPort(c.a)}, Config{Addr: netip.MustParseAddrPort(c.b)})
		pkts := packets(b.LocalAddr(), 0, 2, 33)
		pkts[1].TOS, pkts[1].TTL = 0x03, 9
		a.WriteBatch(pkts)
		buf := linktest.Batch(2, 2048)
		if n, _ := b.ReadBatch(buf); n != 2 {
			t.Fatalf("got %d", n)
		}
		for i, p := range buf {
			h := p.IPHdr[:p.IPHdrLen]
			if !wire.VerifyICRC(h, p.Src.Port(), p.Dst.Port(), p.Bytes()) {
				t.Errorf("%s: VerifyICRC with %x failed", c.a, h)
			}
			wantTOS, wantTTL := pkts[i].TOS, pkts[i].TTL
			if wantTTL == 0 {
				wantTTL = DefaultTTL
			}
			if p.TOS != wantTOS {
				t.Errorf("TOS %#x, want %#x", p.TOS, wantTOS)
			}
			if len(h) == 20 {
				var sum uint32
				for j := 0; j < 20; j += 2 {
					sum += uint32(binary.BigEndian.Uint16(h[j:]))
				}
				for sum > 0xFFFF {
					sum = sum&0xFFFF + sum>>16
				}
				if sum != 0xFFFF || h[1] != wantTOS || h[8] != wantTTL || h[6] != 0x40 || h[4]|h[5] != 0 {
					t.Errorf("IPv4 header %x", h)
				}
			} else if tc := h[0]<<4 | h[1]>>4; tc != wantTOS || h[7] != wantTTL {
				t.Errorf("IPv6 header %x", h)
			}
		}
	}
}

// TestPeerClose: after one end closes, the other still reads what was sent
// to it, and its writes to the closed end are dropped and counted.
func TestPeerClose(t *testing.T) {
	a, b := newPair(t, Config{}, Config{})
	a.WriteBatch(packets(b.LocalAddr(), 0, 3, 10))
	b.WriteBatch(packets(a.LocalAddr(), 0, 2, 10))
	a.Close()
	buf := linktest.Batch(8, 2048)
	if n, err := b.ReadBatch(buf); n != 3 || err != nil {
		t.Errorf("ReadBatch after the peer closed = %d, %v", n, err)
	}
	if n, err := b.WriteBatch(packets(a.LocalAddr(), 0, 2, 10)); n != 2 || err != nil {
		t.Errorf("WriteBatch to a closed peer = %d, %v", n, err)
	}
	if st := b.Stats(); st.PeerClosed != 2 {
		t.Errorf("PeerClosed = %d, want 2", st.PeerClosed)
	}
	if _, err := a.ReadBatch(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatch on the closed end: %v", err)
	}
	if _, err := a.ReadBatch(nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatch(nil) on the closed end: %v", err)
	}
}

func TestZeroAllocs(t *testing.T) {
	for _, f := range []Faults{{}, {Loss: 0.1, Duplicate: 0.1, Corrupt: 0.1, Reorder: 0.1, Jitter: 1}} {
		a, b := newPair(t, Config{Faults: f, MTU: 9000}, Config{MTU: 9000})
		const n = 32
		wr, rd := packets(b.LocalAddr(), 0, n, 4096), linktest.Batch(n, 8192)
		round := func() {
			if k, err := a.WriteBatch(wr); k != n || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			for {
				b.mu.Lock()
				left := len(b.q) + len(b.held)
				b.mu.Unlock()
				if left == 0 {
					break
				}
				if _, err := b.ReadBatch(rd); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := 0; i < 10; i++ {
			round() // warm the pool
		}
		if allocs := testing.AllocsPerRun(50, round); allocs != 0 {
			t.Errorf("faults %+v: %v allocations per batch of %d, want 0", f, allocs, n)
		}
	}
}

func BenchmarkPipe(b *testing.B) {
	x, y, err := New(Config{MTU: 9000}, Config{MTU: 9000})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	defer y.Close()
	const n = 32
	wr, rd := packets(y.LocalAddr(), 0, n, 4096), linktest.Batch(n, 8192)
	round := func(m int) {
		x.WriteBatch(wr[:m])
		for got := 0; got < m; {
			k, _ := y.ReadBatch(rd)
			got += k
		}
	}
	round(n) // fill the buffer pool
	b.SetBytes(int64(wr[0].N))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += n {
		round(min(n, b.N-i))
	}
}

// TestStress runs a writer and a reader concurrently with every fault on,
// in real time, and checks that every datagram is accounted for.
func TestStress(t *testing.T) {
	f := Faults{Loss: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Delay: 50 * time.Microsecond, Jitter: 100 * time.Microsecond}
	a, b := newPair(t, Config{Faults: f, Seed: 3}, Config{QueueLen: 256})
	const n = 5000
	got := make(chan int)
	go func() {
		buf := linktest.Batch(64, 2048)
		count := 0
		for {
			k, err := b.ReadBatch(buf)
			if err != nil {
				got <- count
				return
			}
			count += k
		}
	}()
	for i := 0; i < n; i += 50 {
		if k, err := a.WriteBatch(packets(b.LocalAddr(), i, 50, 100)); k != 50 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
		if i%500 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	// Wait until everything in flight has arrived.
	deadline := time.Now().Add(linktest.Timeout)
	for {
		b.mu.Lock()
		left := len(b.q) + len(b.held)
		b.mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	b.Close()
	count := <-got
	st := a.Stats()
	if want := n - int(st.Lost) - int(st.QueueDrops) + int(st.Duplicated); count != want {
		t.Errorf("received %d, want %d (stats %+v)", count, want, st)
	}
	if st.Lost == 0 || st.Duplicated == 0 || st.Corrupted == 0 || st.Reordered == 0 || st.Delayed == 0 {
		t.Errorf("some fault never happened: %+v", st)
	}
}

// TestGatherWrite: an end with Config.GatherWrite says so in its
// capabilities, with the receive buffer Config.ReceiveBuffer names, and
// sends a datagram put together from Buf and Data in place, with its ICRC
// over the whole and written back to Buf, the MTU counting Data too;
// without it Data is ignored.
func TestGatherWrite(t *testing.T) {
	a, b, err := New(Config{MTU: 576, GatherWrite: true, ReceiveBuffer: 1 << 20}, Config{MTU: 576})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	if c := link.CapabilitiesOf(a); !c.GatherWrite || c.ReceiveBuffer != 1<<20 || c.SendAddr != a.LocalAddr() || c.ReportsSource {
		t.Errorf("Capabilities = %+v", c)
	}
	if c := link.CapabilitiesOf(b); c.GatherWrite || c.ReceiveBuffer != 0 {
		t.Errorf("plain end's Capabilities = %+v", c)
	}
	buf := []byte("HEADERSpad.ICRC")
	pk := []link.Packet{{Buf: buf, N: len(buf), Data: []byte("payload"), DataAt: 7, Dst: b.LocalAddr()}}
	if n, err := a.WriteBatch(pk); n != 1 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	in := []link.Packet{{Buf: make([]byte, 2048)}}
	if n, err := b.ReadBatch(in); n != 1 || err != nil {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}
	got := in[0].Bytes()
	if string(got[:len(got)-4]) != "HEADERSpayloadpad." {
		t.Errorf("received %q, want HEADERSpayloadpad. and the ICRC", got)
	}
	if id, ok := wire.VerifyICRCAddrs(a.LocalAddr(), b.LocalAddr(), got); !ok || id != 0 {
		t.Errorf("received datagram's ICRC does not check")
	}
	if string(buf[len(buf)-4:]) != string(got[len(got)-4:]) {
		t.Errorf("ICRC %x not written back to Buf (%x)", got[len(got)-4:], buf[len(buf)-4:])
	}
	// 576 - 28 bytes of IPv4 and UDP headers: 548 bytes fit, 549 do not.
	big := []link.Packet{{Buf: buf, N: len(buf), Data: make([]byte, 548-len(buf)+1), DataAt: 7, Dst: b.LocalAddr()}}
	if _, err := a.WriteBatch(big); !errors.Is(err, syscall.EMSGSIZE) {
		t.Errorf("gathered datagram over the MTU: err = %v, want EMSGSIZE", err)
	}
	big[0].Data = big[0].Data[1:]
	if n, err := a.WriteBatch(big); n != 1 || err != nil {
		t.Errorf("gathered datagram at the MTU: WriteBatch = %d, %v", n, err)
	}
	// Without GatherWrite, Data is not sent.
	pk[0].Dst = a.LocalAddr()
	if n, err := b.WriteBatch(pk); n != 1 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	if n, err := a.ReadBatch(in); n != 1 || err != nil || in[0].N != len(buf) {
		t.Fatalf("ReadBatch = %d, %v, %d bytes; want 1, nil, %d", n, err, in[0].N, len(buf))
	}
}

// TestPending: Pending reports a datagram due for ReadBatch without
// reading it; not one still delayed, nor after it was read or Close.
func TestPending(t *testing.T) {
	a, b, err := New(Config{}, Config{Faults: Faults{Delay: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	send := func(from, to *Endpoint) {
		t.Helper()
		p := linktest.Packet(nil, 0x04, 1, linktest.Payload(1, 16))
		if n, err := from.WriteBatch([]link.Packet{{Buf: p, N: len(p), Dst: to.LocalAddr()}}); n != 1 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
	}
	if b.Pending() {
		t.Fatal("Pending before anything was sent")
	}
	send(a, b)
	if !b.Pending() {
		t.Fatal("Pending false with a datagram due")
	}
	if _, err := b.ReadBatch(linktest.Batch(4, 65536)); err != nil || b.Pending() {
		t.Fatalf("after ReadBatch (%v): Pending %v", err, b.Pending())
	}
	send(b, a) // delayed 50 ms
	if a.Pending() {
		t.Error("Pending with the only datagram still delayed")
	}
	b.Close()
	send(a, b)
	if b.Pending() {
		t.Error("Pending after Close")
	}
}
