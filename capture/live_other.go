//go:build !linux

package capture

import "time"

// Live is a live capture; only Linux has one (see ErrNotSupported).
type Live struct{}

// OpenLive returns ErrNotSupported: live capture uses Linux's AF_PACKET.
func OpenLive(iface string, opts *LiveOptions) (*Live, error) { return nil, ErrNotSupported }

// LinkType returns the link type of the frames ReadFrame returns.
func (l *Live) LinkType() LinkType { return LinkTypeEthernet }

// Snaplen returns the largest number of bytes ReadFrame keeps of a frame.
func (l *Live) Snaplen() int { return DefaultSnaplen }

// SetReadDeadline returns ErrNotSupported.
func (l *Live) SetReadDeadline(t time.Time) error { return ErrNotSupported }

// ReadFrame returns ErrNotSupported.
func (l *Live) ReadFrame(buf []byte) (n, wireLen int, ts time.Time, err error) {
	return 0, 0, time.Time{}, ErrNotSupported
}

// Stats returns ErrNotSupported.
func (l *Live) Stats() (LiveStats, error) { return LiveStats{}, ErrNotSupported }

// Close does nothing.
func (l *Live) Close() error { return nil }
