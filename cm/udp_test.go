package cm

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/verbs"
)

// newUDPPair opens two devices on loopback UDP sockets (two addresses of
// 127/8), each with an agent; everything is closed at the end of the test.
func newUDPPair(t *testing.T) *pair {
	t.Helper()
	n := rand.IntN(200) + 20
	a1 := fmt.Sprintf("127.%d.%d.1", n, rand.IntN(250)+1)
	a2 := a1[:len(a1)-1] + "2"
	da, err := verbs.OpenUDP(a1+":4791", &verbs.Config{Name: "ua"})
	if err != nil {
		t.Skipf("cannot open a UDP device on %s: %v", a1, err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := verbs.OpenUDP(a2+":4791", &verbs.Config{Name: "ub"})
	if err != nil {
		t.Skipf("cannot open a UDP device on %s: %v", a2, err)
	}
	t.Cleanup(func() { db.Close() })
	aa, err := Attach(da, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { aa.Close() })
	ab, err := Attach(db, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ab.Close() })
	return &pair{da: da, db: db, aa: aa, ab: ab}
}

// TestAgentPollLink: a caller that handles the link itself (PollLink, as
// the C library's rdma_get_cm_event does) leaves no MAD behind: of a burst
// of requests larger than one call takes (pollMADs), what it does not
// handle before it stops polling the agent's goroutine does, though the
// GSI CQ was disarmed while the caller handled its share.
func TestAgentPollLink(t *testing.T) {
	p := newUDPPair(t)
	sch, _ := listenAt(t, netip.AddrPortFrom(p.addrB(), 7331))
	const n = 3 * pollMADs
	// Busy polling first makes the device's receive loop step aside, so
	// that the caller reads the burst.
	for end := time.Now().Add(5 * time.Millisecond); time.Now().Before(end); {
		p.ab.PollLink()
	}
	for i := range n {
		p.aa.mu.Lock()
		p.aa.send(p.addrB(), spoofREQ(p.addrA(), p.addrB(), 7331, uint32(0x50000+i)))
		p.aa.mu.Unlock()
	}
	handled := 0
	for end := time.Now().Add(5 * time.Second); sch.Len() == 0 && time.Now().Before(end); {
		handled += p.ab.PollLink()
	}
	// One more call, which stops at pollMADs, then no more.
	handled += p.ab.PollLink()
	var ids []*ID
	defer func() {
		for _, id := range ids {
			id.Destroy()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for len(ids) < n {
		ev, err := sch.Get(ctx)
		if err != nil {
			t.Fatalf("%d of %d CONNECT_REQUESTs within 5 s (PollLink handled %d datagrams and MADs; B received %d MADs)",
				len(ids), n, handled, p.ab.Stats().MADsReceived.Load())
		}
		if ev.Type == EventConnectRequest {
			ids = append(ids, ev.ID)
		}
	}
	t.Logf("PollLink handled %d datagrams and MADs", handled)
	if n := testing.AllocsPerRun(100, func() { p.ab.PollLink() }); n != 0 {
		t.Errorf("PollLink with nothing to handle: %v allocations, want 0", n)
	}
}

// TestRealUDP connects two devices on loopback UDP sockets (two addresses
// of 127/8), RC and UD.
func TestRealUDP(t *testing.T) {
	p := newUDPPair(t)
	for _, ps := range []mad.PortSpace{mad.PortSpaceTCP, mad.PortSpaceUDP} {
		t.Run(ps.String(), func(t *testing.T) {
			o := &Options{PortSpace: ps, PrivateData: []byte("over udp")}
			c, s := connect(t, p, "7400", o, &Options{PortSpace: ps, PrivateData: []byte("reply")})
			if !bytes.HasPrefix(c.PeerPrivateData, []byte("reply")) || !bytes.HasPrefix(s.PeerPrivateData, []byte("over udp")) {
				t.Errorf("private data %q %q", c.PeerPrivateData, s.PeerPrivateData)
			}
			if ps == mad.PortSpaceTCP {
				src := newBuf(t, c.PD, 8192)
				dst := newBuf(t, s.PD, 8192)
				for i := range dst.b {
					dst.b[i] = byte(i)
				}
				s.QP.State() // the server's receive path takes the QP lock: orders the fill before it
				c.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: src.sge(),
					RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey()}})
				if wc := pollWC(t, c.SendCQ, 5*time.Second); wc.Status != verbs.WCSuccess || !bytes.Equal(src.b, dst.b) {
					t.Fatalf("RDMA READ over UDP: %v", wc.Status)
				}
				c.Disconnect()
				<-s.Disconnected()
			}
		})
	}
}
