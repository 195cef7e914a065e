package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func listen(t testing.TB, addr string, opts ...Option) *Endpoint {
	t.Helper()
	e, err := Listen(netip.MustParseAddrPort(addr), append([]Option{WithAnyPort()}, opts...)...)
	if err != nil {
		t.Fatalf("Listen(%s): %v", addr, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestConformance(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		for _, mode := range []struct {
			name string
			opts []Option
		}{
			{"offload", nil},
			{"plain", []Option{WithoutGSO(), WithoutGRO()}},
			{"local", []Option{WithLocal()}},
			{"local-plain", []Option{WithLocal(), WithoutGSO(), WithoutGRO()}},
		} {
			t.Run(addr+"/"+mode.name, func(t *testing.T) {
				linktest.Run(t, func(t testing.TB) (link.Endpoint, link.Endpoint) {
					return listen(t, addr, mode.opts...), listen(t, addr, mode.opts...)
				})
			})
		}
	}
}

// TestGSOGRO sends runs of equal-size datagrams with GSO to a GRO receiver
// that reads them one, three or many at a time, copied (ReadBatch) or in
// place (ReadBatchView), and checks every datagram.
func TestGSOGRO(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		for _, per := range []int{1, 3, 64, -1, -3, -64} {
			view := per < 0
			per = max(per, -per)
			a, b := listen(t, addr), listen(t, addr)
			read := b.ReadBatch
			if view {
				read = b.ReadBatchView
			}
			if !a.GSO() || !b.GRO() {
				t.Skipf("kernel without UDP GSO/GRO (GSO %v, GRO %v)", a.GSO(), b.GRO())
			}
			const n = 50
			pkts := linktest.Batch(n, 0)
			for i := range pkts {
				size := 1000
				if i == 29 || i == n-1 {
					size = 200 // ends a run
				}
				pkts[i].Buf = linktest.Packet(nil, 0x11, uint32(i), linktest.Payload(i, size))
				pkts[i].N, pkts[i].Dst = len(pkts[i].Buf), b.LocalAddr()
			}
			if k, err := a.WriteBatch(pkts); k != n || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			rd := linktest.Batch(per, 2048)
			for got := 0; got < n; {
				k, err := read(rd)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range rd[:k] {
					if !bytes.Equal(p.Bytes(), pkts[got].Bytes()) || p.Src != a.SendAddr() || p.Dst != b.LocalAddr() {
						t.Fatalf("%s, %d per read (view %v): datagram %d differs (%d bytes from %v)", addr, per, view, got, p.N, p.Src)
					}
					if view && cap(p.Buf) != p.N {
						t.Fatalf("view of datagram %d has capacity %d, want its length %d", got, cap(p.Buf), p.N)
					}
					if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok {
						t.Errorf("datagram %d: ICRC does not verify", got)
					}
					got++
				}
			}
			sa, sb := a.Stats(), b.Stats()
			if sa.GSOMessages != 2 || sa.GSOSegments != n || sb.GROSegments != n || sb.PacketsIn != n {
				t.Errorf("%s: sender %+v, receiver %+v", addr, sa, sb)
			}
		}
	}
}

// TestSendCalls: one WriteBatch call sends as many packets per system call
// as BatchSize messages hold. With GSO, the 65 packets an rxe ACK opens go
// in one sendmmsg; one packet per message (no GSO, or a destination per
// packet) is cut at BatchSize; and everything arrives, in order.
func TestSendCalls(t *testing.T) {
	const batch = 8
	for _, c := range []struct {
		name      string
		n         int
		batch     int // BatchSize (0: the default)
		noGSO     bool
		spread    bool // alternate two destinations: one packet per message
		wantCalls uint64
	}{
		{"gso-65", 65, 0, false, false, 1},
		{"gso-over-txPkts", 2*batch*txPktsPerMsg + 1, batch, false, false, 3},
		{"no-gso", 2*batch + 1, batch, true, false, 3},
		{"messages-first", 2*batch + 1, batch, false, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := []Option{WithBatchSize(c.batch)}
			if c.noGSO {
				opts = append(opts, WithoutGSO())
			}
			a := listen(t, "127.0.0.1:0", opts...)
			if !c.noGSO && !a.GSO() {
				t.Skip("kernel without UDP GSO")
			}
			b1, b2 := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
			pkts := linktest.Batch(c.n, 0)
			for i := range pkts {
				pkts[i].Buf = linktest.Packet(nil, 0x11, uint32(i), linktest.Payload(i, 1000))
				pkts[i].N, pkts[i].Dst = len(pkts[i].Buf), b1.LocalAddr()
				if c.spread && i%2 == 1 {
					pkts[i].Dst = b2.LocalAddr()
				}
			}
			if k, err := a.WriteBatch(pkts); k != c.n || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			if got := a.Stats().WriteCalls; got != c.wantCalls {
				t.Errorf("%d packets: %d sendmmsg calls, want %d", c.n, got, c.wantCalls)
			}
			n1 := c.n
			if c.spread {
				n1 = (c.n + 1) / 2
				for i, p := range readN(t, b2, c.n/2) {
					if !bytes.Equal(p.Bytes(), pkts[2*i+1].Bytes()) {
						t.Fatalf("second destination: datagram %d differs", i)
					}
				}
			}
			for i, p := range readN(t, b1, n1) {
				j := i
				if c.spread {
					j = 2 * i
				}
				if !bytes.Equal(p.Bytes(), pkts[j].Bytes()) {
					t.Fatalf("datagram %d differs", i)
				}
			}
		})
	}
}

