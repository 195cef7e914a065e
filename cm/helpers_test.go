package cm

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

var netSeq atomic.Uint32

// testConfig is a CM configuration with short timers: short enough to keep
// the suite fast, long enough (100 ms per MAD round trip) not to retransmit
// spuriously on a loaded 2-core CI machine.
func testConfig() *Config {
	return &Config{Timeout: 100 * time.Millisecond, MaxRetries: 5, TimeWait: 20 * time.Millisecond,
		MRADelay: 20 * time.Millisecond, ServiceTimeout: 17}
}

type pair struct {
	da, db *verbs.Device
	aa, ab *Agent
	pa, pb *pipe.Endpoint
}

func (p *pair) addrA() netip.Addr { return p.aa.Addr() }
func (p *pair) addrB() netip.Addr { return p.ab.Addr() }

// newPair opens two devices on a pipe with unique addresses, each with an
// agent; everything is closed at the end of the test.
func newPair(t testing.TB, fa, fb pipe.Faults, cfg *Config) *pair {
	t.Helper()
	n := netSeq.Add(1)
	ca := pipe.Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.1:4791", 100+n/250, n%250)), Faults: fa, Seed: uint64(n)}
	cb := pipe.Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.2:4791", 100+n/250, n%250)), Faults: fb, Seed: uint64(n) + 7}
	return newPairWith(t, ca, cb, verbs.Config{Name: "pa"}, verbs.Config{Name: "pb"}, cfg)
}

func newPairWith(t testing.TB, ca, cb pipe.Config, va, vb verbs.Config, cfg *Config) *pair {
	t.Helper()
	ea, eb, err := pipe.New(ca, cb)
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{pa: ea, pb: eb}
	if p.da, err = verbs.Open(ea, &va); err != nil {
		t.Fatal(err)
	}
	if p.db, err = verbs.Open(eb, &vb); err != nil {
		t.Fatal(err)
	}
	if cfg == nil {
		cfg = testConfig()
	}
	if p.aa, err = Attach(p.da, cfg); err != nil {
		t.Fatal(err)
	}
	if p.ab, err = Attach(p.db, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.aa.Close()
		p.ab.Close()
		p.da.Close()
		p.db.Close()
	})
	return p
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timeout waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// pollWC waits for one completion on cq.
func pollWC(t testing.TB, cq *verbs.CQ, d time.Duration) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	end := time.Now().Add(d)
	for cq.Poll(wc[:]) == 0 {
		if time.Now().After(end) {
			t.Fatalf("no completion within %v", d)
		}
		time.Sleep(200 * time.Microsecond)
	}
	return wc[0]
}

// buf is a registered buffer.
type buf struct {
	b  []byte
	mr *verbs.MR
}

func newBuf(t testing.TB, pd *verbs.PD, n int) *buf {
	t.Helper()
	b := make([]byte, n)
	mr, err := pd.RegMR(b, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mr.Deregister() })
	return &buf{b, mr}
}

func (b *buf) sge() []verbs.SGE {
	return []verbs.SGE{{Addr: b.mr.Addr(), Length: uint32(len(b.b)), LKey: b.mr.LKey()}}
}

// listenDial makes a listener on p's B at port, on a channel of its own
// (sch), and an ID on another (cch) that has resolved it and has an RC QP,
// ready to Connect; the test's end closes and destroys them.
func listenDial(t *testing.T, p *pair, port uint16) (sch, cch *EventChannel, cid *ID) {
	t.Helper()
	sch, cch = NewEventChannel(), NewEventChannel()
	t.Cleanup(func() { sch.Close(); cch.Close() })
	lid, _ := sch.CreateID(nil, mad.PortSpaceTCP)
	t.Cleanup(func() { lid.Destroy() })
	lid.BindAddr(netip.AddrPortFrom(p.addrB(), port))
	lid.Listen(0)
	cid, _ = cch.CreateID(nil, mad.PortSpaceTCP)
	t.Cleanup(func() { cid.Destroy() })
	cid.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.addrB(), port), 0)
	expect(t, cch, EventAddrResolved)
	cid.ResolveRoute(0)
	expect(t, cch, EventRouteResolved)
	rcQP(t, cid)
	return sch, cch, cid
}

// listenAt makes a channel and an ID on it listening (backlog 0) at ap;
// both are gone at the end of the test.
func listenAt(t *testing.T, ap netip.AddrPort) (*EventChannel, *ID) {
	t.Helper()
	ch := NewEventChannel()
	t.Cleanup(func() { ch.Close() })
	l, _ := ch.CreateID(nil, mad.PortSpaceTCP)
	if err := l.BindAddr(ap); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Destroy() })
	return ch, l
}
