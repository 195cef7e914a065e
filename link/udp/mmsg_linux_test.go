package udp

import (
	"net"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cmsgs builds a control buffer as the kernel would deliver it.
func cmsgs(pktinfo4, pktinfo6 bool, tos uint8, gro int) []byte {
	b := make([]byte, oobLen)
	cl := 0
	if pktinfo4 {
		d, sp := putCmsg(b[cl:], unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)
		(*unix.Inet4Pktinfo)(unsafe.Pointer(&d[0])).Addr = [4]byte{127, 0, 0, 9}
		cl += sp
	}
	if pktinfo6 {
		d, sp := putCmsg(b[cl:], unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)
		(*unix.Inet6Pktinfo)(unsafe.Pointer(&d[0])).Addr = netip.IPv6Loopback().As16()
		cl += sp
	}
	if tos != 0 {
		d, sp := putCmsg(b[cl:], unix.IPPROTO_IP, unix.IP_TOS, 1)
		d[0] = tos
		cl += sp
	}
	if gro != 0 {
		d, sp := putCmsg(b[cl:], unix.SOL_UDP, unix.UDP_GRO, 4)
		putInt32(d, int32(gro))
		cl += sp
	}
	return b[:cl]
}

func TestParseCmsgs(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		dst  string
		tos  uint8
		gro  int
		name string
	}{
		{cmsgs(true, false, 3, 1400), "127.0.0.9", 3, 1400, "v4"},
		{cmsgs(false, true, 0, 0), "::1", 0, 0, "v6"},
		{nil, "invalid IP", 0, 0, "empty"},
		{cmsgs(true, false, 0, 0)[:10], "invalid IP", 0, 0, "cut"},
	} {
		dst, tos, gro := parseCmsgs(c.b)
		if dst.String() != c.dst || tos != c.tos || gro != c.gro {
			t.Errorf("%s: parseCmsgs = %v, %d, %d; want %s, %d, %d", c.name, dst, tos, gro, c.dst, c.tos, c.gro)
		}
	}
}

// FuzzParseCmsgs feeds arbitrary control buffers (8-byte aligned, as the
// endpoint's are) to the parser: it must not panic or read out of bounds.
func FuzzParseCmsgs(f *testing.F) {
	f.Add(cmsgs(true, false, 3, 1400))
	f.Add(cmsgs(false, true, 0x10, 0))
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 8, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		al := make([]uint64, (len(in)+7)/8)
		if len(al) == 0 {
			parseCmsgs(nil)
			return
		}
		b := unsafe.Slice((*byte)(unsafe.Pointer(&al[0])), len(al)*8)[:len(in)]
		copy(b, in)
		parseCmsgs(b)
	})
}

// TestLinkLocalZone: a link-local sender's scope ID becomes the zone of Src.
func TestLinkLocalZone(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skip("no lo")
	}
	e := &Endpoint{}
	sa := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: netip.MustParseAddr("fe80::7").As16(), Scope_id: uint32(lo.Index)}
	setPort(&sa.Port, 4791)
	src := addrPortOf(&sa)
	if src.Addr().IsLinkLocalUnicast() {
		src = netip.AddrPortFrom(src.Addr().WithZone(e.zoneName(sa.Scope_id)), src.Port())
	}
	if want := netip.MustParseAddrPort("[fe80::7%lo]:4791"); src != want {
		t.Errorf("got %v, want %v", src, want)
	}
	if z := e.zoneName(999999); z != "999999" {
		t.Errorf("zoneName of an unknown index = %q", z)
	}
	if idx, err := zoneIndex("lo"); err != nil || idx != uint32(lo.Index) {
		t.Errorf("zoneIndex(lo) = %d, %v", idx, err)
	}
}