func TestProperties(t *testing.T) {
	e := listen(t, "127.0.0.1:0")
	if e.MTU() != 65536 {
		t.Errorf("MTU() on loopback = %d, want 65536", e.MTU())
	}
	if e.BatchSize() != DefaultBatchSize {
		t.Errorf("BatchSize() = %d, want %d", e.BatchSize(), DefaultBatchSize)
	}
	e6 := listen(t, "[::1]:0", WithMTU(9000), WithBatchSize(8))
	if e6.MTU() != 9000 || e6.BatchSize() != 8 {
		t.Errorf("MTU, BatchSize = %d, %d; want 9000, 8", e6.MTU(), e6.BatchSize())
	}
	fd := sockFD(t, e)
	if v, err := unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER); err != nil || v != unix.IP_PMTUDISC_DO {
		t.Errorf("IP_MTU_DISCOVER = %d, %v; want IP_PMTUDISC_DO", v, err)
	}
	if v, err := unix.GetsockoptInt(sockFD(t, e6), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY); err != nil || v != 1 {
		t.Errorf("IPV6_V6ONLY = %d, %v; want 1", v, err)
	}
	if v, err := unix.GetsockoptInt(sockFD(t, e6), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER); err != nil || v != unix.IPV6_PMTUDISC_DO {
		t.Errorf("IPV6_MTU_DISCOVER = %d, %v; want IPV6_PMTUDISC_DO", v, err)
	}
	if os.Geteuid() == 0 {
		if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF); err != nil || v < DefaultSocketBuffer {
			t.Errorf("SO_RCVBUF = %d, %v; want >= %d as root", v, err, DefaultSocketBuffer)
		}
	}
}

func sockFD(t *testing.T, e *Endpoint) int {
	var fd int
	if err := e.rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		t.Fatal(err)
	}
	return fd
}

func TestBadConfig(t *testing.T) {
	for _, c := range []Config{
		{},
		{Addr: netip.MustParseAddrPort("127.0.0.1:0"), BatchSize: -1},
		{Addr: netip.MustParseAddrPort("127.0.0.1:0"), BatchSize: MaxBatchSize + 1},
		{Addr: netip.MustParseAddrPort("127.0.0.1:0"), MTU: -5},
	} {
		if e, err := Open(c); err == nil {
			e.Close()
			t.Errorf("Open(%+v) succeeded", c)
		}
	}
}

