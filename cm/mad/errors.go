package mad

// Error reports why a MAD (or a piece of rdma_cm private data) was rejected
// or could not be encoded. The Err* values are the only instances, so
// rejecting a MAD never allocates; compare with errors.Is.
type Error struct {
	Reason string
}

func (e *Error) Error() string { return "cm mad: " + e.Reason }

// Sentinel errors.
var (
	ErrLength          = &Error{"MAD is not 256 bytes long; pass the whole UD payload (BTH/DETH stripped, no pad)"}
	ErrBaseVersion     = &Error{"MAD base version is not 1"}
	ErrNotCM           = &Error{"MAD management class is not 0x07 (Communication Management)"}
	ErrClassVersion    = &Error{"CM class version is not 2"}
	ErrMethod          = &Error{"CM MAD method is not Send (0x03)"}
	ErrAttrMismatch    = &Error{"MAD attribute ID does not match the message type being parsed; dispatch on Header.AttrID first"}
	ErrUnknownAttr     = &Error{"unknown CM attribute ID"}
	ErrPrivateDataSize = &Error{"private data longer than the message's private-data field"}
	ErrInfoSize        = &Error{"additional information (ARI) longer than 72 bytes"}
	ErrCMAHeaderLen    = &Error{"private data shorter than the 36-byte rdma_cm header"}
	ErrCMAVersion      = &Error{"rdma_cm header version is not 0"}
	ErrCMAIPVersion    = &Error{"rdma_cm header IP version is neither 4 nor 6"}
	ErrCMAAddr         = &Error{"rdma_cm header addresses must both be IPv4 or both IPv6"}
)
