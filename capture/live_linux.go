package capture

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Live captures RoCEv2 frames from a network interface through an AF_PACKET
// socket with an in-kernel filter (UDP to the RoCEv2 ports, IPv4 and IPv6,
// unfragmented). ReadFrame may be called from one goroutine at a time;
// Close may be called from any and wakes a blocked ReadFrame.
type Live struct {
	f        *os.File
	rc       syscall.RawConn
	linkType LinkType
	snaplen  int
	oob      [64]byte

	closed atomic.Bool

	// pending holds the rest of a UDP GSO super-packet that ReadFrame
	// split (SplitGSO), returned one by one with pendingTS.
	pending   [][]byte
	pendingTS time.Time

	mu    sync.Mutex
	stats LiveStats
}

// OpenLive starts capturing on the named interface ("any" for all). It
// needs root or CAP_NET_RAW; without them the error wraps os.ErrPermission.
// Ethernet and loopback interfaces are captured with their Ethernet headers
// (LinkTypeEthernet); others, and "any", from the IP header (LinkTypeRaw).
func OpenLive(iface string, opts *LiveOptions) (*Live, error) {
	var o LiveOptions
	if opts != nil {
		o = *opts
	}
	if len(o.Ports) == 0 {
		o.Ports = []uint16{4791}
	}
	if o.Snaplen <= 0 {
		o.Snaplen = DefaultSnaplen
	}
	if o.BufferSize <= 0 {
		o.BufferSize = 32 << 20
	}
	ifindex, loIndex, eth, err := lookupInterface(iface)
	if err != nil {
		return nil, err
	}
	typ, lt, off := unix.SOCK_DGRAM, LinkTypeRaw, uint32(0)
	if eth {
		typ, lt, off = unix.SOCK_RAW, LinkTypeEthernet, ethHdrLen
	}
	// Protocol 0 receives nothing until bind, so no unfiltered frame slips
	// in before the filter is attached.
	fd, err := unix.Socket(unix.AF_PACKET, typ|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("capture: opening an AF_PACKET socket needs root or CAP_NET_RAW "+
				"(run with sudo, or grant it: sudo setcap cap_net_raw,cap_net_admin+ep $(which softroce)): %w", err)
		}
		return nil, fmt.Errorf("capture: AF_PACKET socket: %w", err)
	}
	if what, err := setupPacketSocket(fd, ifindex, roceFilter(off, loIndex, o.Ports, uint32(o.Snaplen)), &o); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture: %s on %s: %w", what, iface, err)
	}
	f := os.NewFile(uintptr(fd), "packet:"+iface)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("capture: %w", err)
	}
	return &Live{f: f, rc: rc, linkType: lt, snaplen: o.Snaplen}, nil
}

// lookupInterface returns the index of the named interface (0 for "any"),
// the loopback index the filter must treat specially (-1: the interface
// itself is loopback; 0: none), and whether frames carry Ethernet headers.
func lookupInterface(iface string) (ifindex, loIndex int, eth bool, err error) {
	if iface == "any" {
		if ifs, err := net.Interfaces(); err == nil {
			for _, i := range ifs {
				if i.Flags&net.FlagLoopback != 0 {
					loIndex = i.Index
				}
			}
		}
		return 0, loIndex, false, nil
	}
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return 0, 0, false, fmt.Errorf("capture: no interface %q (%s)", iface, interfaceList())
	}
	if ifi.Flags&net.FlagLoopback != 0 {
		loIndex = -1
	}
	return ifi.Index, loIndex, isEthernet(ifi), nil
}

// setupPacketSocket attaches the filter prog, turns on timestamps, sizes
// the buffer, binds the socket to ifindex (0: all) and enters promiscuous
// mode unless o says not to; on failure it names the step that failed.
func setupPacketSocket(fd, ifindex int, prog []unix.SockFilter, o *LiveOptions) (string, error) {
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		return "attaching the packet filter", err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return "enabling timestamps", err
	}
	// Best effort: a larger buffer drops less under bursts (FORCE needs CAP_NET_ADMIN).
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, o.BufferSize) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, o.BufferSize)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		return "binding", err
	}
	if !o.NoPromisc && ifindex != 0 {
		mreq := unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_PROMISC}
		if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
			return "entering promiscuous mode", err
		}
	}
	return "", nil
}

// LinkType returns the link type of the frames ReadFrame returns.
func (l *Live) LinkType() LinkType { return l.linkType }

