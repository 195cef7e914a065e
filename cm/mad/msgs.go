package mad

import (
	"encoding/binary"

	"github.com/softroce/softroce/wire"
)

// Private-data field sizes of the CM messages (IBTA vol. 1 ch. 12).
const (
	REQPrivateDataLen     = 92
	MRAPrivateDataLen     = 222
	REJPrivateDataLen     = 148
	REPPrivateDataLen     = 196
	RTUPrivateDataLen     = 224
	DREQPrivateDataLen    = 220
	DREPPrivateDataLen    = 224
	SIDRREQPrivateDataLen = 216
	SIDRREPPrivateDataLen = 136
	LAPPrivateDataLen     = 168
	APRPrivateDataLen     = 148

	// InfoLen is the size of the REJ ARI, SIDR_REP and APR additional-information fields.
	InfoLen = 72
)

// TransportType is the REQ Transport Service Type field.
type TransportType uint8

// Transport service types. XRC is TransportXRCExt with ExtendedTransportType 1.
const (
	TransportRC     TransportType = 0
	TransportUC     TransportType = 1
	TransportRD     TransportType = 2
	TransportXRCExt TransportType = 3
)

// MsgKind is the 2-bit "message rejected" / "message MRAed" field.
type MsgKind uint8

// Values of REJ.MessageRejected and MRA.MessageMRAed.
const (
	MsgREQ   MsgKind = 0
	MsgREP   MsgKind = 1
	MsgOther MsgKind = 2 // REJ: other; MRA: LAP
)

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

func b2u(v bool, bit byte) byte {
	if v {
		return bit
	}
	return 0
}

// Path is a primary or alternate path of a REQ (44 bytes), or the alternate
// path of a LAP. On RoCE the LIDs are 0 or 0xFFFF and the GIDs carry the IP
// addresses.
type Path struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        [16]byte // source GID (the sender of the REQ)
	RemoteGID       [16]byte
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5 bits
}

func (p *Path) decode(b []byte) {
	p.LocalLID = binary.BigEndian.Uint16(b[0:])
	p.RemoteLID = binary.BigEndian.Uint16(b[2:])
	copy(p.LocalGID[:], b[4:20])
	copy(p.RemoteGID[:], b[20:36])
	p.FlowLabel = binary.BigEndian.Uint32(b[36:]) >> 12
	p.PacketRate = b[39] & 0x3F
	p.TrafficClass = b[40]
	p.HopLimit = b[41]
	p.SL = b[42] >> 4
	p.SubnetLocal = b[42]&0x08 != 0
	p.LocalACKTimeout = b[43] >> 3
}

func (p *Path) encode(b []byte) {
	binary.BigEndian.PutUint16(b[0:], p.LocalLID)
	binary.BigEndian.PutUint16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	binary.BigEndian.PutUint32(b[36:], p.FlowLabel<<12|uint32(p.PacketRate&0x3F))
	b[40] = p.TrafficClass
	b[41] = p.HopLimit
	b[42] = p.SL<<4 | b2u(p.SubnetLocal, 0x08)
	b[43] = p.LocalACKTimeout << 3
}

// REQ is the connection request (attribute 0x0010).
type REQ struct {
	Header                  // its AttrMod carries the ECE options (Enhanced Connection Establishment)
	LocalCommID             uint32
	VendorID                uint32 // 24 bits: the ECE vendor ID (0: no ECE)
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits; 4.096 us * 2^t
	TransportType           TransportType
	EndToEndFlowControl     bool
	// StartingPSN is the PSN the sender of the REQ expects to receive: Linux
	// sets the active side's rq_psn and the passive side's sq_psn from it
	// (cm.c; confirmed by the captures: the passive side transmits from it).
	StartingPSN            uint32 // 24 bits
	LocalCMResponseTimeout uint8  // 5 bits
	RetryCount             uint8  // 3 bits
	PKey                   uint16
	PathMTU                wire.MTU // 4 bits
	RDCExists              bool
	RNRRetryCount          uint8 // 3 bits
	MaxCMRetries           uint8 // 4 bits
	SRQ                    bool
	ExtendedTransportType  uint8 // 3 bits
	Primary                Path
	Alternate              Path
	SAPSupported           bool
	PrivateData            []byte // up to 92 bytes; rdma_cm puts a CMAHeader first
}

