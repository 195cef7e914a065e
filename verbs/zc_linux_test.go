package verbs

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/wire"
)

// udpPair opens two devices on 127.0.0.1 and 127.0.0.2 over real UDP
// sockets (link/udp, which gathers: link.Capabilities.GatherWrite) with one
// connected QP each.
func udpPair(t *testing.T, o pairOpts) (*side, *side) {
	t.Helper()
	open := func(addr string) link.Endpoint {
		ep, err := udp.Listen(netip.MustParseAddrPort(addr), udp.WithAnyPort())
		if err != nil {
			t.Skip("UDP loopback unavailable:", err)
		}
		return ep
	}
	return newPairOn(t, open("127.0.0.1:0"), open("127.0.0.2:0"), o)
}

// TestZeroCopySend moves SENDs, a WRITE and a READ whose packets lie in one
// SGE (sent in place from the MR), span two SGEs or are small (copied), with
// and without Config.NoZeroCopySend, and checks the data and which packets
// went zero-copy: every full packet of one SGE, the READ responses too, and
// none of the others.
func TestZeroCopySend(t *testing.T) {
	if raceEnabled {
		t.Skip("a build with the race detector sends no payload zero-copy (racedetect_on.go); the tests without -race cover it")
	}
	for _, noZC := range []bool{false, true} {
		a, b := udpPair(t, pairOpts{pmtu: wire.MTU1024, noZC: noZC})
		if !a.dev.zc == !noZC {
			t.Fatalf("device zero-copy %v with NoZeroCopySend %v", a.dev.zc, noZC)
		}
		fill(a.buf[:300000], 7)
		fill(b.buf[500000:600000], 9)
		postRecv(t, b, 1, 0, 8192)
		postRecv(t, b, 2, 8192, 8192)
		postRecv(t, b, 3, 16384, 8192)
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 5000)}) // 5 packets in place
		// 700 + 900 bytes: the first packet spans both SGEs (copied), the
		// second (576 bytes) lies in the second one (in place).
		post(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled,
			SGList: []SGE{sge(a, 10000, 700)[0], sge(a, 20000, 900)[0]}})
		post(t, a.qp, SendWR{WRID: 3, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 30000, 100)}) // small: copied
		post(t, a.qp, SendWR{WRID: 4, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 40001, 10001),
			RemoteAddr: b.mr.Addr() + 100003, RKey: b.mr.RKey()}) // 10 packets in place, the last with a pad
		post(t, a.qp, SendWR{WRID: 5, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 200000, 20000),
			RemoteAddr: b.mr.Addr() + 500000, RKey: b.mr.RKey()}) // 20 responses in place on b
		// A last small SEND: its completion on b orders the WRITE's data
		// before b's reads (for the race detector, as for an application).
		postRecv(t, b, 4, 24576, 64)
		post(t, a.qp, SendWR{WRID: 6, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 30000, 8)})
		for _, wc := range waitWC(t, a.scq, 6, 10*time.Second) {
			if wc.Status != WCSuccess {
				t.Fatalf("noZC %v: %+v", noZC, wc)
			}
		}
		waitWC(t, b.rcq, 4, 10*time.Second)
		mustEqual(t, b.buf[:5000], a.buf[:5000])
		mustEqual(t, b.buf[8192:8192+700], a.buf[10000:10700])
		mustEqual(t, b.buf[8192+700:8192+1600], a.buf[20000:20900])
		mustEqual(t, b.buf[16384:16484], a.buf[30000:30100])
		mustEqual(t, b.buf[100003:110004], a.buf[40001:50002])
		mustEqual(t, a.buf[200000:220000], b.buf[500000:520000])
		za, zb := a.dev.stats.ZeroCopyPackets.Load(), b.dev.stats.ZeroCopyPackets.Load()
		wantA, wantB := uint64(5+1+10), uint64(20)
		if noZC {
			wantA, wantB = 0, 0
		}
		if a.dev.stats.Retransmits.Load()+b.dev.stats.Retransmits.Load() > 0 {
			if za < wantA || zb < wantB {
				t.Errorf("noZC %v: zero-copy packets %d and %d, want at least %d and %d", noZC, za, zb, wantA, wantB)
			}
		} else if za != wantA || zb != wantB {
			t.Errorf("noZC %v: zero-copy packets %d and %d, want %d and %d", noZC, za, zb, wantA, wantB)
		}
		// TxBytes counts a payload sent in place as well: each side sent
		// what the other received (loopback loses nothing), datagram bytes.
		// A sender counts after its system call returns, which can be after
		// the receiver handled the datagrams: wait (bounded) for the counts.
		for _, d := range [][2]*side{{a, b}, {b, a}} {
			deadline := time.Now().Add(2 * time.Second)
			tx, rx := d[0].dev.stats.TxBytes.Load(), d[1].dev.stats.RxBytes.Load()
			for tx != rx && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
				tx, rx = d[0].dev.stats.TxBytes.Load(), d[1].dev.stats.RxBytes.Load()
			}
			if tx != rx {
				t.Errorf("noZC %v: one side's TxBytes %d, the other's RxBytes %d: want equal", noZC, tx, rx)
			}
		}
	}
}

