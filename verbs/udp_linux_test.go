package verbs

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
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