// Parse decodes b, a whole 256-byte MAD carrying a REQ.
func (m *REQ) Parse(b []byte) error {
	if err := m.Header.parseAs(b, AttrREQ); err != nil {
		return err
	}
	d := b[HeaderLen:]
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.VendorID = get24(d[5:])
	m.ServiceID = binary.BigEndian.Uint64(d[8:])
	m.LocalCAGUID = binary.BigEndian.Uint64(d[16:])
	m.LocalQKey = binary.BigEndian.Uint32(d[28:])
	m.LocalQPN = get24(d[32:])
	m.ResponderResources = d[35]
	m.LocalEECN = get24(d[36:])
	m.InitiatorDepth = d[39]
	m.RemoteEECN = get24(d[40:])
	m.RemoteCMResponseTimeout = d[43] >> 3
	m.TransportType = TransportType(d[43] >> 1 & 3)
	m.EndToEndFlowControl = d[43]&1 != 0
	m.StartingPSN = get24(d[44:])
	m.LocalCMResponseTimeout = d[47] >> 3
	m.RetryCount = d[47] & 7
	m.PKey = binary.BigEndian.Uint16(d[48:])
	m.PathMTU = wire.MTU(d[50] >> 4)
	m.RDCExists = d[50]&0x08 != 0
	m.RNRRetryCount = d[50] & 7
	m.MaxCMRetries = d[51] >> 4
	m.SRQ = d[51]&0x08 != 0
	m.ExtendedTransportType = d[51] & 7
	m.Primary.decode(d[52:96])
	m.Alternate.decode(d[96:140])
	m.SAPSupported = d[139]&0x04 != 0
	m.PrivateData = d[140:232:232]
	return nil
}

// Append appends the 256-byte MAD encoding m.
func (m *REQ) Append(b []byte) ([]byte, error) {
	if len(m.PrivateData) > REQPrivateDataLen {
		return b, ErrPrivateDataSize
	}
	out, d := m.Header.appendAs(b, AttrREQ)
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	put24(d[5:], m.VendorID)
	binary.BigEndian.PutUint64(d[8:], m.ServiceID)
	binary.BigEndian.PutUint64(d[16:], m.LocalCAGUID)
	binary.BigEndian.PutUint32(d[28:], m.LocalQKey)
	put24(d[32:], m.LocalQPN)
	d[35] = m.ResponderResources
	put24(d[36:], m.LocalEECN)
	d[39] = m.InitiatorDepth
	put24(d[40:], m.RemoteEECN)
	d[43] = m.RemoteCMResponseTimeout<<3 | byte(m.TransportType&3)<<1 | b2u(m.EndToEndFlowControl, 1)
	put24(d[44:], m.StartingPSN)
	d[47] = m.LocalCMResponseTimeout<<3 | m.RetryCount&7
	binary.BigEndian.PutUint16(d[48:], m.PKey)
	d[50] = byte(m.PathMTU)<<4 | b2u(m.RDCExists, 0x08) | m.RNRRetryCount&7
	d[51] = m.MaxCMRetries<<4 | b2u(m.SRQ, 0x08) | m.ExtendedTransportType&7
	m.Primary.encode(d[52:96])
	m.Alternate.encode(d[96:140])
	d[139] |= b2u(m.SAPSupported, 0x04)
	copy(d[140:], m.PrivateData)
	return out, nil
}

// MRA is the message receipt acknowledgement (attribute 0x0011), asking the
// peer to wait longer.
type MRA struct {
	Header
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   MsgKind // 2 bits: REQ, REP or LAP
	ServiceTimeout uint8   // 5 bits
	PrivateData    []byte  // up to 222 bytes
}

// Parse decodes b, a whole 256-byte MAD carrying an MRA.
func (m *MRA) Parse(b []byte) error {
	if err := m.Header.parseAs(b, AttrMRA); err != nil {
		return err
	}
	d := b[HeaderLen:]
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.MessageMRAed = MsgKind(d[8] >> 6)
	m.ServiceTimeout = d[9] >> 3
	m.PrivateData = d[10:232:232]
	return nil
}

