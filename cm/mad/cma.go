package mad

import (
	"encoding/binary"
	"net/netip"
)

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space).
type PortSpace uint16

// rdma_cm port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106 // RC connections (rping, perftest -R)
	PortSpaceUDP   PortSpace = 0x0111 // UD via SIDR (udaddy)
	PortSpaceIB    PortSpace = 0x013F
)

// String returns "TCP", "UDP", "IB", "IPOIB" or the hex value.
func (ps PortSpace) String() string {
	switch ps {
	case PortSpaceIPoIB:
		return "IPOIB"
	case PortSpaceTCP:
		return "TCP"
	case PortSpaceUDP:
		return "UDP"
	case PortSpaceIB:
		return "IB"
	}
	return "PS(" + itoa(int(ps)) + ")"
}

// ServiceID returns the CM service ID rdma_cm uses for port in port space ps:
// (ps << 16) + port, e.g. rping's TCP port 7174 -> 0x0000000001061C06.
func ServiceID(ps PortSpace, port uint16) uint64 {
	return uint64(ps)<<16 | uint64(port)
}

// ServiceIDPrefixMask selects the port-space part of an rdma_cm service ID
// (RDMA_IB_IP_PS_MASK).
const ServiceIDPrefixMask = 0xFFFFFFFFFFFF0000

// ParseServiceID splits an rdma_cm IP-based service ID into port space and
// port. ok is false when the upper 48 bits are not one of the known port
// spaces (the ID did not come from rdma_cm's IP addressing).
func ParseServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	if id&ServiceIDPrefixMask>>32 != 0 {
		return 0, 0, false
	}
	ps = PortSpace(id >> 16)
	switch ps {
	case PortSpaceIPoIB, PortSpaceTCP, PortSpaceUDP, PortSpaceIB:
		return ps, uint16(id), true
	}
	return 0, 0, false
}

// rdma_cm constants.
const (
	// UDPQKey is RDMA_UDP_QKEY, the Q_Key of rdma_cm UD QPs (port space UDP).
	UDPQKey = 0x01234567
	// CMAHeaderLen is the size of rdma_cm's cma_hdr in REQ/SIDR_REQ private data.
	CMAHeaderLen = 36

	// Private data an rdma_cm user may pass (rdma_conn_param.private_data_len limits).
	MaxREQUserData     = REQPrivateDataLen - CMAHeaderLen     // 56
	MaxREPUserData     = REPPrivateDataLen                    // 196
	MaxREJUserData     = REJPrivateDataLen                    // 148
	MaxRTUUserData     = RTUPrivateDataLen                    // 224
	MaxDREQUserData    = DREQPrivateDataLen                   // 220
	MaxDREPUserData    = DREPPrivateDataLen                   // 224
	MaxMRAUserData     = MRAPrivateDataLen                    // 222
	MaxSIDRREQUserData = SIDRREQPrivateDataLen - CMAHeaderLen // 180
	MaxSIDRREPUserData = SIDRREPPrivateDataLen                // 136
)

// CMAHeader is rdma_cm's cma_hdr (36 bytes), the start of REQ and SIDR_REQ
// private data: version 0, IP version in the high nibble of byte 1, the
// active side's (source) port, then source and destination IP, each in a
// 16-byte field (IPv4 in the last 4 bytes, first 12 zero).
type CMAHeader struct {
	Version uint8 // cma_version, 0
	SrcPort uint16
	Src     netip.Addr // active side
	Dst     netip.Addr // passive side: listeners match on it
}

