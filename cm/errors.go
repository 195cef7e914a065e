package cm

import (
	"fmt"
	"syscall"

	"github.com/softroce/softroce/cm/mad"
)

// Error is a connection manager call failure. Errno is the errno librdmacm
// returns for the same situation, so errors.Is(err, syscall.EINVAL) works.
type Error struct {
	Op     string // the call, e.g. "connect"
	Reason string // what was wrong and what to do
	Errno  syscall.Errno
}

// Error formats the failure as "cm: op: reason (errno text)".
func (e *Error) Error() string {
	return "cm: " + e.Op + ": " + e.Reason + " (" + e.Errno.Error() + ")"
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

func newErr(op, reason string, errno syscall.Errno) *Error {
	return &Error{Op: op, Reason: reason, Errno: errno}
}

// Sentinel errors.
var (
	// ErrClosed is returned by calls on a closed agent, event channel or listener.
	ErrClosed = newErr("cm", "closed", syscall.EBADF)
	// ErrNoDevice: no attached device has the address (see Attach).
	ErrNoDevice = newErr("resolve addr", "no attached device has this address: open a device on it and call cm.Attach", syscall.EADDRNOTAVAIL)
	// ErrAddrInUse: another ID is bound to or listens on the port.
	ErrAddrInUse = newErr("bind", "address already in use: choose another port", syscall.EADDRINUSE)
	// ErrState: the call does not fit the ID's state (e.g. Accept on an ID that got no CONNECT_REQUEST).
	ErrState = newErr("cm", "operation not valid in the ID's current state", syscall.EINVAL)
	// ErrPrivateData: private data longer than the message allows.
	ErrPrivateData = newErr("cm", "private data too long for the CM message (REQ 56, REP 196, REJ 148, RTU 224, DREQ 220, DREP 224, SIDR_REQ 180, SIDR_REP 136 bytes)", syscall.EINVAL)
)

// RejectedError is returned by Dial when the peer rejected the connection
// (RDMA_CM_EVENT_REJECTED). Reason is the CM reject reason: 8
// (mad.RejInvalidServiceID) when nothing listens on the port, 28
// (mad.RejConsumerDefined) when the application rejected, with its private data.
type RejectedError struct {
	Reason      mad.RejectReason
	PrivateData []byte
}

// Error names the reject reason.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("cm: connection rejected by the peer: %v (reason %d)", e.Reason, uint16(e.Reason))
}

// Is makes errors.Is(err, syscall.ECONNREFUSED) true.
func (e *RejectedError) Is(target error) bool { return target == syscall.ECONNREFUSED }

// EventError is returned by Dial and Accept when the CM reported an error
// event (UNREACHABLE, CONNECT_ERROR, ADDR_ERROR, ROUTE_ERROR, DISCONNECTED
// before establishment).
type EventError struct {
	Event  EventType
	Status int // negative errno, as rdma_cm_event.status
}

// Error names the event and its status.
func (e *EventError) Error() string {
	return fmt.Sprintf("cm: %v, status %d (%v)", e.Event, e.Status, syscall.Errno(-e.Status))
}

// Unwrap returns the errno of Status.
func (e *EventError) Unwrap() error {
	if e.Status < 0 {
		return syscall.Errno(-e.Status)
	}
	return nil
}