// Append appends the 256-byte MAD encoding m.
func (m *MRA) Append(b []byte) ([]byte, error) {
	if len(m.PrivateData) > MRAPrivateDataLen {
		return b, ErrPrivateDataSize
	}
	out, d := m.Header.appendAs(b, AttrMRA)
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	d[8] = byte(m.MessageMRAed) << 6
	d[9] = m.ServiceTimeout << 3
	copy(d[10:], m.PrivateData)
	return out, nil
}

// REJ is the reject message (attribute 0x0012).
type REJ struct {
	Header
	LocalCommID      uint32
	RemoteCommID     uint32
	MessageRejected  MsgKind // 2 bits: REQ, REP or other
	RejectInfoLength uint8   // 7 bits: valid bytes of ARI
	Reason           RejectReason
	ARI              []byte // additional reject information, up to 72 bytes
	PrivateData      []byte // up to 148 bytes
}

// Parse decodes b, a whole 256-byte MAD carrying a REJ. ARI is the whole
// 72-byte field; ValidARI trims it to RejectInfoLength.
func (m *REJ) Parse(b []byte) error {
	if err := m.Header.parseAs(b, AttrREJ); err != nil {
		return err
	}
	d := b[HeaderLen:]
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.MessageRejected = MsgKind(d[8] >> 6)
	m.RejectInfoLength = d[9] >> 1
	m.Reason = RejectReason(binary.BigEndian.Uint16(d[10:]))
	m.ARI = d[12:84:84]
	m.PrivateData = d[84:232:232]
	return nil
}

// ValidARI returns the first RejectInfoLength bytes of ARI (at most 72).
func (m *REJ) ValidARI() []byte { return validInfo(m.ARI, int(m.RejectInfoLength)) }

func validInfo(info []byte, n int) []byte {
	return info[:min(n, len(info))]
}

// Append appends the 256-byte MAD encoding m.
func (m *REJ) Append(b []byte) ([]byte, error) {
	if len(m.PrivateData) > REJPrivateDataLen {
		return b, ErrPrivateDataSize
	}
	if len(m.ARI) > InfoLen {
		return b, ErrInfoSize
	}
	out, d := m.Header.appendAs(b, AttrREJ)
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	d[8] = byte(m.MessageRejected) << 6
	d[9] = m.RejectInfoLength << 1
	binary.BigEndian.PutUint16(d[10:], uint16(m.Reason))
	copy(d[12:84], m.ARI)
	copy(d[84:], m.PrivateData)
	return out, nil
}

// REP is the connection reply (attribute 0x0013).
type REP struct {
	Header       // its AttrMod carries the ECE options
	LocalCommID  uint32
	RemoteCommID uint32 // the REQ's LocalCommID
	VendorID     uint32 // 24 bits: the ECE vendor ID (0: no ECE), in three bytes of the message
	LocalQKey    uint32
	LocalQPN     uint32 // 24 bits
	LocalEECN    uint32 // 24 bits
	// StartingPSN is the passive side's receive PSN: the active side sends
	// from it (its sq_psn), the passive side's rq_psn.
	StartingPSN         uint32 // 24 bits
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         []byte // up to 196 bytes
}

// Parse decodes b, a whole 256-byte MAD carrying a REP.
func (m *REP) Parse(b []byte) error {
	if err := m.Header.parseAs(b, AttrREP); err != nil {
		return err
	}
	d := b[HeaderLen:]
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.LocalQKey = binary.BigEndian.Uint32(d[8:])
	m.LocalQPN = get24(d[12:])
	m.LocalEECN = get24(d[16:])
	m.StartingPSN = get24(d[20:])
	m.VendorID = uint32(d[15])<<16 | uint32(d[19])<<8 | uint32(d[23])
	m.ResponderResources = d[24]
	m.InitiatorDepth = d[25]
	m.TargetACKDelay = d[26] >> 3
	m.FailoverAccepted = d[26] >> 1 & 3
	m.EndToEndFlowControl = d[26]&1 != 0
	m.RNRRetryCount = d[27] >> 5
	m.SRQ = d[27]&0x10 != 0
	m.LocalCAGUID = binary.BigEndian.Uint64(d[28:])
	m.PrivateData = d[36:232:232]
	return nil
}

