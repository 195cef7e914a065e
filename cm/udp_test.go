package cm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/verbs"
)

// TestRealUDP connects two devices on loopback UDP sockets (two addresses
// of 127/8), RC and UD.
func TestRealUDP(t *testing.T) {
	n := rand.IntN(200) + 20
	a1, a2 := fmt.Sprintf("127.%d.%d.1", n, rand.IntN(250)+1), ""
	a2 = a1[:len(a1)-1] + "2"
	da, err := verbs.OpenUDP(a1+":4791", &verbs.Config{Name: "ua"})
	if err != nil {
		t.Skipf("cannot open a UDP device on %s: %v", a1, err)
	}
	defer da.Close()
	db, err := verbs.OpenUDP(a2+":4791", &verbs.Config{Name: "ub"})
	if err != nil {
		t.Skipf("cannot open a UDP device on %s: %v", a2, err)
	}
	defer db.Close()
	aa, err := Attach(da, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer aa.Close()
	ab, err := Attach(db, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Close()
	p := &pair{da: da, db: db, aa: aa, ab: ab}
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
