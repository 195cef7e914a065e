package verbs

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/link/pipe"
)

// TestIPv6 runs RC and UD over IPv6 addresses: GIDs are the addresses
// themselves, the ICRC covers the IPv6 header, and the UD GRH area holds
// the 40-byte IPv6 header (docs/protocol.md §6.1).
func TestIPv6(t *testing.T) {
	for _, typ := range []QPType{QPTypeRC, QPTypeUD} {
		ea, eb, err := pipe.New(pipe.Config{Addr: netip.MustParseAddrPort("[fd00::1]:4791"), MTU: 9000},
			pipe.Config{Addr: netip.MustParseAddrPort("[fd00::2]:4791"), MTU: 9000})
		if err != nil {
			t.Fatal(err)
		}
		o := pairOpts{typ: typ}
		a, b := newPairOn(t, ea, eb, o)
		if g := b.dev.gids[1]; g.Addr() != netip.MustParseAddr("fd00::2") {
			t.Fatalf("GID %v", g)
		}
		fill(a.buf[:3000], 9)
		postRecv(t, b, 1, 0, 8192)
		wr := SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 3000)}
		want := uint32(3000)
		if typ == QPTypeUD {
			ah, err := a.pd.CreateAH(&AHAttr{IsGlobal: true, PortNum: 1, GRH: GlobalRoute{DGID: b.dev.gids[1], SGIDIndex: 1, HopLimit: 7}})
			if err != nil {
				t.Fatal(err)
			}
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, b.qp.QPN(), 0x11111111
			wr.SGList = sge(a, 0, 1000)
			want = 1040
		}
		post(t, a.qp, wr)
		wc := waitWC(t, b.rcq, 1, 5*time.Second)
		if wc[0].Status != WCSuccess || wc[0].ByteLen != want {
			t.Fatalf("%v: %+v", typ, wc[0])
		}
		if typ == QPTypeUD {
			g := b.buf[:40]
			if g[0]>>4 != 6 || g[6] != 17 || netip.AddrFrom16([16]byte(g[8:24])) != netip.MustParseAddr("fd00::1") {
				t.Fatalf("GRH %x", g)
			}
			mustEqual(t, b.buf[40:1040], a.buf[:1000])
		} else {
			mustEqual(t, b.buf[:3000], a.buf[:3000])
		}
		if b.dev.Stats().ICRCErrors.Load() != 0 {
			t.Fatal("ICRC errors over IPv6")
		}
	}
}