// Append appends the 256-byte MAD encoding m.
func (m *REP) Append(b []byte) ([]byte, error) {
	if len(m.PrivateData) > REPPrivateDataLen {
		return b, ErrPrivateDataSize
	}
	out, d := m.Header.appendAs(b, AttrREP)
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	binary.BigEndian.PutUint32(d[8:], m.LocalQKey)
	put24(d[12:], m.LocalQPN)
	put24(d[16:], m.LocalEECN)
	put24(d[20:], m.StartingPSN)
	d[15], d[19], d[23] = byte(m.VendorID>>16), byte(m.VendorID>>8), byte(m.VendorID)
	d[24] = m.ResponderResources
	d[25] = m.InitiatorDepth
	d[26] = m.TargetACKDelay<<3 | m.FailoverAccepted&3<<1 | b2u(m.EndToEndFlowControl, 1)
	d[27] = m.RNRRetryCount<<5 | b2u(m.SRQ, 0x10)
	binary.BigEndian.PutUint64(d[28:], m.LocalCAGUID)
	copy(d[36:], m.PrivateData)
	return out, nil
}

// RTU is ready-to-use (attribute 0x0014), completing the three-way handshake.
type RTU struct {
	Header
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // up to 224 bytes
}

// Parse decodes b, a whole 256-byte MAD carrying an RTU.
func (m *RTU) Parse(b []byte) error {
	return parseIDsData(b, AttrRTU, &m.Header, &m.LocalCommID, &m.RemoteCommID, &m.PrivateData)
}

// Append appends the 256-byte MAD encoding m.
func (m *RTU) Append(b []byte) ([]byte, error) {
	return appendIDsData(b, AttrRTU, &m.Header, m.LocalCommID, m.RemoteCommID, m.PrivateData)
}

// DREP is the disconnect reply (attribute 0x0016).
type DREP struct {
	Header
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // up to 224 bytes
}

// Parse decodes b, a whole 256-byte MAD carrying a DREP.
func (m *DREP) Parse(b []byte) error {
	return parseIDsData(b, AttrDREP, &m.Header, &m.LocalCommID, &m.RemoteCommID, &m.PrivateData)
}

// Append appends the 256-byte MAD encoding m.
func (m *DREP) Append(b []byte) ([]byte, error) {
	return appendIDsData(b, AttrDREP, &m.Header, m.LocalCommID, m.RemoteCommID, m.PrivateData)
}

func parseIDsData(b []byte, a AttrID, h *Header, local, remote *uint32, pd *[]byte) error {
	if err := h.parseAs(b, a); err != nil {
		return err
	}
	d := b[HeaderLen:]
	*local = binary.BigEndian.Uint32(d[0:])
	*remote = binary.BigEndian.Uint32(d[4:])
	*pd = d[8:232:232]
	return nil
}

func appendIDsData(b []byte, a AttrID, h *Header, local, remote uint32, pd []byte) ([]byte, error) {
	if len(pd) > DataLen-8 {
		return b, ErrPrivateDataSize
	}
	out, d := h.appendAs(b, a)
	binary.BigEndian.PutUint32(d[0:], local)
	binary.BigEndian.PutUint32(d[4:], remote)
	copy(d[8:], pd)
	return out, nil
}

// DREQ is the disconnect request (attribute 0x0015).
type DREQ struct {
	Header
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits (QPN or EECN of the receiver)
	PrivateData  []byte // up to 220 bytes
}

// Parse decodes b, a whole 256-byte MAD carrying a DREQ.
func (m *DREQ) Parse(b []byte) error {
	if err := m.Header.parseAs(b, AttrDREQ); err != nil {
		return err
	}
	d := b[HeaderLen:]
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.RemoteQPN = get24(d[8:])
	m.PrivateData = d[12:232:232]
	return nil
}

// Append appends the 256-byte MAD encoding m.
func (m *DREQ) Append(b []byte) ([]byte, error) {
	if len(m.PrivateData) > DREQPrivateDataLen {
		return b, ErrPrivateDataSize
	}
	out, d := m.Header.appendAs(b, AttrDREQ)
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	put24(d[8:], m.RemoteQPN)
	copy(d[12:], m.PrivateData)
	return out, nil
}

