package capture

import "errors"

// ErrNotSupported reports live capture on an OS other than Linux.
var ErrNotSupported = errors.New("capture: live capture needs Linux (AF_PACKET)")

// LiveOptions configures OpenLive. The zero value (or nil) captures UDP to
// port 4791, whole frames, in promiscuous mode.
type LiveOptions struct {
	// Ports are the UDP destination ports to capture (nil: 4791).
	Ports []uint16
	// Snaplen is the most bytes kept of each frame (0: DefaultSnaplen).
	Snaplen int
	// NoPromisc leaves the interface out of promiscuous mode (tcpdump -p).
	NoPromisc bool
	// BufferSize is the socket receive buffer in bytes (0: 32 MiB).
	BufferSize int
}

// LiveStats are the kernel's counters for a live capture.
type LiveStats struct {
	Received uint64 // frames that passed the filter
	Dropped  uint64 // frames dropped because the socket buffer was full
}
