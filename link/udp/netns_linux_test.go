package udp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/netnstest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
)

// readHere reads n datagrams from e on the calling goroutine (so on its
// thread and namespace), closing e if they do not come within 5 s.
func readHere(t *testing.T, e *Endpoint, n int) []link.Packet {
	t.Helper()
	timer := time.AfterFunc(5*time.Second, func() { e.Close() })
	defer timer.Stop()
	var got []link.Packet
	buf := linktest.Batch(e.BatchSize(), 65536)
	for len(got) < n {
		k, err := e.ReadBatch(buf)
		if err != nil {
			t.Fatalf("ReadBatch after %d of %d datagrams: %v", len(got), n, err)
		}
		for _, p := range buf[:k] {
			q := p
			q.Buf = bytes.Clone(p.Bytes())
			got = append(got, q)
		}
	}
	return got
}

// TestTwoHosts runs the link between two network namespaces joined by a
// veth pair, as two hosts: IPv4 with GSO/GRO over a 1500-byte MTU, IPv6
// link-local addresses (zones), and a wildcard IPv6 endpoint.
func TestTwoHosts(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Config{
		Prefix: "slu",
		IPv4:   [2]string{"10.198.0.1/24", "10.198.0.2/24"},
		// fe80::a and fe80::b are the only link-local addresses, so the
		// kernel's source choice is fixed.
		IPv6: [2]string{"fe80::a/64", "fe80::b/64"},
	})
	nsA, nsB := p.NS[0], p.NS[1]
	vA, vB := p.Veth[0], p.Veth[1]

	open := func(addr string) *Endpoint {
		e, err := Listen(netip.MustParseAddrPort(addr))
		if err != nil {
			t.Fatalf("Listen(%s): %v", addr, err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	var a4, a6, b4, b6, bw *Endpoint
	netnstest.Run(t, nsA, func() {
		a4, a6 = open("10.198.0.1:4791"), open("[fe80::a%"+vA+"]:4791")
	})
	netnstest.Run(t, nsB, func() {
		b4, b6, bw = open("10.198.0.2:4791"), open("[fe80::b%"+vB+"]:4791"), open("[::]:4793")
	})
	if a4.MTU() != 1500 || b6.MTU() != 1500 {
		t.Errorf("MTU on veth = %d, %d; want 1500", a4.MTU(), b6.MTU())
	}

	t.Run("IPv4-GSO", func(t *testing.T) {
		const n = 100
		pkts := linktest.Batch(n, 0)
		for i := range pkts {
			pkts[i].Buf = linktest.Packet(nil, 0x11, uint32(i), linktest.Payload(i, 1024))
			pkts[i].N, pkts[i].Dst = len(pkts[i].Buf), b4.LocalAddr()
		}
		if k, err := a4.WriteBatch(pkts); k != n || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
		got := readHere(t, b4, n)
		for i, p := range got {
			if !bytes.Equal(p.Bytes(), pkts[i].Bytes()) || p.Src != a4.SendAddr() || p.Dst != b4.LocalAddr() {
				t.Fatalf("datagram %d differs", i)
			}
			if id, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok {
				t.Errorf("datagram %d: ICRC does not verify", i)
			} else if a4.GSO() && int(id) != i%a4.txPkts%(maxGSOBytes/p.N) {
				t.Errorf("datagram %d: ICRC computed for ID %d", i, id)
			}
		}
		t.Logf("sender %+v", a4.Stats())
		t.Logf("receiver %+v", b4.Stats())
	})

	// A full send buffer: a token bucket (tc tbf, 10 Mb/s) holds the
	// datagrams on A's veth, so that a 4 KiB send buffer fills; the send
	// waits (outside the netpoller, in poll(2)) instead of failing, and
	// every datagram arrives.
	t.Run("send-buffer-full", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), netnstest.CommandTimeout)
		defer cancel()
		if out, err := netnstest.Command(ctx, nsA, "tc", "qdisc", "add", "dev", vA, "root", "tbf", "rate", "10mbit", "burst", "1540", "latency", "1s").CombinedOutput(); err != nil {
			t.Skipf("tc tbf: %v: %s", err, out)
		}
		defer netnstest.Command(context.Background(), nsA, "tc", "qdisc", "del", "dev", vA, "root").Run()
		var a *Endpoint
		netnstest.Run(t, nsA, func() {
			var err error
			if a, err = Listen(netip.MustParseAddrPort("10.198.0.1:4795"), WithSocketBuffer(4096)); err != nil {
				t.Fatalf("Listen: %v", err)
			}
		})
		t.Cleanup(func() { a.Close() })
		const n = 64
		pkts := linktest.Batch(n, 0)
		for i := range pkts {
			pkts[i].Buf = linktest.Packet(nil, 0x11, uint32(i), linktest.Payload(i, 1024))
			pkts[i].N, pkts[i].Dst = len(pkts[i].Buf), b4.LocalAddr()
		}
		sent := make(chan error, 1)
		go func() {
			k, err := a.WriteBatch(pkts)
			if err == nil && k != n {
				err = fmt.Errorf("sent %d of %d", k, n)
			}
			sent <- err
		}()
		got := readHere(t, b4, n)
		if err := <-sent; err != nil {
			t.Fatalf("WriteBatch: %v", err)
		}
		for i, p := range got {
			if !bytes.Equal(p.Bytes(), pkts[i].Bytes()) || p.Src != a.SendAddr() {
				t.Fatalf("datagram %d differs or comes from %v, not %v", i, p.Src, a.SendAddr())
			}
		}
		if s := a.Stats(); s.SendWaits == 0 {
			t.Errorf("no send waited for room (Stats %+v): the send buffer never filled, the test proves nothing", s)
		}

		// Close while a send waits for room: both return at once (the
		// 2000 datagrams would need about 1.7 s at 10 Mb/s), the send
		// with net.ErrClosed.
		big := linktest.Batch(2000, 0)
		for i := range big {
			big[i].Buf = linktest.Packet(nil, 0x11, uint32(i), linktest.Payload(i, 1024))
			big[i].N, big[i].Dst = len(big[i].Buf), b4.LocalAddr()
		}
		go func() {
			_, err := a.WriteBatch(big)
			sent <- err
		}()
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-sent:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("WriteBatch cut short by Close = %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("WriteBatch still waiting 5 s after Close")
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("Close and the waiting send took %v, want well under the 1.7 s the send needed", d)
		}
	})

	t.Run("IPv6-link-local", func(t *testing.T) {
		netnstest.Run(t, nsA, func() {
			sendOne(t, a6, netip.MustParseAddrPort("[fe80::b%"+vA+"]:4791"), netip.AddrPort{}, 0)
		})
		var p link.Packet
		netnstest.Run(t, nsB, func() {
			p = readHere(t, b6, 1)[0]
			sendOne(t, b6, netip.AddrPortFrom(p.Src.Addr(), wire.UDPPort), netip.AddrPort{}, 0) // reply to the zoned source, at 4791
		})
		if want := netip.AddrPortFrom(netip.MustParseAddr("fe80::a%"+vB), a6.SendAddr().Port()); p.Src != want || p.Dst != b6.LocalAddr() {
			t.Errorf("Src, Dst = %v, %v; want %v, %v", p.Src, p.Dst, want, b6.LocalAddr())
		}
		if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok {
			t.Error("ICRC does not verify")
		}
		netnstest.Run(t, nsA, func() {
			q := readHere(t, a6, 1)[0]
			if want := netip.AddrPortFrom(netip.MustParseAddr("fe80::b%"+vA), b6.SendAddr().Port()); q.Src != want {
				t.Errorf("reply Src = %v, want %v", q.Src, want)
			}
		})
	})

	t.Run("IPv6-wildcard", func(t *testing.T) {
		netnstest.Run(t, nsA, func() {
			sendOne(t, a6, netip.MustParseAddrPort("[fe80::b%"+vA+"]:4793"), netip.AddrPort{}, 0)
		})
		netnstest.Run(t, nsB, func() {
			p := readHere(t, bw, 1)[0]
			if want := netip.MustParseAddrPort("[fe80::b%" + vB + "]:4793"); p.Dst != want {
				t.Errorf("wildcard Dst = %v, want %v", p.Dst, want)
			}
			sendOne(t, bw, netip.AddrPortFrom(p.Src.Addr(), wire.UDPPort), netip.AddrPort{}, 0) // source from the route
		})
		netnstest.Run(t, nsA, func() {
			q := readHere(t, a6, 1)[0]
			if want := netip.AddrPortFrom(netip.MustParseAddr("fe80::b%"+vA), bw.SendAddr().Port()); q.Src != want {
				t.Errorf("reply Src = %v, want %v", q.Src, want)
			}
			if _, ok := wire.VerifyICRCAddrs(q.Src, q.Dst, q.Bytes()); !ok {
				t.Error("reply ICRC does not verify")
			}
		})
	})
}