// SIDRREQ is the service ID resolution request (attribute 0x0017) used by
// rdma_cm's UD port spaces.
type SIDRREQ struct {
	Header
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData []byte // up to 216 bytes; rdma_cm puts a CMAHeader first
}

// Parse decodes b, a whole 256-byte MAD carrying a SIDR_REQ.
func (m *SIDRREQ) Parse(b []byte) error {
	if err := m.Header.parseAs(b, AttrSIDRREQ); err != nil {
		return err
	}
	d := b[HeaderLen:]
	m.RequestID = binary.BigEndian.Uint32(d[0:])
	m.PKey = binary.BigEndian.Uint16(d[4:])
	m.ServiceID = binary.BigEndian.Uint64(d[8:])
	m.PrivateData = d[16:232:232]
	return nil
}

// Append appends the 256-byte MAD encoding m.
func (m *SIDRREQ) Append(b []byte) ([]byte, error) {
	if len(m.PrivateData) > SIDRREQPrivateDataLen {
		return b, ErrPrivateDataSize
	}
	out, d := m.Header.appendAs(b, AttrSIDRREQ)
	binary.BigEndian.PutUint32(d[0:], m.RequestID)
	binary.BigEndian.PutUint16(d[4:], m.PKey)
	binary.BigEndian.PutUint64(d[8:], m.ServiceID)
	copy(d[16:], m.PrivateData)
	return out, nil
}

// SIDRStatus is the SIDR_REP status.
type SIDRStatus uint8

// SIDR_REP status values.
const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupported        SIDRStatus = 1 // service ID not supported
	SIDRReject             SIDRStatus = 2
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5
)

var sidrNames = [...]string{"SUCCESS", "UNSUPPORTED", "REJECT", "NO_QP", "REDIRECT", "UNSUPPORTED_VERSION"}

// String returns the status name, as in Linux's enum ib_cm_sidr_status.
func (s SIDRStatus) String() string {
	if int(s) < len(sidrNames) {
		return sidrNames[s]
	}
	return "SIDR_STATUS(" + itoa(int(s)) + ")"
}

// SIDRREP is the service ID resolution reply (attribute 0x0018).
type SIDRREP struct {
	Header
	RequestID     uint32
	Status        SIDRStatus
	AddInfoLength uint8
	QPN           uint32 // 24 bits
	ServiceID     uint64
	QKey          uint32
	AddInfo       []byte // up to 72 bytes
	PrivateData   []byte // up to 136 bytes
}

// Parse decodes b, a whole 256-byte MAD carrying a SIDR_REP.
func (m *SIDRREP) Parse(b []byte) error {
	if err := m.Header.parseAs(b, AttrSIDRREP); err != nil {
		return err
	}
	d := b[HeaderLen:]
	m.RequestID = binary.BigEndian.Uint32(d[0:])
	m.Status = SIDRStatus(d[4])
	m.AddInfoLength = d[5]
	m.QPN = get24(d[8:])
	m.ServiceID = binary.BigEndian.Uint64(d[12:])
	m.QKey = binary.BigEndian.Uint32(d[20:])
	m.AddInfo = d[24:96:96]
	m.PrivateData = d[96:232:232]
	return nil
}

// ValidAddInfo returns the first AddInfoLength bytes of AddInfo.
func (m *SIDRREP) ValidAddInfo() []byte { return validInfo(m.AddInfo, int(m.AddInfoLength)) }

// Append appends the 256-byte MAD encoding m.
func (m *SIDRREP) Append(b []byte) ([]byte, error) {
	if len(m.PrivateData) > SIDRREPPrivateDataLen {
		return b, ErrPrivateDataSize
	}
	if len(m.AddInfo) > InfoLen {
		return b, ErrInfoSize
	}
	out, d := m.Header.appendAs(b, AttrSIDRREP)
	binary.BigEndian.PutUint32(d[0:], m.RequestID)
	d[4] = byte(m.Status)
	d[5] = m.AddInfoLength
	put24(d[8:], m.QPN)
	binary.BigEndian.PutUint64(d[12:], m.ServiceID)
	binary.BigEndian.PutUint32(d[20:], m.QKey)
	copy(d[24:96], m.AddInfo)
	copy(d[96:], m.PrivateData)
	return out, nil
}

