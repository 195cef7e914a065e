package mad_test

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/wire"
)

// Build the REQ an rdma_cm client sends to rping's default port, then decode
// it as a receiver would.
func Example() {
	src, dst := netip.MustParseAddr("10.77.0.12"), netip.MustParseAddr("10.77.0.11")
	cma := mad.CMAHeader{SrcPort: 55414, Src: src, Dst: dst}
	pd, _ := cma.Append(nil)
	pd = append(pd, "hello"...) // user private data, up to mad.MaxREQUserData
	req := mad.REQ{
		Header:      mad.NewHeader(0x2c7326392),
		LocalCommID: 0x926332c7,
		ServiceID:   mad.ServiceID(mad.PortSpaceTCP, 7174),
		LocalQPN:    0x21, StartingPSN: 0x18d56a, PKey: wire.DefaultPKey, PathMTU: wire.MTU1024,
		RetryCount: 7, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary:     mad.Path{LocalGID: netip.AddrFrom16(src.As16()).As16(), RemoteGID: netip.AddrFrom16(dst.As16()).As16(), HopLimit: 64},
		PrivateData: pd,
	}
	b, err := req.Append(nil) // 256 bytes: the payload of a UD SEND to QP1
	if err != nil {
		panic(err)
	}

	h, _ := mad.ParseHeader(b)
	var got mad.REQ
	if h.AttrID == mad.AttrREQ && got.Parse(b) == nil {
		ps, port, _ := mad.ParseServiceID(got.ServiceID)
		hdr, user, _ := mad.ParseCMAHeader(got.PrivateData)
		fmt.Printf("%v %d bytes, service %#016x (%v port %d), QPN %#x\n", h.AttrID, len(b), got.ServiceID, ps, port, got.LocalQPN)
		fmt.Printf("%v:%d -> %v, user data %q\n", hdr.Src, hdr.SrcPort, hdr.Dst, user[:5])
	}
	// Output:
	// REQ 256 bytes, service 0x0000000001061c06 (TCP port 7174), QPN 0x21
	// 10.77.0.12:55414 -> 10.77.0.11, user data "hello"
}
