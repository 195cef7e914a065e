package wire

import "errors"

// ParseError reports why a packet was rejected. The Err* values are the only
// instances (built once, so rejecting a packet never allocates); compare with
// errors.Is, or use errors.As to get the *ParseError and its Reason.
type ParseError struct {
	Reason string
}

func (e *ParseError) Error() string { return "roce: " + e.Reason }

// Sentinel parse errors.
var (
	ErrTruncated     = &ParseError{"packet truncated: shorter than its opcode's headers plus ICRC"}
	ErrOversized     = &ParseError{"packet oversized: payload exceeds 4096 bytes (largest path MTU)"}
	ErrBadVersion    = &ParseError{"BTH TVer is not 0"}
	ErrBadPad        = &ParseError{"BTH PadCnt does not fit: larger than the payload, payload+pad not a multiple of 4, or pad on a packet without payload"}
	ErrUnknownOpcode = &ParseError{"unknown or reserved opcode"}
	// ErrUnsupportedOpcode is a defined opcode softroce does not implement (RD, XRC, CNP), dropped as rxe does.
	ErrUnsupportedOpcode = &ParseError{"opcode of an unsupported transport (RD, XRC or CNP)"}
	ErrHeaderMismatch    = &ParseError{"payload length does not fit the opcode"}
)

// ErrBadICRC reports an ICRC that does not match the packet.
var ErrBadICRC = errors.New("roce: bad ICRC")