// Snaplen returns the largest number of bytes ReadFrame keeps of a frame.
func (l *Live) Snaplen() int { return l.snaplen }

// SetReadDeadline makes a blocked ReadFrame return an error wrapping
// os.ErrDeadlineExceeded at t (zero: no deadline).
func (l *Live) SetReadDeadline(t time.Time) error { return l.f.SetReadDeadline(t) }

// ReadFrame blocks until a frame arrives and copies up to len(buf) bytes of
// it into buf. A UDP GSO super-packet is returned as the datagrams the
// kernel cuts it into (SplitGSO), one per call. It returns the bytes copied, the frame's length on the wire
// and the kernel's receive timestamp. After Close it returns an error
// wrapping os.ErrClosed.
func (l *Live) ReadFrame(buf []byte) (n, wireLen int, ts time.Time, err error) {
	if len(buf) == 0 {
		return 0, 0, time.Time{}, errors.New("capture: ReadFrame with an empty buffer")
	}
	if len(l.pending) > 0 {
		f := l.pending[0]
		l.pending[0] = nil
		l.pending = l.pending[1:]
		return copy(buf, f), len(f), l.pendingTS, nil
	}
	var (
		iov   unix.Iovec
		msg   unix.Msghdr
		errno unix.Errno
		r     uintptr
	)
	iov.Base = &buf[0]
	iov.SetLen(len(buf))
	msg.Iov = &iov
	msg.SetIovlen(1)
	err = l.rc.Read(func(fd uintptr) bool {
		msg.Control = &l.oob[0]
		msg.SetControllen(len(l.oob))
		r, _, errno = unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&msg)), unix.MSG_TRUNC)
		return errno != unix.EAGAIN
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("recvmsg", errno)
	}
	if err != nil {
		if l.closed.Load() {
			err = os.ErrClosed
		}
		return 0, 0, time.Time{}, fmt.Errorf("capture: %w", err)
	}
	wireLen = int(r)
	n = min(wireLen, len(buf))
	ts = l.timestamp(int(msg.Controllen))
	if segs := SplitGSO(l.linkType, buf[:n], 0); segs != nil {
		// A UDP GSO super-packet (seen whole on loopback and on the
		// sending host): return its datagrams as the wire carries them.
		l.pending, l.pendingTS = segs[1:], ts
		return copy(buf, segs[0]), len(segs[0]), ts, nil
	}
	return n, wireLen, ts, nil
}

// timestamp finds SCM_TIMESTAMPNS in the control data (time.Now if absent).
func (l *Live) timestamp(oobn int) time.Time {
	b := l.oob[:min(oobn, len(l.oob))]
	for len(b) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		hl := int(h.Len)
		if hl < unix.SizeofCmsghdr || hl > len(b) {
			break
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS &&
			hl >= unix.CmsgLen(int(unsafe.Sizeof(unix.Timespec{}))) {
			ts := (*unix.Timespec)(unsafe.Pointer(&b[unix.CmsgLen(0)]))
			return time.Unix(int64(ts.Sec), int64(ts.Nsec))
		}
		b = b[min(unix.CmsgSpace(hl-unix.CmsgLen(0)), len(b)):]
	}
	return time.Now()
}

// Stats returns the kernel's counts of frames received and dropped since
// OpenLive.
func (l *Live) Stats() (LiveStats, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var st *unix.TpacketStats
	var err error
	cerr := l.rc.Control(func(fd uintptr) {
		st, err = unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS)
	})
	if cerr != nil {
		return l.stats, fmt.Errorf("capture: %w", cerr)
	}
	if err != nil {
		return l.stats, fmt.Errorf("capture: PACKET_STATISTICS: %w", err)
	}
	// The kernel resets its counters on every read: accumulate.
	l.stats.Received += uint64(st.Packets)
	l.stats.Dropped += uint64(st.Drops)
	return l.stats, nil
}