func TestBadDestination(t *testing.T) {
	a := listen(t, "127.0.0.1:0")
	a6 := listen(t, "[::1]:0")
	pkts := linktest.Batch(1, 0)
	pkts[0].Buf = linktest.Packet(nil, 1, 1, nil)
	pkts[0].N = len(pkts[0].Buf)
	for _, c := range []struct {
		e   *Endpoint
		dst string
	}{
		{a, "[::1]:4791"}, {a, "127.0.0.1:0"}, {a6, "127.0.0.1:4791"}, {a6, "[::ffff:127.0.0.1]:4791"},
	} {
		pkts[0].Dst = netip.MustParseAddrPort(c.dst)
		if n, err := c.e.WriteBatch(pkts); n != 0 || !errors.Is(err, ErrBadAddr) {
			t.Errorf("%v: WriteBatch to %s = %d, %v; want 0, ErrBadAddr", c.e.LocalAddr(), c.dst, n, err)
		}
	}
	// An IPv4-mapped destination on an IPv4 endpoint is fine.
	b := listen(t, "127.0.0.1:0")
	pkts[0].Dst = netip.AddrPortFrom(netip.AddrFrom16(b.LocalAddr().Addr().As16()), b.LocalAddr().Port())
	if n, err := a.WriteBatch(pkts); n != 1 || err != nil {
		t.Fatalf("WriteBatch to %v = %d, %v", pkts[0].Dst, n, err)
	}
	readN(t, b, 1)
}

// readN reads n datagrams from e within a deadline.
func readN(t testing.TB, e *Endpoint, n int) []link.Packet {
	t.Helper()
	var got []link.Packet
	done := make(chan error, 1)
	go func() {
		buf := linktest.Batch(e.BatchSize(), 65536)
		for len(got) < n {
			k, err := e.ReadBatch(buf)
			if err != nil {
				done <- err
				return
			}
			for _, p := range buf[:k] {
				q := p
				q.Buf = bytes.Clone(p.Bytes())
				got = append(got, q)
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ReadBatch: %v", err)
		}
	case <-time.After(linktest.Timeout):
		e.Close()
		<-done
		t.Fatalf("got %d of %d datagrams", len(got), n)
	}
	return got
}

func sendOne(t testing.TB, e *Endpoint, dst netip.AddrPort, src netip.AddrPort, tos uint8) []byte {
	t.Helper()
	pkts := linktest.Batch(1, 0)
	pkts[0].Buf = linktest.Packet(nil, 0x42, 7, linktest.Payload(1, 100))
	pkts[0].N, pkts[0].Dst, pkts[0].Src, pkts[0].TOS = len(pkts[0].Buf), dst, src, tos
	if n, err := e.WriteBatch(pkts); n != 1 || err != nil {
		t.Fatalf("WriteBatch from %v to %v = %d, %v", e.LocalAddr(), dst, n, err)
	}
	return pkts[0].Bytes()
}

// TestSeveralEndpoints binds one port on three loopback addresses.
func TestSeveralEndpoints(t *testing.T) {
	var eps []*Endpoint
	// Port 4791 first (as devices use it), then ephemeral ports.
	for try := 0; try < 10 && eps == nil; try++ {
		first, err := Listen(netip.MustParseAddrPort("127.0.0.1:4791"))
		if try > 0 || err != nil {
			if first != nil {
				first.Close()
			}
			first = listen(t, "127.0.0.1:0")
		} else {
			t.Cleanup(func() { first.Close() })
		}
		port := first.LocalAddr().Port()
		eps = []*Endpoint{first}
		for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
			e, err := Listen(netip.AddrPortFrom(netip.MustParseAddr(ip), port))
			if err != nil {
				if errors.Is(err, syscall.EADDRINUSE) {
					eps = nil
					break
				}
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			eps = append(eps, e)
		}
	}
	if eps == nil {
		t.Skip("could not find a port free on 127.0.0.1-3")
	}
	t.Logf("port %d", eps[0].LocalAddr().Port())
	for _, from := range eps {
		for _, to := range eps {
			if from == to {
				continue
			}
			want := sendOne(t, from, to.LocalAddr(), netip.AddrPort{}, 0)
			p := readN(t, to, 1)[0]
			if !bytes.Equal(p.Bytes(), want) || p.Src != from.SendAddr() || p.Dst != to.LocalAddr() {
				t.Errorf("%v -> %v: got %v -> %v %x", from.LocalAddr(), to.LocalAddr(), p.Src, p.Dst, p.Bytes())
			}
			if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Bytes()); !ok {
				t.Errorf("%v -> %v: ICRC does not verify", from.LocalAddr(), to.LocalAddr())
			}
		}
	}
}

