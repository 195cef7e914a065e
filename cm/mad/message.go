package mad

// Message is implemented by the pointer types of every CM message (*REQ,
// *MRA, *REJ, *REP, *RTU, *DREQ, *DREP, *SIDRREQ, *SIDRREP, *LAP, *APR).
type Message interface {
	// Attr returns the message's attribute ID.
	Attr() AttrID
	// Parse decodes a whole 256-byte MAD into the message, without allocating.
	Parse(b []byte) error
	// Append appends the 256-byte MAD encoding of the message.
	Append(b []byte) ([]byte, error)
	// Hdr returns the message's MAD header.
	Hdr() *Header
}

// Attr returns AttrREQ.
func (*REQ) Attr() AttrID { return AttrREQ }

// Attr returns AttrMRA.
func (*MRA) Attr() AttrID { return AttrMRA }

// Attr returns AttrREJ.
func (*REJ) Attr() AttrID { return AttrREJ }

// Attr returns AttrREP.
func (*REP) Attr() AttrID { return AttrREP }

// Attr returns AttrRTU.
func (*RTU) Attr() AttrID { return AttrRTU }

// Attr returns AttrDREQ.
func (*DREQ) Attr() AttrID { return AttrDREQ }

// Attr returns AttrDREP.
func (*DREP) Attr() AttrID { return AttrDREP }

// Attr returns AttrSIDRREQ.
func (*SIDRREQ) Attr() AttrID { return AttrSIDRREQ }

// Attr returns AttrSIDRREP.
func (*SIDRREP) Attr() AttrID { return AttrSIDRREP }

// Attr returns AttrLAP.
func (*LAP) Attr() AttrID { return AttrLAP }

// Attr returns AttrAPR.
func (*APR) Attr() AttrID { return AttrAPR }

// Hdr returns the MAD header of m (the embedded Header).
func (h *Header) Hdr() *Header { return h }

// NewMessage returns a new zero message of the type attribute a names, or
// ErrUnknownAttr. It allocates; a hot receive path should keep one value of
// each type and call its Parse directly.
func NewMessage(a AttrID) (Message, error) {
	switch a {
	case AttrREQ:
		return new(REQ), nil
	case AttrMRA:
		return new(MRA), nil
	case AttrREJ:
		return new(REJ), nil
	case AttrREP:
		return new(REP), nil
	case AttrRTU:
		return new(RTU), nil
	case AttrDREQ:
		return new(DREQ), nil
	case AttrDREP:
		return new(DREP), nil
	case AttrSIDRREQ:
		return new(SIDRREQ), nil
	case AttrSIDRREP:
		return new(SIDRREP), nil
	case AttrLAP:
		return new(LAP), nil
	case AttrAPR:
		return new(APR), nil
	}
	return nil, ErrUnknownAttr
}

// ParseMessage decodes a whole 256-byte MAD into a newly allocated message of
// the type its attribute ID names. Use it off the hot path; see NewMessage.
func ParseMessage(b []byte) (Message, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	m, err := NewMessage(h.AttrID)
	if err != nil {
		return nil, err
	}
	return m, m.Parse(b)
}
