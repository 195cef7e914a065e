package cm

import (
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/internal/netnstest"
	"github.com/softroce/softroce/verbs"
)

// openUDPIn opens a softroce device on addr inside network namespace ns:
// the socket is created on a thread switched into ns and keeps working in
// ns after the thread switches back.
func openUDPIn(t *testing.T, ns, addr string) *verbs.Device {
	t.Helper()
	var d *verbs.Device
	if err := netnstest.Do(ns, func() (err error) {
		d, err = verbs.OpenUDP(addr+":4791", &verbs.Config{Name: ns})
		return err
	}); err != nil {
		t.Fatalf("device in %s: %v", ns, err)
	}
	return d
}

// TestNetns connects across two network namespaces joined by a veth pair
// (as two hosts), RC and UD.
func TestNetns(t *testing.T) {
	nsp := netnstest.NewPair(t, netnstest.Config{
		Prefix: "srcm",
		IPv4:   [2]string{"10.232.0.1/24", "10.232.0.2/24"},
	})
	ns1, ns2, a1, a2 := nsp.NS[0], nsp.NS[1], nsp.Addr[0], nsp.Addr[1]

	db := openUDPIn(t, ns1, a1) // server side
	defer db.Close()
	da := openUDPIn(t, ns2, a2)
	defer da.Close()
	// A fresh veth may drop the first packets (carrier, ARP): allow more
	// time before UNREACHABLE than the in-memory tests do.
	ncfg := testConfig()
	ncfg.Timeout, ncfg.MaxRetries = 250*time.Millisecond, 10
	ab, err := Attach(db, ncfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Close()
	aa, err := Attach(da, ncfg)
	if err != nil {
		t.Fatal(err)
	}
	defer aa.Close()
	p := &pair{da: da, db: db, aa: aa, ab: ab}
	for _, ps := range []mad.PortSpace{mad.PortSpaceTCP, mad.PortSpaceUDP} {
		t.Run(ps.String(), func(t *testing.T) {
			c, s := connect(t, p, "7500", &Options{PortSpace: ps, PrivateData: []byte("across")}, &Options{PortSpace: ps})
			if !strings.HasPrefix(string(s.PeerPrivateData), "across") {
				t.Errorf("private data %q", s.PeerPrivateData)
			}
			if ps == mad.PortSpaceTCP {
				src := newBuf(t, c.PD, 4096)
				dst := newBuf(t, s.PD, 4096)
				copy(dst.b, "remote memory")
				s.QP.State() // order the fill before the server's receive path
				c.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: src.sge(),
					RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey()}})
				if wc := pollWC(t, c.SendCQ, 10*time.Second); wc.Status != verbs.WCSuccess || string(src.b[:13]) != "remote memory" {
					t.Fatalf("RDMA READ across namespaces: %v %q", wc.Status, src.b[:13])
				}
				s.Disconnect()
				<-c.Disconnected()
			}
		})
	}
}
