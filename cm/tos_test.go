package cm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
	"github.com/softroce/softroce/wire"
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
		l, c, s := connectTOS(t, p.addrB().String()+":7175", tc.listen, tc.dial)
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

// connectTOS listens on addr with TOS listen, dials it with TOS dial, and
// returns the listener and the two ends (active, passive).
func connectTOS(t *testing.T, addr string, listen, dial uint8) (*Listener, *Conn, *Conn) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	l, err := Listen(addr, &Options{TOS: listen})
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
	c, err := Dial(ctx, addr, &Options{TOS: dial})
	if err != nil {
		t.Fatal(err)
	}
	s := <-acc
	if s == nil {
		t.FailNow()
	}
	return l, c, s
}

// tosRecorder is a link endpoint that records the traffic class and the
// bytes of every datagram it sends.
type tosRecorder struct {
	link.Endpoint
	mu   sync.Mutex
	sent []tosRecord
}

type tosRecord struct {
	tos uint8
	b   []byte
}

func (r *tosRecorder) WriteBatch(pkts []link.Packet) (int, error) {
	n, err := r.Endpoint.WriteBatch(pkts)
	r.mu.Lock()
	for _, p := range pkts[:n] {
		r.sent = append(r.sent, tosRecord{p.TOS, bytes.Clone(p.Bytes())})
	}
	r.mu.Unlock()
	return n, err
}

// cmMADs returns the traffic class of each CM MAD r sent (to QP 1), by
// attribute name.
func (r *tosRecorder) cmMADs() map[string][]uint8 {
	names := map[uint16]string{0x10: "REQ", 0x11: "MRA", 0x12: "REJ", 0x13: "REP", 0x14: "RTU", 0x15: "DREQ", 0x16: "DREP"}
	r.mu.Lock()
	defer r.mu.Unlock()
	got := map[string][]uint8{}
	for _, s := range r.sent {
		var p wire.Packet
		if err := p.Parse(s.b); err != nil || p.BTH.DestQP != 1 || len(p.Payload) < 24 {
			continue
		}
		if n, ok := names[binary.BigEndian.Uint16(p.Payload[16:])]; ok {
			got[n] = append(got[n], s.tos)
		}
	}
	return got
}

// TestCMMADsTOS: a connection's CM MADs carry its traffic class, as the
// kernel's ib_cm sends them with the connection path's address vector:
// the active side's REQ, RTU and DREQ with the ID's TOS, the passive
// side's REP and DREP with the REQ's. Without a TOS they go with 0.
func TestCMMADsTOS(t *testing.T) {
	for _, tc := range []struct{ dial, listen, want uint8 }{{0x68, 0, 0x68}, {0, 0x20, 0}} {
		n := netSeq.Add(1)
		ea, eb, err := pipe.New(
			pipe.Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.1:4791", 100+n/250, n%250)), Seed: uint64(n)},
			pipe.Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.2:4791", 100+n/250, n%250)), Seed: uint64(n) + 7})
		if err != nil {
			t.Fatal(err)
		}
		ra, rb := &tosRecorder{Endpoint: ea}, &tosRecorder{Endpoint: eb}
		da, err := verbs.Open(ra, &verbs.Config{Name: "ta"})
		if err != nil {
			t.Fatal(err)
		}
		db, err := verbs.Open(rb, &verbs.Config{Name: "tb"})
		if err != nil {
			t.Fatal(err)
		}
		aa, err := Attach(da, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		ab, err := Attach(db, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		l, c, s := connectTOS(t, ab.Addr().String()+":7176", tc.listen, tc.dial)
		c.Close() // DREQ from the active side, DREP from the passive one
		waitFor(t, 5*time.Second, "the DREP", func() bool { return len(rb.cmMADs()["DREP"]) > 0 })
		s.Close()
		l.Close()
		for side, want := range map[*tosRecorder][]string{ra: {"REQ", "RTU", "DREQ"}, rb: {"REP", "DREP"}} {
			got := side.cmMADs()
			for _, m := range want {
				if len(got[m]) == 0 {
					t.Errorf("dial TOS %#x: no %s sent", tc.dial, m)
				}
				for _, tos := range got[m] {
					if tos != tc.want {
						t.Errorf("dial TOS %#x, listen TOS %#x: %s sent with traffic class %#x, want %#x", tc.dial, tc.listen, m, tos, tc.want)
					}
				}
			}
		}
		aa.Close()
		ab.Close()
		da.Close()
		db.Close()
	}
}