// TestWatchState: the state of a veth as it goes down and up (carrier
// included), the first report at once, one call per endpoint, none for
// loopback, and Close ending the watch.
func TestWatchState(t *testing.T) {
	lo, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), WithAnyPort())
	if err != nil {
		t.Fatal(err)
	}
	if err := lo.WatchState(func(bool) {}); !errors.Is(err, link.ErrNoState) {
		t.Errorf("WatchState on loopback: %v, want ErrNoState", err)
	}
	if v := lo.LinkSpeed(); v != 0 {
		t.Errorf("LinkSpeed on loopback = %d, want 0 (unknown)", v)
	}
	lo.Close()
	pair := netnstest.NewPair(t, netnstest.Config{Prefix: "srw", IPv4: [2]string{"10.199.2.1/24", "10.199.2.2/24"}})
	var e *Endpoint
	if err := netnstest.Do(pair.NS[0], func() (err error) {
		e, err = Listen(netip.MustParseAddrPort("10.199.2.1:4791"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	states := make(chan bool, 16)
	// Watched from outside the namespace: the socket was opened in it.
	if err := e.WatchState(func(up bool) { states <- up }); err != nil {
		t.Fatal(err)
	}
	if err := e.WatchState(func(bool) {}); err == nil {
		t.Error("a second WatchState succeeded")
	}
	want := func(what string, up bool) {
		t.Helper()
		select {
		case got := <-states:
			if got != up {
				t.Fatalf("%s: up = %v, want %v", what, got, up)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no report in 5 s", what)
		}
	}
	want("at once", true)
	if v := e.LinkSpeed(); v != 10000 {
		t.Errorf("LinkSpeed of a veth = %d Mb/s, want 10000 (its driver's)", v)
	}
	netnstest.IP(t, "-n", pair.NS[0], "link", "set", pair.Veth[0], "down")
	want("down", false)
	netnstest.IP(t, "-n", pair.NS[0], "link", "set", pair.Veth[0], "up")
	want("up", true)
	netnstest.IP(t, "-n", pair.NS[1], "link", "set", pair.Veth[1], "down")
	want("peer down (no carrier)", false)
	done := make(chan error, 1)
	go func() { done <- e.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the watch")
	}
	netnstest.IP(t, "-n", pair.NS[1], "link", "set", pair.Veth[1], "up")
	select {
	case up := <-states:
		t.Fatalf("report %v after Close", up)
	case <-time.After(200 * time.Millisecond):
	}
	if err := e.WatchState(func(bool) {}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WatchState after Close: %v, want net.ErrClosed", err)
	}
}
