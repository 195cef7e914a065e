package verbs

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/tee"
	"github.com/softroce/softroce/link/udp"
)

// lossy drops a fraction of the datagrams a real endpoint sends.
type lossy struct {
	link.Endpoint
	rng  *rand.Rand
	loss float64
	keep []link.Packet
}

func (l *lossy) WriteBatch(pkts []link.Packet) (int, error) {
	l.keep = l.keep[:0]
	for _, p := range pkts {
		if l.rng.Float64() >= l.loss {
			l.keep = append(l.keep, p)
		}
	}
	if len(l.keep) > 0 {
		if _, err := l.Endpoint.WriteBatch(l.keep); err != nil {
			return 0, err
		}
	}
	return len(pkts), nil
}

// TestUDPLossy runs SEND, WRITE, READ and atomics between 127.0.0.1 and
// 127.0.0.2 over real UDP sockets with 10% of the datagrams dropped on send.
func TestUDPLossy(t *testing.T) {
	open := func(addr string, seed uint64) link.Endpoint {
		ep, err := udp.Listen(netip.MustParseAddrPort(addr), udp.WithAnyPort())
		if err != nil {
			t.Skip("UDP loopback unavailable:", err)
		}
		return &lossy{Endpoint: ep, rng: rand.New(rand.NewPCG(seed, 1)), loss: 0.10}
	}
	ea, eb := open("127.0.0.1:0", 1), open("127.0.0.2:0", 2)
	a, b := newPairOn(t, ea, eb, pairOpts{timeout: 10})
	const n = 20
	for i := 0; i < n; i++ {
		postRecv(t, b, uint64(i), i*8192, 8192)
	}
	for i := 0; i < n; i++ {
		size := 1 + i*397
		fill(a.buf[i*8192:i*8192+size], byte(i))
		post(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, i*8192, size)})
	}
	for i, wc := range waitWC(t, b.rcq, n, 30*time.Second) {
		size := 1 + i*397
		if wc.Status != WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != uint32(size) {
			t.Fatalf("%d: %+v", i, wc)
		}
		mustEqual(t, b.buf[i*8192:i*8192+size], a.buf[i*8192:i*8192+size])
	}
	waitWC(t, a.scq, n, 30*time.Second)
	const big = 300 << 10
	fill(a.buf[:big], 5)
	post(t, a.qp, SendWR{WRID: 100, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, big), RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()})
	post(t, a.qp, SendWR{WRID: 101, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 600000, big), RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()})
	for i := 0; i < 10; i++ {
		post(t, a.qp, SendWR{WRID: 200, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGList: sge(a, 950000+8*i, 8),
			RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 3})
	}
	for _, wc := range waitWC(t, a.scq, 12, 30*time.Second) {
		if wc.Status != WCSuccess {
			t.Fatalf("%+v", wc)
		}
	}
	mustEqual(t, a.buf[600000:600000+big], a.buf[:big])
	for i := 0; i < 10; i++ {
		if v := binary.NativeEndian.Uint64(a.buf[950000+8*i:]); v != uint64(3*i) {
			t.Fatalf("fetch-add %d returned %d (atomics must run exactly once)", i, v)
		}
	}
	t.Logf("retransmit sequences %d, duplicates answered by the responder %d", a.dev.Stats().Retransmits.Load(), b.dev.Stats().DupRequests.Load())
}

// TestUDPSourcePorts: on endpoints with udp.Config.SourcePorts, each side's
// datagrams arrive from its QP's UDP source port (QP.SourcePort, rxe's
// rule), and WRITE, READ and SEND complete over them.
func TestUDPSourcePorts(t *testing.T) {
	var mu sync.Mutex
	from := map[string]map[netip.AddrPort]int{} // receiving side -> sources seen
	open := func(addr, name string) (*udp.Endpoint, link.Endpoint) {
		ep, err := udp.Listen(netip.MustParseAddrPort(addr), udp.WithAnyPort(), udp.WithSourcePorts(16))
		if err != nil {
			t.Skip("UDP loopback unavailable:", err)
		}
		from[name] = map[netip.AddrPort]int{}
		return ep, tee.New(ep, func(d tee.Direction, src, _ netip.AddrPort, _ uint8, _ []byte) {
			if d == tee.In {
				mu.Lock()
				from[name][src]++
				mu.Unlock()
			}
		})
	}
	ua, ea := open("127.0.0.1:0", "a")
	ub, eb := open("127.0.0.2:0", "b")
	a, b := newPairOn(t, ea, eb, pairOpts{})
	const big = 300 << 10
	fill(a.buf[:big], 7)
	postRecv(t, b, 1, 0, 4096)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, big), RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 400000, big), RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
	post(t, a.qp, SendWR{WRID: 3, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 64)})
	for _, wc := range waitWC(t, a.scq, 3, 10*time.Second) {
		if wc.Status != WCSuccess {
			t.Fatalf("%+v", wc)
		}
	}
	waitWC(t, b.rcq, 1, 10*time.Second)
	mustEqual(t, a.buf[400000:400000+big], a.buf[:big])
	mu.Lock()
	defer mu.Unlock()
	for _, c := range []struct {
		name string
		peer *side
		ep   *udp.Endpoint
	}{{"b", a, ua}, {"a", b, ub}} {
		want := netip.AddrPortFrom(c.ep.LocalAddr().Addr(), c.peer.qp.SourcePort())
		if len(from[c.name]) != 1 || from[c.name][want] == 0 {
			t.Errorf("%s received from %v, want only from %v (the peer QP's source port)", c.name, from[c.name], want)
		}
		if st := c.ep.Stats(); st.SourcePortSockets != 1 || st.SourcePortFallbacks != 0 {
			t.Errorf("sender of %s: SourcePortSockets, SourcePortFallbacks = %d, %d; want 1, 0", c.name, st.SourcePortSockets, st.SourcePortFallbacks)
		}
	}
}
