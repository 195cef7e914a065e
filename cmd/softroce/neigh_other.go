//go:build !linux

package main

import (
	"context"
	"net/netip"
)

// neighResolve is nil off Linux: every address resolves.
var neighResolve func(ctx context.Context, src, dst netip.Addr) error