// TestDefaultPort checks that port 0 means 4791 (skipped when 4791 is taken,
// e.g. by the kernel's rdma_rxe).
func TestDefaultPort(t *testing.T) {
	e, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Skipf("port 4791 is in use: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.LocalAddr().Port() != wire.UDPPort {
		t.Errorf("LocalAddr() = %v, want port %d", e.LocalAddr(), wire.UDPPort)
	}
}

// TestWildcard: an endpoint bound to 0.0.0.0 reports the address each
// datagram arrived on and sends from the right source, with a matching ICRC.
func TestWildcard(t *testing.T) {
	for _, c := range []struct{ any, a, other string }{
		{"0.0.0.0:0", "127.0.0.1:0", "127.0.0.2"},
		{"[::]:0", "[::1]:0", ""},
	} {
		t.Run(c.any, func(t *testing.T) {
			w := listen(t, c.any)
			a := listen(t, c.a)
			to := netip.AddrPortFrom(a.LocalAddr().Addr(), w.LocalAddr().Port())
			sendOne(t, a, to, netip.AddrPort{}, 0)
			p := readN(t, w, 1)[0]
			if p.Dst != to || p.Src != a.SendAddr() {
				t.Errorf("wildcard read: Src, Dst = %v, %v; want %v, %v", p.Src, p.Dst, a.SendAddr(), to)
			}
			// Reply with no source: the route's source is used.
			sendOne(t, w, a.LocalAddr(), netip.AddrPort{}, 0)
			q := readN(t, a, 1)[0]
			if from := netip.AddrPortFrom(to.Addr(), w.SendAddr().Port()); q.Src != from {
				t.Errorf("reply Src = %v, want %v", q.Src, from)
			}
			if _, ok := wire.VerifyICRCAddrs(q.Src, q.Dst, q.Bytes()); !ok {
				t.Error("reply ICRC does not verify")
			}
			if c.other == "" {
				return
			}
			// Reply from an explicit source.
			src := netip.AddrPortFrom(netip.MustParseAddr(c.other), 0)
			sendOne(t, w, a.LocalAddr(), src, 0)
			q = readN(t, a, 1)[0]
			if q.Src.Addr() != src.Addr() || q.Src.Port() != w.SendAddr().Port() {
				t.Errorf("reply Src = %v, want %v port %d", q.Src, src.Addr(), w.SendAddr().Port())
			}
			if _, ok := wire.VerifyICRCAddrs(q.Src, q.Dst, q.Bytes()); !ok {
				t.Error("reply ICRC does not verify")
			}
			if s := w.Stats(); s.SourceLookups != 1 {
				t.Errorf("SourceLookups = %d, want 1", s.SourceLookups)
			}
		})
	}
}

func TestTOS(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		a, b := listen(t, addr), listen(t, addr)
		sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0x03) // ECN CE
		if p := readN(t, b, 1)[0]; p.TOS != 0x03 {
			t.Errorf("%s: received TOS %#x, want 0x03", addr, p.TOS)
		}
		sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
		if p := readN(t, b, 1)[0]; p.TOS != 0 {
			t.Errorf("%s: received TOS %#x, want 0", addr, p.TOS)
		}
	}
}

