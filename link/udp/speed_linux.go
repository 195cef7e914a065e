package udp

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
)

var _ link.SpeedReporter = (*Endpoint)(nil)

// ethtoolCmd is struct ethtool_cmd (linux/ethtool.h), as ETHTOOL_GSET fills
// it: the link's speed in Mb/s is speed | speedHi<<16.
type ethtoolCmd struct {
	cmd, supported, advertising uint32
	speed                       uint16
	duplex, port, phyAddress    uint8
	transceiver, autoneg, mdio  uint8
	maxTxPkt, maxRxPkt          uint32
	speedHi                     uint16
	mdix, mdixCtrl              uint8
	lpAdvertising               uint32
	reserved                    [2]uint32
}

// ifreqData is struct ifreq with its union's pointer member (ifr_data).
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// LinkSpeed implements link.SpeedReporter: the speed the bound interface's
// driver reports through ethtool (SIOCETHTOOL, ETHTOOL_GSET), asked on the
// endpoint's own socket so in its network namespace, as rxe asks its netdev
// on every port query. 0: unknown (loopback and wildcard addresses, a
// driver without ethtool or an unknown speed, as a link down gives).
func (e *Endpoint) LinkSpeed() int {
	if e.state.ifname == "" || e.closed.Load() {
		return 0
	}
	cmd := &ethtoolCmd{cmd: unix.ETHTOOL_GSET}
	req := &ifreqData{data: unsafe.Pointer(cmd)}
	copy(req.name[:unix.IFNAMSIZ-1], e.state.ifname)
	var errno unix.Errno
	if err := e.rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, unix.SIOCETHTOOL, uintptr(unsafe.Pointer(req)))
	}); err != nil || errno != 0 {
		return 0
	}
	runtime.KeepAlive(cmd)
	v := uint32(cmd.speed) | uint32(cmd.speedHi)<<16
	if v == 0 || v == 0xFFFFFFFF || v == 0xFFFF { // SPEED_UNKNOWN (-1), in either form
		return 0
	}
	return int(v)
}
