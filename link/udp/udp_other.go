//go:build !linux

package udp

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softroce/softroce/link"
)

// Endpoint is a link.Endpoint over one UDP socket (Linux only).
type Endpoint struct{ ctr counters }

// Open returns an error wrapping errors.ErrUnsupported: the link needs
// Linux's recvmmsg/sendmmsg and its IPv4 Identification behaviour.
func Open(cfg Config) (*Endpoint, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("udp: the UDP link needs Linux: %w", errors.ErrUnsupported)
}

// ReadBatch is not supported on this platform.
func (e *Endpoint) ReadBatch([]link.Packet) (int, error) { return 0, errors.ErrUnsupported }

// ReadBatchView is not supported on this platform.
func (e *Endpoint) ReadBatchView([]link.Packet) (int, error) { return 0, errors.ErrUnsupported }

// ServeView is not supported on this platform.
func (e *Endpoint) ServeView([]link.Packet, time.Duration, func([]link.Packet)) error {
	return errors.ErrUnsupported
}

// ServeSteps is not supported on this platform.
func (e *Endpoint) ServeSteps([]link.Packet, time.Duration, func([]link.Packet), func()) error {
	return errors.ErrUnsupported
}

// WriteBatch is not supported on this platform.
func (e *Endpoint) WriteBatch([]link.Packet) (int, error) { return 0, errors.ErrUnsupported }

// LocalAddr returns the zero address.
func (e *Endpoint) LocalAddr() netip.AddrPort { return netip.AddrPort{} }

// SendAddr returns the zero address.
func (e *Endpoint) SendAddr() netip.AddrPort { return netip.AddrPort{} }

// MTU returns 0.
func (e *Endpoint) MTU() int { return 0 }

// BatchSize returns 0.
func (e *Endpoint) BatchSize() int { return 0 }

// Stats returns the (zero) counters.
func (e *Endpoint) Stats() Stats { return e.ctr.snapshot() }

// Close does nothing.
func (e *Endpoint) Close() error { return nil }

// GSO reports false.
func (e *Endpoint) GSO() bool { return false }

// ReceiveBuffer returns 0.
func (e *Endpoint) ReceiveBuffer() int { return 0 }

// Capabilities returns none.
func (e *Endpoint) Capabilities() link.Capabilities { return link.Capabilities{} }

// GRO reports false.
func (e *Endpoint) GRO() bool { return false }

// JoinGroup is not supported on this platform.
func (e *Endpoint) JoinGroup(netip.Addr) (link.Endpoint, error) { return nil, errors.ErrUnsupported }
