package cm

import (
	"testing"
	"time"

	"github.com/softroce/softroce/link/pipe"
)

// TestDialTOS: Options.TOS (rdma_set_option RDMA_OPTION_ID_TOS) is the
// active QP's GRH traffic class, and the passive side's QP takes it from
// the REQ's primary path, as the kernel's rdma_cm does; a Listener's own
// TOS does not override it. Without it both are 0.
func TestDialTOS(t *testing.T) {
	for _, tc := range []struct {
		dial, listen, want uint8
	}{
		{0x68, 0, 0x68},
		{0xB8, 0x20, 0xB8},
		{0, 0x20, 0},
	} {
		p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
		ctx := ctxT(t, 10*time.Second)
		l, err := Listen(p.addrB().String()+":7175", &Options{TOS: tc.listen})
		if err != nil {
			t.Fatal(err)
		}
		acc := make(chan *Conn, 1)
		go func() {
			c, err := l.Accept(ctx)
			if err != nil {
				t.Error(err)
			}
			acc <- c
		}()
		c, err := Dial(ctx, p.addrB().String()+":7175", &Options{TOS: tc.dial})
		if err != nil {
			t.Fatal(err)
		}
		s := <-acc
		if s == nil {
			t.FailNow()
		}
		for side, conn := range map[string]*Conn{"active": c, "passive": s} {
			a, _ := conn.QP.Query()
			if got := a.AHAttr.GRH.TrafficClass; got != tc.want {
				t.Errorf("dial TOS %#x, listen TOS %#x: %s QP's traffic class %#x, want %#x", tc.dial, tc.listen, side, got, tc.want)
			}
		}
		c.Close()
		s.Close()
		l.Close()
	}
}
