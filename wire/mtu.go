package wire

// MTU is the InfiniBand path MTU enumeration (ibv_mtu).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// MaxPayload is the largest payload of one packet (the largest path MTU).
const MaxPayload = 4096

// Bytes returns the MTU in bytes, or 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of MTU256..MTU4096.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// MTUFromBytes returns the largest IB MTU <= n bytes (0 if n < 256).
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}

// ActiveMTU returns the IB MTU rxe uses for a netdev MTU: the largest IB MTU
// that fits in netdevMTU minus the RoCEv2 overhead rxe assumes (80 bytes).
func ActiveMTU(netdevMTU int) MTU { return MTUFromBytes(netdevMTU - 80) }
