package verbs

import "syscall"

// Error is a verbs call failure. Errno is what rdma-core returns for the same
// misuse (EINVAL, ENOMEM, ...), so errors.Is(err, syscall.EINVAL) works.
type Error struct {
	Op     string // the call, e.g. "post send"
	Reason string // what was wrong and what to do
	Errno  syscall.Errno
	// Err is the underlying cause, if any (for example a package mem
	// error such as mem.ErrSpansProviders); errors.Is and errors.As see it.
	Err error
}

// Error formats the failure with its errno.
func (e *Error) Error() string {
	return "verbs: " + e.Op + ": " + e.Reason + " (" + e.Errno.Error() + ")"
}

// Unwrap returns the errno and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Errno}
	}
	return []error{e.Errno, e.Err}
}

func newErr(op, reason string, errno syscall.Errno) *Error {
	return &Error{Op: op, Reason: reason, Errno: errno}
}

// ErrClosed is returned by calls on a closed device; errors.Is(err,
// syscall.ENODEV) also matches it.
var ErrClosed = newErr("device", "device is closed", syscall.ENODEV)

// Hot-path errors built once (posting must not allocate).
var (
	errBindNoMW       = newErr("post send", "BIND_MW work request without a memory window of this device (SendWR.MW)", syscall.EINVAL)
	errBindAccess     = newErr("post send", "BIND_MW access may only hold REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC and ZERO_BASED", syscall.EINVAL)
	errBindKey        = newErr("post send", "BIND_MW RKey must keep the window's index (change only key8: IncRKey(mw.RKey()))", syscall.EINVAL)
	errPostSendState  = newErr("post send", "QP is not in RTS (or SQD/SQE): modify it to RTS first", syscall.EINVAL)
	errPostRecvState  = newErr("post recv", "QP is in RESET: modify it to INIT first", syscall.EINVAL)
	errSQFull         = newErr("post send", "send queue full: poll the send CQ or create the QP with a larger max_send_wr", syscall.ENOMEM)
	errRQFull         = newErr("post recv", "receive queue full: create the QP/SRQ with a larger max_recv_wr", syscall.ENOMEM)
	errTooManySGE     = newErr("post send", "more SGEs than the QP's max_send_sge", syscall.EINVAL)
	errTooManyRecvSGE = newErr("post recv", "more SGEs than the QP's max_recv_sge", syscall.EINVAL)
	errBadOpcode      = newErr("post send", "opcode not valid for this QP type", syscall.EINVAL)
	errInlineTooBig   = newErr("post send", "inline data larger than the QP's max_inline_data", syscall.EINVAL)
	errNoAH           = newErr("post send", "UD work request without an address handle", syscall.EINVAL)
	errBadLKey        = newErr("post", "SGE lkey is not a registered MR of this QP's PD, or the SGE is outside it", syscall.EINVAL)
	errRecvOnSRQ      = newErr("post recv", "QP uses an SRQ: post receives to the SRQ", syscall.EINVAL)
	errMsgTooBig      = newErr("post send", "message larger than max_msg_sz (2 GiB)", syscall.EINVAL)
	errAtomicLen      = newErr("post send", "atomic operation needs one 8-byte SGE", syscall.EINVAL)
	errAtomicAlign    = newErr("post send", "atomic remote address must be 8-byte aligned", syscall.EINVAL)
)