// TestDeregisterWaitsForLentPackets holds the device's sender busy so that a
// WRITE's packets stay queued with their payload lent from the MR, and
// checks that Deregister does not return until they have been written
// (after which the caller may free the memory).
func TestDeregisterWaitsForLentPackets(t *testing.T) {
	if raceEnabled {
		t.Skip("a build with the race detector sends no payload zero-copy (racedetect_on.go); the tests without -race cover it")
	}
	// A 4 s retransmit timeout: no retry (which would read the MR again,
	// deregistered by then) while the sender is held.
	a, b := udpPair(t, pairOpts{pmtu: wire.MTU1024, timeout: 20})
	src := make([]byte, 64<<10)
	fill(src, 3)
	mr, err := a.pd.RegMR(src, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if !a.dev.tx.busy.CompareAndSwap(false, true) {
		t.Fatal("device sender busy at rest")
	}
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGList: []SGE{{Addr: mr.Addr(), Length: 8192, LKey: mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if n := mr.lent.Load(); n != 8 {
		t.Fatalf("%d packets lend the MR, want 8 (queued behind the busy sender)", n)
	}
	done := make(chan error, 1)
	go func() { done <- mr.Deregister() }()
	select {
	case err := <-done:
		t.Fatalf("Deregister returned (%v) while 8 queued packets lend its memory", err)
	case <-time.After(50 * time.Millisecond):
	}
	a.dev.tx.busy.Store(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Deregister still waiting 5 s after the sender was released")
	}
	if n := mr.lent.Load(); n != 0 {
		t.Fatalf("%d packets still lend the MR after Deregister", n)
	}
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	// A SEND after the WRITE: its completion on b orders the data before
	// the comparison.
	postRecv(t, b, 2, 65536, 64)
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 8)})
	waitWC(t, b.rcq, 1, 10*time.Second)
	mustEqual(t, b.buf[:8192], src[:8192])
}

// TestRevokeSendsLentPackets: WRITEs from provider memory wait in the
// device queue (doorbell batching behind a WRITE to a peer that no longer
// answers), each holding the region's guard while its payload is lent; the
// provider's revocation sends them itself (mem.Region.OnDrain) and returns
// at once instead of waiting for the retransmit timer (4 s here).
func TestRevokeSendsLentPackets(t *testing.T) {
	if raceEnabled {
		t.Skip("a build with the race detector sends no payload zero-copy (racedetect_on.go); the tests without -race cover it")
	}
	acc, region, devAddr := accelRegion(t)
	a, b := udpPair(t, pairOpts{pmtu: wire.MTU1024, timeout: 20})
	mr, err := a.pd.RegRegion(region, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	b.dev.Close() // the peer stops answering: nothing clocks a's queue
	for i := range 4 {
		post(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGList:     []SGE{{Addr: mr.Addr() + uint64(i)*4096, Length: 4096, LKey: mr.LKey()}},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	if n := mr.lent.Load(); n == 0 {
		t.Fatal("no packet lends the region: nothing waits in the queue")
	}
	start := time.Now()
	if err := acc.Revoke(devAddr); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Revoke took %v with zero-copy packets queued; want well under a second", el)
	}
	if n := mr.lent.Load(); n != 0 {
		t.Fatalf("%d packets still lend the revoked region", n)
	}
}

// TestBusyPoll: with Config.BusyPoll the receive loop keeps polling after
// each batch, so the replies of a ping-pong are picked up by polls, not
// after waiting for the socket; the device still closes promptly.
func TestBusyPoll(t *testing.T) {
	open := func(addr string) *udp.Endpoint {
		ep, err := udp.Listen(netip.MustParseAddrPort(addr), udp.WithAnyPort())
		if err != nil {
			t.Skip("UDP loopback unavailable:", err)
		}
		return ep
	}
	ea, eb := open("127.0.0.1:0"), open("127.0.0.2:0")
	a, b := newPairOn(t, ea, eb, pairOpts{busyPoll: time.Second})
	const rounds = 20
	for i := 0; i < rounds; i++ {
		postRecv(t, b, uint64(i), 0, 64)
		post(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 64)})
		waitWC(t, b.rcq, 1, 5*time.Second)
		waitWC(t, a.scq, 1, 5*time.Second)
	}
	// After the first datagram each side's loop polls for a second: the
	// later ones are read by polls, without a wait (each side waits once,
	// for the first).
	if wa, wb := ea.Stats().Waits, eb.Stats().Waits; wa > rounds/4 || wb > rounds/4 {
		t.Fatalf("waits for the socket: a %d, b %d, in %d round trips; want at most %d", wa, wb, rounds, rounds/4)
	}
	start := time.Now()
	a.dev.Close()
	b.dev.Close()
	if el := time.Since(start); el > time.Second {
		t.Fatalf("closing busy-polling devices took %v", el)
	}
}

// TestCloseWhileReceiving: closing a device whose receive loop is handling
// a stream returns promptly. link/udp handles each batch inside its read
// (ServeView), and closing its socket waits for that batch: a Close that
// held the receive loop's lock while closing the link deadlocked (a
// benchmark's cleanup hung 2 runs in 3).
func TestCloseWhileReceiving(t *testing.T) {
	for round := range 10 {
		ea, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.WithAnyPort())
		if err != nil {
			t.Skip("UDP loopback unavailable:", err)
		}
		eb, err := udp.Listen(netip.MustParseAddrPort("127.0.0.2:0"), udp.WithAnyPort())
		if err != nil {
			t.Skip("UDP loopback unavailable:", err)
		}
		a, b := newPairOn(t, ea, eb, pairOpts{})
		// A stream of 1 MiB WRITEs, far more than arrives before the close.
		for i := range 64 {
			post(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite,
				SGList:     []SGE{{Addr: a.mr.Addr(), Length: 1 << 20, LKey: a.mr.LKey()}},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		}
		for deadline := time.Now().Add(5 * time.Second); eb.Stats().PacketsIn < 2000; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the receiver got %d packets in 5 s", round, eb.Stats().PacketsIn)
			}
			time.Sleep(50 * time.Microsecond)
		}
		done := make(chan error, 1)
		go func() { done <- b.dev.Close() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: closing the receiving device took over 5 s (deadlock between Close and the receive loop)", round)
		}
		a.dev.Close()
	}
}
