//go:build tools

package tools

import (
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/google/gopacket/pcapgo"
	_ "go.uber.org/goleak"
	_ "golang.org/x/net/ipv4"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/sys/unix"
)
