package pipeline

import "errors"

// Sentinel errors, matched with errors.Is.
var (
	// ErrNotContiguous: Single registration was asked for but the ring's
	// blocks are not back to back in this process.
	ErrNotContiguous = errors.New("pipeline: ring blocks are not contiguous in this process")
	// ErrConfig: an option is out of range or inconsistent with the ring.
	ErrConfig = errors.New("pipeline: invalid configuration")
	// ErrProtocol: the peer sent something the control protocol does not allow.
	ErrProtocol = errors.New("pipeline: control protocol error")
	// ErrPeer: the peer reported an error and gave up.
	ErrPeer = errors.New("pipeline: peer failed")
	// ErrTransfer: the RDMA transfer failed (a work completion with an error).
	ErrTransfer = errors.New("pipeline: RDMA transfer failed")
)
