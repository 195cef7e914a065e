package wire

import "time"

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

// rnrTimer maps RNR NAK timer codes to durations (IBA table; code 25 is
// 61.44 ms, which rxe's table mistypes as 61.41).
var rnrTimer = [32]time.Duration{
	655360 * time.Microsecond, 10 * time.Microsecond, 20 * time.Microsecond, 30 * time.Microsecond,
	40 * time.Microsecond, 60 * time.Microsecond, 80 * time.Microsecond, 120 * time.Microsecond,
	160 * time.Microsecond, 240 * time.Microsecond, 320 * time.Microsecond, 480 * time.Microsecond,
	640 * time.Microsecond, 960 * time.Microsecond, 1280 * time.Microsecond, 1920 * time.Microsecond,
	2560 * time.Microsecond, 3840 * time.Microsecond, 5120 * time.Microsecond, 7680 * time.Microsecond,
	10240 * time.Microsecond, 15360 * time.Microsecond, 20480 * time.Microsecond, 30720 * time.Microsecond,
	40960 * time.Microsecond, 61440 * time.Microsecond, 81920 * time.Microsecond, 122880 * time.Microsecond,
	163840 * time.Microsecond, 245760 * time.Microsecond, 327680 * time.Microsecond, 491520 * time.Microsecond,
}

// RNRTimeout returns the wait coded by an RNR NAK timer code (0-31).
func RNRTimeout(code uint8) time.Duration { return rnrTimer[code&31] }

// AckTimeout returns the local ACK timeout coded by a QP timeout value:
// 4.096 us * 2^timeout; 0 means no timeout (returns 0).
func AckTimeout(timeout uint8) time.Duration {
	if timeout == 0 {
		return 0
	}
	if timeout > 31 {
		timeout = 31
	}
	return time.Duration(4096<<timeout) * time.Nanosecond
}
