//go:build !linux

package toolkit

import (
	"context"
	"net/netip"
)

// NeighResolve is nil off Linux: every address resolves.
var NeighResolve func(ctx context.Context, src, dst netip.Addr) error

// NeighResolved is nil off Linux, as NeighResolve.
var NeighResolved func(src, dst netip.Addr) bool