func TestTruncated(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	pkts := linktest.Batch(1, 0)
	pkts[0].Buf = linktest.Packet(nil, 1, 1, make([]byte, 2000))
	pkts[0].N, pkts[0].Dst = len(pkts[0].Buf), b.LocalAddr()
	if _, err := a.WriteBatch(pkts); err != nil {
		t.Fatal(err)
	}
	rd := linktest.Batch(1, 1000)
	n, err := b.ReadBatch(rd)
	if n != 1 || err != nil || rd[0].N != 0 {
		t.Fatalf("ReadBatch = %d, %v, N = %d; want 1, nil, 0", n, err, rd[0].N)
	}
	if s := b.Stats(); s.Truncated != 1 || s.PacketsIn != 1 {
		t.Errorf("Stats = %+v", s)
	}
	if _, err := b.ReadBatch(linktest.Batch(1, 0)); err == nil {
		t.Error("ReadBatch with a zero-capacity buffer succeeded")
	}
}

func TestStats(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	want := sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	readN(t, b, 1)
	sa, sb := a.Stats(), b.Stats()
	if sa.PacketsOut != 1 || sa.BytesOut != uint64(len(want)) || sa.ICRCFilled != 1 || sa.WriteCalls != 1 {
		t.Errorf("sender Stats = %+v", sa)
	}
	if sb.PacketsIn != 1 || sb.BytesIn != uint64(len(want)) || sb.ReadCalls != 1 {
		t.Errorf("receiver Stats = %+v", sb)
	}
}

// TestZeroAllocs pins the steady-state allocation count of a batched
// write+read round at zero.
func TestZeroAllocs(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithoutGSO(), WithoutGRO()}, {WithSourcePorts(4)}, {WithLocal()}} {
		for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "0.0.0.0:0"} {
			zeroAllocs(t, addr, opts...)
		}
	}
}

func zeroAllocs(t *testing.T, addr string, opts ...Option) {
	a, b := listen(t, addr, opts...), listen(t, "127.0.0.1:0", opts...)
	if a.LocalAddr().Addr().Is6() {
		b = listen(t, addr, opts...)
	}
	const n = 32
	wr, rd := linktest.Batch(n, 0), linktest.Batch(n, 8192)
	for i := range wr {
		wr[i].Buf = linktest.Packet(nil, 1, uint32(i), make([]byte, 4096))
		wr[i].N, wr[i].Dst = len(wr[i].Buf), b.LocalAddr()
		wr[i].Src = netip.AddrPortFrom(a.LocalAddr().Addr(), uint16(0xF123+i/(n/2))) // per-port sockets: two runs
	}
	for _, read := range []func([]link.Packet) (int, error){b.ReadBatch, b.ReadBatchView} {
		allocs := testing.AllocsPerRun(20, func() {
			if k, err := a.WriteBatch(wr); k != n || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			for got := 0; got < n; {
				k, err := read(rd)
				if err != nil {
					t.Fatalf("ReadBatch: %v", err)
				}
				got += k
			}
		})
		if allocs != 0 {
			t.Errorf("%s %+v: %v allocations per batch of %d, want 0", addr, a.Stats(), allocs, n)
		}
	}
}