// Close stops the capture.
func (l *Live) Close() error {
	l.closed.Store(true)
	return l.f.Close()
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// isEthernet reports whether the interface delivers Ethernet headers
// (ARPHRD_ETHER or ARPHRD_LOOPBACK).
func isEthernet(ifi *net.Interface) bool {
	if b, err := os.ReadFile("/sys/class/net/" + ifi.Name + "/type"); err == nil {
		t, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil {
			return t == unix.ARPHRD_ETHER || t == unix.ARPHRD_LOOPBACK
		}
	}
	return len(ifi.HardwareAddr) == 6 || ifi.Flags&net.FlagLoopback != 0
}

// interfaceList names the host's interfaces for error messages.
func interfaceList() string {
	ifs, err := net.Interfaces()
	if err != nil || len(ifs) == 0 {
		return "cannot list interfaces"
	}
	names := make([]string, 0, len(ifs)+1)
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	return "interfaces: " + strings.Join(append(names, "any"), ", ")
}

// roceFilter returns a classic BPF program accepting unfragmented IPv4 or
// IPv6 UDP datagrams to one of ports, for frames whose IP header starts at
// off (14 after an Ethernet header, 0 for cooked sockets). It keeps up to
// snaplen bytes of each. A loopback interface shows every frame twice,
// outgoing and incoming; like libpcap, the filter drops the outgoing copy:
// loIndex -1 when capturing on loopback, the loopback interface's index when
// capturing on all interfaces, 0 otherwise.
func roceFilter(off uint32, loIndex int, ports []uint16, snaplen uint32) []unix.SockFilter {
	const (
		ldh  = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
		ldb  = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
		ldhx = unix.BPF_LD | unix.BPF_H | unix.BPF_IND
		ldxb = unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ja   = unix.BPF_JMP | unix.BPF_JA
		rsh  = unix.BPF_ALU | unix.BPF_RSH | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		ldw  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS

		adPktType = 0xFFFFF000 + 4 // SKF_AD_OFF + SKF_AD_PKTTYPE
		adIfIndex = 0xFFFFF000 + 8 // SKF_AD_OFF + SKF_AD_IFINDEX
	)
	// Instructions with symbolic jump targets, resolved at the end.
	type ins struct {
		code     uint16
		k        uint32
		jt, jf   string // labels ("" = next instruction)
		label    string // this instruction's label
		jaTarget string
	}
	var p []ins
	switch {
	case loIndex < 0:
		p = append(p,
			ins{code: ldw, k: adPktType},
			ins{code: jeq, k: unix.PACKET_OUTGOING, jt: "drop"})
	case loIndex > 0:
		p = append(p,
			ins{code: ldw, k: adIfIndex},
			ins{code: jeq, k: uint32(loIndex), jf: "start"},
			ins{code: ldw, k: adPktType},
			ins{code: jeq, k: unix.PACKET_OUTGOING, jt: "drop"})
	}
	if off == ethHdrLen {
		p = append(p,
			ins{label: "start", code: ldh, k: 12},
			ins{code: jeq, k: etherTypeIPv4, jt: "v4"},
			ins{code: jeq, k: etherTypeIPv6, jt: "v6", jf: "drop"})
	} else {
		p = append(p,
			ins{label: "start", code: ldb, k: 0},
			ins{code: rsh, k: 4},
			ins{code: jeq, k: 4, jt: "v4"},
			ins{code: jeq, k: 6, jt: "v6", jf: "drop"})
	}
	p = append(p,
		ins{label: "v4", code: ldb, k: off + 9},
		ins{code: jeq, k: 17, jf: "drop"},
		ins{code: ldh, k: off + 6},
		ins{code: jset, k: 0x3FFF, jt: "drop"}, // MF or fragment offset
		ins{code: ldxb, k: off},                // X = 4 * IHL
		ins{code: ldhx, k: off + 2},            // UDP destination port
		ins{code: ja, jaTarget: "ports"},
		ins{label: "v6", code: ldb, k: off + 6},
		ins{code: jeq, k: 17, jf: "drop"},
		ins{code: ldh, k: off + ipv6HdrLen + 2},
	)
	for i, port := range ports {
		in := ins{code: jeq, k: uint32(port), jt: "accept"}
		if i == 0 {
			in.label = "ports"
		}
		p = append(p, in)
	}
	p = append(p, ins{label: "drop", code: ret, k: 0}, ins{label: "accept", code: ret, k: snaplen})

	at := map[string]int{}
	for i, in := range p {
		if in.label != "" {
			at[in.label] = i
		}
	}
	skip := func(from int, label string) uint8 {
		if label == "" {
			return 0
		}
		return uint8(at[label] - from - 1)
	}
	out := make([]unix.SockFilter, len(p))
	for i, in := range p {
		out[i] = unix.SockFilter{Code: in.code, K: in.k, Jt: skip(i, in.jt), Jf: skip(i, in.jf)}
		if in.jaTarget != "" {
			out[i].K = uint32(at[in.jaTarget] - i - 1)
		}
	}
	return out
}
