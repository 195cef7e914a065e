package rsocket

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var netSeq atomic.Uint32

// pair is two devices with cm agents: a dials, b listens.
type pair struct {
	da, db *verbs.Device
	aa, ab *cm.Agent
}

func cmConfig() *cm.Config {
	return &cm.Config{Timeout: 100 * time.Millisecond, MaxRetries: 5, TimeWait: 20 * time.Millisecond,
		MRADelay: 20 * time.Millisecond, ServiceTimeout: 17}
}

// newPipePair opens two devices on an in-memory link.
func newPipePair(t testing.TB) *pair {
	t.Helper()
	n := netSeq.Add(1)
	ca := pipe.Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.1:4791", 150+n/250, n%250)), Seed: uint64(n)}
	cb := pipe.Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.2:4791", 150+n/250, n%250)), Seed: uint64(n) + 7}
	ea, eb, err := pipe.New(ca, cb)
	if err != nil {
		t.Fatal(err)
	}
	da, err := verbs.Open(ea, &verbs.Config{Name: "pa"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := verbs.Open(eb, &verbs.Config{Name: "pb"})
	if err != nil {
		t.Fatal(err)
	}
	return attach(t, da, db)
}

// newUDPPair opens two devices on loopback UDP sockets.
func newUDPPair(t testing.TB) *pair {
	t.Helper()
	n := rand.IntN(200) + 20
	a1 := fmt.Sprintf("127.%d.%d.1", n, rand.IntN(250)+1)
	a2 := a1[:len(a1)-1] + "2"
	da, err := verbs.OpenUDP(a1+":4791", &verbs.Config{Name: "ua"})
	if err != nil {
		t.Skipf("cannot open a UDP device on %s: %v", a1, err)
	}
	db, err := verbs.OpenUDP(a2+":4791", &verbs.Config{Name: "ub"})
	if err != nil {
		da.Close()
		t.Skipf("cannot open a UDP device on %s: %v", a2, err)
	}
	return attach(t, da, db)
}

func attach(t testing.TB, da, db *verbs.Device) *pair {
	p := &pair{da: da, db: db}
	var err error
	if p.aa, err = cm.Attach(da, cmConfig()); err != nil {
		t.Fatal(err)
	}
	if p.ab, err = cm.Attach(db, cmConfig()); err != nil {
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

type link struct {
	name string
	new  func(testing.TB) *pair
}

var links = []link{{"pipe", newPipePair}, {"udp", newUDPPair}}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connect returns a connected pair of rsockets: c dialled, s accepted.
func connect(t testing.TB, p *pair, ccfg, scfg *Config) (c, s *Conn) {
	t.Helper()
	l, err := ListenAgent(p.ab, "0.0.0.0:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := netip.AddrPortFrom(p.ab.Addr(), l.Addr().(Addr).Port()).String()
	c, err = DialAgent(ctxT(t, 10*time.Second), p.aa, addr, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err = l.AcceptRS(ctxT(t, 10*time.Second))
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}
