package pingpong

import (
	"context"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// TestPingpongPostPathDoesNotAllocate pins the per-iteration work of the
// ping-pong loop (post a receive, post a send, poll) at zero allocations,
// on two devices joined by an in-memory link.
func TestPingpongPostPathDoesNotAllocate(t *testing.T) {
	da, db, err := verbs.OpenPipe(pipe.Config{MTU: 4200}, pipe.Config{MTU: 4200})
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	defer db.Close()
	mk := func(d *verbs.Device) *pingCtx {
		c := &config{kind: kindRC, size: 64, mtu: 1024, rxDepth: 16, iters: 1, gidx: 1, ibPort: 1, server: "x"}
		p := &pingCtx{c: c, dev: d, flags: verbs.SendSignaled, qpIndex: map[uint32]int{}}
		if err := p.init(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk(da), mk(db)
	for _, x := range [][2]*pingCtx{{a, b}, {b, a}} {
		g := x[0].dev.GIDs()[1]
		x[0].local = []oob.PingpongDest{{QPN: x[0].qps[0].QPN(), PSN: 100, GID: g}}
	}
	a.remote, b.remote = b.local, a.local
	if err := a.connectAll(); err != nil {
		t.Fatal(err)
	}
	if err := b.connectAll(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [2]verbs.WC
	wait := func(p *pingCtx, n int) {
		w := toolkit.CQWaiter{Ctx: ctx, CQ: p.cq, Ch: p.ch}
		for got := 0; got < n; {
			k := p.cq.Poll(wc[:])
			if k == 0 {
				if err := w.Idle(); err != nil {
					t.Fatal(err)
				}
				continue
			}
			for i := range wc[:k] {
				if wc[i].Status != verbs.WCSuccess {
					t.Fatalf("completion %+v", wc[i])
				}
			}
			got += k
		}
	}
	step := func() {
		if _, err := b.postRecv(1); err != nil {
			t.Fatal(err)
		}
		if err := a.postSend(0); err != nil {
			t.Fatal(err)
		}
		wait(a, 1) // send completion
		wait(b, 1) // receive completion
	}
	for range 10 {
		step()
	}
	if n := testing.AllocsPerRun(100, step); n > 0 {
		t.Errorf("%v allocations per ping", n)
	}
}