// ParseCMAHeader decodes the cma_hdr at the start of private data pd and
// returns the user's private data that follows it (aliasing pd).
func ParseCMAHeader(pd []byte) (CMAHeader, []byte, error) {
	var h CMAHeader
	if len(pd) < CMAHeaderLen {
		return h, nil, ErrCMAHeaderLen
	}
	h.Version = pd[0]
	if h.Version != 0 {
		return h, nil, ErrCMAVersion
	}
	h.SrcPort = binary.BigEndian.Uint16(pd[2:])
	switch pd[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(pd[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(pd[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(pd[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(pd[20:36]))
	default:
		return h, nil, ErrCMAIPVersion
	}
	return h, pd[CMAHeaderLen:], nil
}

// IPVersion returns 4 or 6 (from Src), or 0 when Src is not set.
func (h *CMAHeader) IPVersion() int {
	switch {
	case h.Src.Is4():
		return 4
	case h.Src.Is6():
		return 6
	}
	return 0
}

// Append appends the 36-byte encoding of h. Src and Dst must be both IPv4 or
// both IPv6 (IPv4-mapped IPv6 addresses count as IPv6, as in cma_hdr).
func (h *CMAHeader) Append(b []byte) ([]byte, error) {
	v := h.IPVersion()
	if v == 0 || h.Dst.Is4() != h.Src.Is4() || !h.Dst.IsValid() {
		return b, ErrCMAAddr
	}
	n := len(b)
	b = grow(b, CMAHeaderLen)
	d := b[n:]
	d[0] = h.Version
	d[1] = byte(v) << 4
	binary.BigEndian.PutUint16(d[2:], h.SrcPort)
	if v == 4 {
		s, t := h.Src.As4(), h.Dst.As4()
		copy(d[16:20], s[:])
		copy(d[32:36], t[:])
	} else {
		s, t := h.Src.As16(), h.Dst.As16()
		copy(d[4:20], s[:])
		copy(d[20:36], t[:])
	}
	return b, nil
}

// RejectReason is the REJ reason code (enum ib_cm_rej_reason).
type RejectReason uint16

// CM reject reasons.
const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4
	RejUnsupported               RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8 // no listener
	RejInvalidTransportType      RejectReason = 9
	RejStaleConn                 RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerDefined           RejectReason = 28 // rdma_reject
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35
)

var rejNames = [...]string{
	RejNoQP:                      "NO_QP",
	RejNoEEC:                     "NO_EEC",
	RejNoResources:               "NO_RESOURCES",
	RejTimeout:                   "TIMEOUT",
	RejUnsupported:               "UNSUPPORTED",
	RejInvalidCommID:             "INVALID_COMM_ID",
	RejInvalidCommInstance:       "INVALID_COMM_INSTANCE",
	RejInvalidServiceID:          "INVALID_SERVICE_ID",
	RejInvalidTransportType:      "INVALID_TRANSPORT_TYPE",
	RejStaleConn:                 "STALE_CONN",
	RejRDCNotExist:               "RDC_NOT_EXIST",
	RejInvalidGID:                "INVALID_GID",
	RejInvalidLID:                "INVALID_LID",
	RejInvalidSL:                 "INVALID_SL",
	RejInvalidTrafficClass:       "INVALID_TRAFFIC_CLASS",
	RejInvalidHopLimit:           "INVALID_HOP_LIMIT",
	RejInvalidPacketRate:         "INVALID_PACKET_RATE",
	RejInvalidAltGID:             "INVALID_ALT_GID",
	RejInvalidAltLID:             "INVALID_ALT_LID",
	RejInvalidAltSL:              "INVALID_ALT_SL",
	RejInvalidAltTrafficClass:    "INVALID_ALT_TRAFFIC_CLASS",
	RejInvalidAltHopLimit:        "INVALID_ALT_HOP_LIMIT",
	RejInvalidAltPacketRate:      "INVALID_ALT_PACKET_RATE",
	RejPortCMRedirect:            "PORT_CM_REDIRECT",
	RejPortRedirect:              "PORT_REDIRECT",
	RejInvalidMTU:                "INVALID_MTU",
	RejInsufficientRespResources: "INSUFFICIENT_RESP_RESOURCES",
	RejConsumerDefined:           "CONSUMER_DEFINED",
	RejInvalidRNRRetry:           "INVALID_RNR_RETRY",
	RejDuplicateLocalCommID:      "DUPLICATE_LOCAL_COMM_ID",
	RejInvalidClassVersion:       "INVALID_CLASS_VERSION",
	RejInvalidFlowLabel:          "INVALID_FLOW_LABEL",
	RejInvalidAltFlowLabel:       "INVALID_ALT_FLOW_LABEL",
	RejVendorOptionNotSupported:  "VENDOR_OPTION_NOT_SUPPORTED",
}

// String returns the reason's name as in Linux (IB_CM_REJ_<name>), e.g.
// "INVALID_SERVICE_ID", or "REJ_REASON(n)" for unknown codes.
func (r RejectReason) String() string {
	if int(r) < len(rejNames) && rejNames[r] != "" {
		return rejNames[r]
	}
	return "REJ_REASON(" + itoa(int(r)) + ")"
}