// LAP is the load-alternate-path request (attribute 0x0019). Linux no longer
// acts on it; it is decoded for completeness.
type LAP struct {
	Header
	LocalCommID             uint32
	RemoteCommID            uint32
	RemoteQPN               uint32 // 24 bits (QPN or EECN)
	RemoteCMResponseTimeout uint8  // 5 bits
	Alternate               Path
	PrivateData             []byte // up to 168 bytes
}

// Parse decodes b, a whole 256-byte MAD carrying a LAP.
func (m *LAP) Parse(b []byte) error {
	if err := m.Header.parseAs(b, AttrLAP); err != nil {
		return err
	}
	d := b[HeaderLen:]
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.RemoteQPN = get24(d[12:])
	m.RemoteCMResponseTimeout = d[15] >> 3
	p := &m.Alternate
	p.LocalLID = binary.BigEndian.Uint16(d[20:])
	p.RemoteLID = binary.BigEndian.Uint16(d[22:])
	copy(p.LocalGID[:], d[24:40])
	copy(p.RemoteGID[:], d[40:56])
	p.FlowLabel = binary.BigEndian.Uint32(d[56:]) >> 12
	p.TrafficClass = d[59]
	p.HopLimit = d[60]
	p.PacketRate = d[61] & 0x3F
	p.SL = d[62] >> 4
	p.SubnetLocal = d[62]&0x08 != 0
	p.LocalACKTimeout = d[63] >> 3
	m.PrivateData = d[64:232:232]
	return nil
}

// Append appends the 256-byte MAD encoding m.
func (m *LAP) Append(b []byte) ([]byte, error) {
	if len(m.PrivateData) > LAPPrivateDataLen {
		return b, ErrPrivateDataSize
	}
	out, d := m.Header.appendAs(b, AttrLAP)
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	put24(d[12:], m.RemoteQPN)
	d[15] = m.RemoteCMResponseTimeout << 3
	p := &m.Alternate
	binary.BigEndian.PutUint16(d[20:], p.LocalLID)
	binary.BigEndian.PutUint16(d[22:], p.RemoteLID)
	copy(d[24:40], p.LocalGID[:])
	copy(d[40:56], p.RemoteGID[:])
	binary.BigEndian.PutUint32(d[56:], p.FlowLabel<<12) // low 12 bits: reserved nibble + TC byte
	d[59] = p.TrafficClass
	d[60] = p.HopLimit
	d[61] = p.PacketRate & 0x3F
	d[62] = p.SL<<4 | b2u(p.SubnetLocal, 0x08)
	d[63] = p.LocalACKTimeout << 3
	copy(d[64:], m.PrivateData)
	return out, nil
}

// APR is the alternate-path response (attribute 0x001A).
type APR struct {
	Header
	LocalCommID   uint32
	RemoteCommID  uint32
	AddInfoLength uint8
	ARStatus      uint8
	AddInfo       []byte // up to 72 bytes
	PrivateData   []byte // up to 148 bytes
}

// Parse decodes b, a whole 256-byte MAD carrying an APR.
func (m *APR) Parse(b []byte) error {
	if err := m.Header.parseAs(b, AttrAPR); err != nil {
		return err
	}
	d := b[HeaderLen:]
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.AddInfoLength = d[8]
	m.ARStatus = d[9]
	m.AddInfo = d[12:84:84]
	m.PrivateData = d[84:232:232]
	return nil
}

// ValidAddInfo returns the first AddInfoLength bytes of AddInfo.
func (m *APR) ValidAddInfo() []byte { return validInfo(m.AddInfo, int(m.AddInfoLength)) }

// Append appends the 256-byte MAD encoding m.
func (m *APR) Append(b []byte) ([]byte, error) {
	if len(m.PrivateData) > APRPrivateDataLen {
		return b, ErrPrivateDataSize
	}
	if len(m.AddInfo) > InfoLen {
		return b, ErrInfoSize
	}
	out, d := m.Header.appendAs(b, AttrAPR)
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	d[8] = m.AddInfoLength
	d[9] = m.ARStatus
	copy(d[12:84], m.AddInfo)
	copy(d[84:], m.PrivateData)
	return out, nil
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	neg := v < 0
	if neg {
		v = -v
	}
	for v > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}