// TestRawCapture captures datagrams sent by the link on lo with an AF_PACKET
// socket and checks the real IP header: IPv4 ID 0 with DF, and an ICRC that
// verifies against the header as sent (the full check kernel rxe does).
func TestRawCapture(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for an AF_PACKET socket")
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no lo interface: %v", err)
	}
	for _, c := range []struct {
		addr string
		tos  uint8
	}{{"127.0.0.1:0", 0}, {"127.0.0.1:0", 0x02}, {"[::1]:0", 0}} {
		t.Run(c.addr, func(t *testing.T) {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_ALL)))
			if err != nil {
				t.Skipf("AF_PACKET socket: %v", err)
			}
			defer unix.Close(fd)
			if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: lo.Index}); err != nil {
				t.Fatalf("bind AF_PACKET to lo: %v", err)
			}
			tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				t.Fatal(err)
			}
			// Other traffic on lo may overflow the capture socket: give it a
			// big buffer, and send again if the datagram was not seen.
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
			a, b := listen(t, c.addr), listen(t, c.addr)
			var want, ipHdr, udp []byte
			for try := 0; try < 5 && ipHdr == nil; try++ {
				want = sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, c.tos)
				readN(t, b, 1)
				ipHdr, udp = capture(t, fd, a.SendAddr().Port(), b.LocalAddr().Port())
			}
			if ipHdr == nil {
				t.Fatal("datagram not captured in 5 tries")
			}
			payload := udp[8:]
			if !bytes.Equal(payload, want) {
				t.Fatalf("captured payload %x, want %x", payload, want)
			}
			sport, dport := binary.BigEndian.Uint16(udp), binary.BigEndian.Uint16(udp[2:])
			if !wire.VerifyICRC(ipHdr, sport, dport, payload) {
				t.Errorf("VerifyICRC over the captured header %x failed", ipHdr)
			}
			if len(ipHdr) == 20 {
				id, flags := binary.BigEndian.Uint16(ipHdr[4:]), ipHdr[6]
				if id != 0 || flags&0x40 == 0 {
					t.Errorf("IPv4 ID %d, flags %#x; want ID 0 with DF", id, flags)
				}
				if ipHdr[1] != c.tos {
					t.Errorf("TOS %#x, want %#x", ipHdr[1], c.tos)
				}
			}
			if id, ok := wire.VerifyICRCAddrs(a.SendAddr(), b.LocalAddr(), payload); !ok || id != 0 {
				t.Errorf("VerifyICRCAddrs = %d, %v; want 0, true", id, ok)
			}
		})
	}
}

// capture returns the IP header and UDP datagram of the first captured
// packet between the two ports, or nils if none is seen within a second.
func capture(t *testing.T, fd int, sport, dport uint16) (ip, udp []byte) {
	t.Helper()
	buf := make([]byte, 70000)
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			t.Fatalf("recvfrom: %v", err)
		}
		pkt := buf[:n]
		var hl int
		switch {
		case n >= 28 && pkt[0]>>4 == 4 && pkt[9] == unix.IPPROTO_UDP:
			hl = int(pkt[0]&0xF) * 4
		case n >= 48 && pkt[0]>>4 == 6 && pkt[6] == unix.IPPROTO_UDP:
			hl = 40
		default:
			continue
		}
		if n < hl+8 {
			continue
		}
		u := pkt[hl:]
		if binary.BigEndian.Uint16(u) != sport || binary.BigEndian.Uint16(u[2:]) != dport {
			continue
		}
		ulen := int(binary.BigEndian.Uint16(u[4:]))
		if ulen < 8 || ulen > len(u) {
			t.Fatalf("bad UDP length %d", ulen)
		}
		return bytes.Clone(pkt[:hl]), bytes.Clone(u[:ulen])
	}
	return nil, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Benchmarks: 4 KiB RoCE payloads over loopback, batched through the link
// versus one system call per datagram on a plain net.UDPConn, both with the
// ICRC computed per packet. A window keeps the sender at most window
// datagrams ahead of the receiver so that nothing is dropped.

const (
	benchPayload = 4096
	benchWindow  = 2048
)

func benchPacket() []byte {
	return linktest.Packet(nil, 0x11, 0, make([]byte, benchPayload))
}

func BenchmarkLoopback(b *testing.B) {
	for _, batch := range []int{32, 64} {
		b.Run("batched-"+itoa(batch), func(b *testing.B) { benchBatched(b, batch, benchPayload, WithoutGSO(), WithoutGRO()) })
	}
	b.Run("batched-64-gso", func(b *testing.B) { benchBatched(b, 64, benchPayload, WithoutGRO()) })
	b.Run("batched-64-gso-gro", func(b *testing.B) { benchBatched(b, 64, benchPayload) })
	b.Run("per-packet", benchSingle)
	b.Run("tcp-1MiB", benchTCP)
}

// benchTCP is the baseline the batched runs are read against: a TCP stream
// over loopback in the same process, 1 MiB writes and 1 MiB reads, with
// its CPU time per MiB measured the same way (getrusage, both ends).
func benchTCP(b *testing.B) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	tx, err := net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	rx, err := ln.AcceptTCP()
	if err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	const size = 1 << 20
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, size)
		for {
			n, err := rx.Read(buf)
			if err != nil {
				return
			}
			got.Add(int64(n))
		}
	}()
	buf := make([]byte, size)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; i < b.N; i++ {
		if _, err := tx.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); got.Load() < int64(b.N)*size; {
		if time.Now().After(deadline) {
			b.Fatalf("received %d of %d bytes", got.Load(), int64(b.N)*size)
		}
		time.Sleep(10 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/1e3/float64(b.N), "cpu-us/MiB")
	tx.Close()
	<-done
}

func itoa(n int) string { return string(rune('0'+n/10)) + string(rune('0'+n%10)) }

// benchBatched sends packets of payload bytes through one endpoint to
// another in batches of batch and reports, besides bytes/s and packets/s,
// the process's CPU time (getrusage, all threads: sender and receiver) and
// the two endpoints' system calls per MiB of RoCE datagrams.
func benchBatched(b *testing.B, batch, payload int, opts ...Option) {
	tx, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), append(opts, WithAnyPort(), WithBatchSize(batch))...)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	rx, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), append(opts, WithAnyPort(), WithBatchSize(batch))...)
	if err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	wr, rd := linktest.Batch(batch, 0), linktest.Batch(batch, 8192)
	for i := range wr {
		wr[i].Buf = linktest.Packet(nil, 0x11, 0, make([]byte, payload))
		wr[i].N, wr[i].Dst = len(wr[i].Buf), rx.LocalAddr()
	}
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			k, err := rx.ReadBatch(rd)
			if err != nil {
				return
			}
			got.Add(int64(k))
		}
	}()
	b.SetBytes(int64(len(wr[0].Buf)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, calls0 := cpuTime(b), tx.Stats().Syscalls+rx.Stats().Syscalls
	for sent := 0; sent < b.N; {
		n := min(batch, b.N-sent)
		for int64(sent)-got.Load() > benchWindow {
			time.Sleep(10 * time.Microsecond) // let the receiver catch up
		}
		k, err := tx.WriteBatch(wr[:n])
		if err != nil {
			b.Fatal(err)
		}
		sent += k
	}
	waitFor(b, &got, b.N)
	b.StopTimer()
	mib := float64(b.N) * float64(len(wr[0].Buf)) / (1 << 20)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/1e3/mib, "cpu-us/MiB")
	b.ReportMetric(float64(tx.Stats().Syscalls+rx.Stats().Syscalls-calls0)/mib, "syscalls/MiB")
	rx.Close()
	<-done
}

// cpuTime returns the user and system CPU time of the process in ns.
func cpuTime(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func benchSingle(b *testing.B) {
	tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	for _, c := range []*net.UDPConn{tx, rx} {
		// The same buffers as the link's sockets.
		rc, err := c.SyscallConn()
		if err != nil {
			b.Fatal(err)
		}
		rc.Control(func(fd uintptr) {
			for _, o := range []int{unix.SO_RCVBUFFORCE, unix.SO_SNDBUFFORCE} {
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o, DefaultSocketBuffer)
			}
		})
	}
	src := tx.LocalAddr().(*net.UDPAddr).AddrPort()
	dst := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	pkt := benchPacket()
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 8192)
		for {
			if _, _, err := rx.ReadFromUDPAddrPort(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; sent++ {
		for int64(sent)-got.Load() > benchWindow {
			time.Sleep(10 * time.Microsecond)
		}
		wire.FillICRC(pkt, src, dst, 0)
		if _, err := tx.WriteToUDPAddrPort(pkt, dst); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, &got, b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
	rx.Close()
	<-done
}

func waitFor(b *testing.B, got *atomic.Int64, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("received %d of %d datagrams", got.Load(), n)
		}
		time.Sleep(10 * time.Microsecond)
	}
}
