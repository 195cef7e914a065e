package udp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// Endpoint is a link.Endpoint over one UDP socket. ReadBatch and WriteBatch
// may run concurrently with each other; each serializes its own callers.
type Endpoint struct {
	conn     *net.UDPConn // the bound socket with Config.Netpoll, else nil
	sock     *rawSock     // the bound socket without Config.Netpoll, else nil
	rc       syscall.RawConn
	local    netip.AddrPort
	txAddr   netip.AddrPort // the address datagrams are sent from (SendAddr)
	scope    uint32         // IPv6 scope ID of a link-local bound address
	is6      bool
	wildcard bool
	mtu      int
	batch    int // messages per system call
	txPkts   int // packets one send may carry: GSO puts several in a message
	log      *slog.Logger
	closed   atomic.Bool
	gso      atomic.Bool // UDP GSO in use
	gro      bool        // UDP GRO enabled on the socket
	rcvbuf   int         // SO_RCVBUF as granted (bytes, kernel accounting)
	ctr      counters
	cfg      Config     // as opened (normalized): group endpoints copy it (JoinGroup)
	group    bool       // a receive-only endpoint of a multicast group (JoinGroup)
	mcIf     uint32     // IPv6: the index of the interface multicast leaves on (multicastIf)
	state    stateWatch // the bound interface's state (WatchState)
	inbox    *inbox     // same-host lanes' receiving side (Config.Local), else nil
	netns    uint64     // the socket's network namespace (Config.Local)

	rx struct {
		mu sync.Mutex
		rxQueue
		fn     func(fd uintptr) bool
		nowait bool // PollBatch: EAGAIN returns no datagram instead of waiting
		slept  bool // doRead counted itself a sleeper (sleepLocal) and waited
		want   int
		got    int
		errno  unix.Errno
	}
	// rd serializes ServeView's reads and Poll's, each with the handling of
	// what it read: datagrams are handled in the order the socket gave them.
	rd  sync.Mutex
	prx *pollQueue // Poll's receive arrays (allocated on its first call)
	// polls counts Poll calls: ServeView steps aside while they come often
	// (stepAside).
	polls atomic.Uint64
	// parked is, while ServeView waits on the socket (stepping aside
	// when Poll is busy), 1 + polls at the start of its wait, else 0;
	// parkedAt is when that count began (mono). Poll wakes ServeView
	// when it becomes busy meanwhile (kickParked).
	parked   atomic.Uint64
	parkedAt atomic.Int64
	// waiters counts threads waiting on the socket in WaitReadable:
	// ServeView stays aside while there are any.
	waiters atomic.Int32
	// waitEnd is when the last WaitReadable returned (mono): the datagram
	// that woke it stays the waiter's, for its Poll, for pollAside more.
	waitEnd atomic.Int64
	// waitGone is signalled when the last waiter leaves WaitReadable (and
	// at Close): ServeView, aside, sleeps on it while a thread waits
	// instead of waking every pollAside.
	waitGone chan struct{}
	// zones caches IPv6 scope IDs' interface names (link-local senders).
	zones struct {
		mu sync.Mutex
		m  map[uint32]string
	}
	tx txState
}

// txState is an endpoint's sending side (tx.mu serializes it).
type txState struct {
	mu       sync.Mutex
	fd       int // the send socket (openSendSocket), -1: send on the bound one
	hdrs     []mmsghdr
	iovs     []unix.Iovec
	names    []sockaddr
	oob      []byte
	fn       func(fd uintptr) bool
	off      int
	end      int
	got      int
	errno    unix.Errno
	msgPkts  []int                     // packets per message (GSO)
	icrc     wire.ICRCCache            // the ICRC prefix of a stream's packets
	niov     int                       // iovecs the last build filled
	routes   map[netip.Addr]netip.Addr // wildcard endpoints: destination -> source
	zones    map[string]uint32         // IPv6 zone name -> interface index
	cur      int                       // the socket the built messages go out on (-1: the bound one)
	ports    map[uint16]int            // Config.SourcePorts: source port -> its socket (-1: none)
	maxPorts int                       // Config.SourcePorts (0: off)
	sndbuf   int                       // SO_SNDBUF of per-port sockets
	peers    map[netip.AddrPort]*peer  // Config.Local: destinations' inboxes
	lastDst  netip.AddrPort            // writeLocal's last destination
	local    bool                      // Config.Local: send to inboxes
	wakeTo   sockaddr                  // sendWake's destination
	wakeLen  uint32
	wakeErr  unix.Errno       // wake's result
	wakeFn   func(fd uintptr) // wake, made once (Config.Local)
}

// Open creates and binds the endpoint's socket.
func Open(cfg Config) (*Endpoint, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	e, err := bindSocket(cfg)
	if err != nil {
		return nil, err
	}
	if !cfg.NoGSO {
		e.gso.Store(gsoSupported(e.rc)) // the option exists from Linux 4.18 on
	}
	a := cfg.Addr.Addr()
	port := uint16(cfg.Addr.Port())
	if e.conn != nil {
		if ua, ok := e.conn.LocalAddr().(*net.UDPAddr); ok {
			port = uint16(ua.Port)
		}
	} else if p, err := e.sock.localPort(); err == nil {
		port = p
	}
	e.local = netip.AddrPortFrom(a, port)
	e.openStateSocket(a)
	e.mtu = cfg.MTU
	if e.mtu == 0 {
		e.mtu = interfaceMTU(a)
	}
	if e.mtu == 0 {
		e.mtu = 1500
	}
	if !cfg.NoGRO {
		e.gro = enableGRO(e.rc)
	}
	e.allocBatches()
	e.txAddr = e.local
	if cfg.Local && !e.wildcard && !cfg.group {
		e.openLocal()
	}
	if !cfg.SendFromBound {
		if err := e.openSendSocket(cfg.SocketBuffer); err != nil && e.log != nil {
			e.log.Info("udp: no separate send socket; sending from the bound one", "err", err)
		}
		if e.tx.fd >= 0 {
			e.tx.maxPorts, e.tx.sndbuf = cfg.SourcePorts, cfg.SocketBuffer
		}
	}
	return e, nil
}

// openSendSocket opens the socket the endpoint sends from (see
// Config.SendFromBound): the bound address with a port the kernel chooses,
// the options the ICRC depends on (unconnected, IP_PMTUDISC_DO: the kernel
// writes IPv4 ID 0, or consecutive IDs for UDP GSO segments), and never
// registered with Go's netpoller. Sends on it are raw sendmmsg calls; the
// rare full send buffer is waited out in poll(2) (sendRaw). Nothing reads
// it: RoCEv2 peers answer to port 4791, the bound socket's, and a socket
// filter drops whatever else arrives (dropReceived).
func (e *Endpoint) openSendSocket(bufSize int) error {
	fd, addr, err := e.newSendSocket(bufSize, 0)
	if err != nil {
		return err
	}
	e.tx.fd, e.txAddr = fd, addr
	return nil
}

// newSendSocket opens a send socket (openSendSocket) bound to the
// endpoint's address and port (0: the kernel chooses) and returns it with
// its address.
func (e *Endpoint) newSendSocket(bufSize int, port uint16) (int, netip.AddrPort, error) {
	dom, a := unix.AF_INET, e.local.Addr()
	if e.is6 {
		dom = unix.AF_INET6
	}
	fd, err := unix.Socket(dom, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, netip.AddrPort{}, os.NewSyscallError("socket", err)
	}
	var sa unix.Sockaddr
	if e.is6 {
		sa = &unix.SockaddrInet6{Addr: a.As16(), Port: int(port), ZoneId: e.scope}
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	} else {
		sa = &unix.SockaddrInet4{Addr: a.As4(), Port: int(port)}
	}
	if err == nil {
		err = e.pmtuDiscoverDo(fd)
	}
	if err == nil {
		e.multicastIf(fd)
		e.setBuffer(fd, bufSize, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF)
		dropReceived(fd)
		err = os.NewSyscallError("bind", unix.Bind(fd, sa))
	}
	if err == nil {
		sa, err = unix.Getsockname(fd)
		err = os.NewSyscallError("getsockname", err)
	}
	if err != nil {
		unix.Close(fd)
		return -1, netip.AddrPort{}, err
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		port = uint16(sa.Port)
	case *unix.SockaddrInet6:
		port = uint16(sa.Port)
	}
	return fd, netip.AddrPortFrom(a, port), nil
}

// dropAll is a classic BPF program that accepts no datagram.
var dropAll = [...]unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}

// dropReceived makes the kernel drop whatever arrives on send socket fd,
// which nothing reads (peers answer to port 4791): without it, datagrams
// sent to its port would sit in its receive buffer for the socket's life,
// up to net.core.rmem_default each, SourcePorts sockets of them. Where a
// filter cannot be attached, the receive buffer is made the smallest the
// kernel allows.
func dropReceived(fd int) {
	if unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(dropAll)), Filter: &dropAll[0]}) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 0)
	}
}

// portSocket returns the send socket for datagrams whose Packet.Src names
// port (Config.SourcePorts), opening it on first use, and whether there is
// one; without, the datagram leaves from the shared send socket. tx.mu held.
func (e *Endpoint) portSocket(port uint16) (int, bool) {
	tx := &e.tx
	fd, ok := tx.ports[port]
	if !ok {
		fd = -1
		if len(tx.ports) < tx.maxPorts {
			var err error
			if fd, _, err = e.newSendSocket(tx.sndbuf, port); err != nil {
				fd = -1
				if e.log != nil {
					e.log.Debug("udp: no socket for a per-QP source port; its datagrams leave from the shared port", "port", port, "shared", e.txAddr, "err", err)
				}
			} else {
				e.ctr.portSockets.Add(1)
			}
		}
		if tx.ports == nil {
			tx.ports = make(map[uint16]int)
		}
		if fd >= 0 || len(tx.ports) < tx.maxPorts {
			tx.ports[port] = fd // past the limit nothing is recorded: no growth
		}
	}
	return fd, fd >= 0
}

// bindSocket creates the socket with its options (setOptions) and binds it.
func bindSocket(cfg Config) (*Endpoint, error) {
	a := cfg.Addr.Addr()
	e := &Endpoint{is6: a.Is6(), wildcard: a.IsUnspecified(), batch: cfg.BatchSize, log: cfg.Logger, group: cfg.group, cfg: cfg,
		waitGone: make(chan struct{}, 1)}
	e.tx.fd = -1
	if a.Zone() != "" {
		ifi, err := zoneIndex(a.Zone())
		if err != nil {
			return nil, fmt.Errorf("%w: zone of %v: %v", ErrBadAddr, a, err)
		}
		e.scope = ifi
	}
	if cfg.group {
		return e, e.bindGroup(cfg)
	}
	dom := unix.AF_INET
	var sa unix.Sockaddr
	if e.is6 {
		dom = unix.AF_INET6
		sa = &unix.SockaddrInet6{Addr: a.As16(), Port: int(cfg.Addr.Port()), ZoneId: e.scope}
	} else {
		sa = &unix.SockaddrInet4{Addr: a.As4(), Port: int(cfg.Addr.Port())}
	}
	fd, err := unix.Socket(dom, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("udp: listen on %v: %w", cfg.Addr, os.NewSyscallError("socket", err))
	}
	if e.is6 {
		err = os.NewSyscallError("setsockopt IPV6_V6ONLY", unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1))
	}
	if err == nil {
		// As the net package sets on its datagram sockets.
		err = os.NewSyscallError("setsockopt SO_BROADCAST", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1))
	}
	if err == nil {
		err = e.setOptions(fd, cfg.SocketBuffer)
	}
	if err == nil {
		err = os.NewSyscallError("bind", unix.Bind(fd, sa))
	}
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("udp: %v is in use (is the kernel's rdma_rxe loaded? it owns UDP port %d on every address): %w", cfg.Addr, wire.UDPPort, err)
		}
		return nil, fmt.Errorf("udp: listen on %v: %w", cfg.Addr, err)
	}
	if err := e.adopt(fd, cfg.Netpoll); err != nil {
		return nil, fmt.Errorf("udp: listen on %v: %w", cfg.Addr, err)
	}
	return e, nil
}

// adopt makes bound socket fd the endpoint's: used through its descriptor
// (rawSock), or with netpoll through a net.UDPConn, which registers it with
// Go's netpoller (Config.Netpoll). fd is closed if that fails.
func (e *Endpoint) adopt(fd int, netpoll bool) error {
	if !netpoll {
		s, err := newRawSock(fd)
		if err != nil {
			return err
		}
		e.sock, e.rc = s, s
		return nil
	}
	f := os.NewFile(uintptr(fd), "udp")
	pc, err := net.FilePacketConn(f)
	f.Close() // FilePacketConn holds a duplicate
	if err != nil {
		return err
	}
	e.conn = pc.(*net.UDPConn)
	e.rc, err = e.conn.SyscallConn()
	if err != nil {
		e.conn.Close()
		e.conn = nil
		return err
	}
	return nil
}

// allocBatches allocates the receive and send message arrays of BatchSize
// messages (and the GRO buffers if GRO is on).
func (e *Endpoint) allocBatches() {
	n := e.batch
	e.rx.alloc(n, e.gro)
	// A send carries up to BatchSize messages and txPkts packets: with GSO
	// a message holds several, so that a window an ACK opens (rxe's
	// requester asks every 65 packets) leaves in one system call. Up to
	// three iovecs per packet: headers, payload in place, pad+ICRC.
	e.txPkts = n * txPktsPerMsg
	e.tx.hdrs, e.tx.iovs, e.tx.names = make([]mmsghdr, n), make([]unix.Iovec, 3*e.txPkts), make([]sockaddr, n)
	e.tx.oob = make([]byte, n*oobLen)
	e.tx.msgPkts = make([]int, n)
	for i := 0; i < n; i++ {
		e.tx.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&e.tx.names[i]))
	}
	e.rx.fn = e.doRead
	e.tx.fn = e.doWrite
	e.tx.routes = make(map[netip.Addr]netip.Addr)
	e.tx.zones = make(map[string]uint32)
}

// setOptions configures the fresh socket before bind.
func (e *Endpoint) setOptions(fd, bufSize int) error {
	if err := e.pmtuDiscoverDo(fd); err != nil {
		return err
	}
	if e.group {
		// Every endpoint of the host that joins the group binds its
		// address and port: each gets its own copy of a datagram.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return fmt.Errorf("udp: setsockopt SO_REUSEADDR: %w", err)
		}
	} else {
		e.multicastIf(fd)
	}
	if e.is6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
			return fmt.Errorf("udp: setsockopt IPV6_RECVTCLASS: %w", err)
		}
		if e.wildcard {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1); err != nil {
				return fmt.Errorf("udp: setsockopt IPV6_RECVPKTINFO: %w", err)
			}
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
			return fmt.Errorf("udp: setsockopt IP_RECVTOS: %w", err)
		}
		if e.wildcard {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
				return fmt.Errorf("udp: setsockopt IP_PKTINFO: %w", err)
			}
		}
	}
	e.setBuffer(fd, bufSize, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF)
	e.setBuffer(fd, bufSize, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF)
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
		e.rcvbuf = v
	}
	return nil
}

// pmtuDiscoverDo sets IP_PMTUDISC_DO (IPV6_PMTUDISC_DO): datagrams leave
// with DF and, on an unconnected IPv4 socket, IPv4 Identification 0.
func (e *Endpoint) pmtuDiscoverDo(fd int) error {
	if e.is6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return fmt.Errorf("udp: setsockopt IPV6_MTU_DISCOVER: %w", err)
		}
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
		return fmt.Errorf("udp: setsockopt IP_MTU_DISCOVER: %w", err)
	}
	return nil
}

// setBuffer asks for a socket buffer of size bytes (size <= 0: the kernel
// default), past the sysctl limit with force (root) if it can.
func (e *Endpoint) setBuffer(fd, size, force, opt int) {
	if size <= 0 || unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) == nil {
		return
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, size); err != nil && e.log != nil {
		e.log.Debug("udp: socket buffer size not set", "size", size, "err", err)
	}
}

// ReceiveBuffer returns the socket's receive buffer as the kernel granted
// it (SO_RCVBUF: twice what was asked for, up to net.core.rmem_max unless
// root), in bytes of the kernel's accounting.
func (e *Endpoint) ReceiveBuffer() int { return e.rcvbuf }

// LocalAddr returns the bound address and port.
func (e *Endpoint) LocalAddr() netip.AddrPort { return e.local }

// SendAddr returns the address and port datagrams are sent from: the bound
// address with the send socket's port (see Config.SendFromBound), or
// LocalAddr when the endpoint sends from its bound socket.
func (e *Endpoint) SendAddr() netip.AddrPort { return e.txAddr }

// Capabilities reports the socket's receive buffer (ReceiveBuffer), the
// send address (SendAddr), and that WriteBatch gathers link.Packet.Data in
// place (zero-copy send) and sets each sent packet's Src to the address it
// left from.
func (e *Endpoint) Capabilities() link.Capabilities {
	return link.Capabilities{ReceiveBuffer: e.rcvbuf, GatherWrite: true, SendAddr: e.txAddr, ReportsSource: true}
}

// MTU returns the IP MTU of the bound address's interface (or Config.MTU).
func (e *Endpoint) MTU() int { return e.mtu }

// BatchSize returns the most datagrams moved per system call.
func (e *Endpoint) BatchSize() int { return e.batch }

// GRO reports whether the endpoint receives with UDP GRO.
func (e *Endpoint) GRO() bool { return e.gro }

// GSO reports whether the endpoint currently sends with UDP GSO.
func (e *Endpoint) GSO() bool { return e.gso.Load() }

// Stats returns a snapshot of the endpoint's counters.
func (e *Endpoint) Stats() Stats { return e.ctr.snapshot() }

// rxQueue is one reader's receive arrays: the message headers, iovecs,
// addresses and control buffers of a recvmmsg, what was decoded of each
// message, and the GRO buffers (with what of them is not yet handed out).
type rxQueue struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names []sockaddr
	oob   []byte
	meta  []rxMeta
	// GRO: received buffers not yet handed out.
	groBuf                      []byte
	pendMsg, pendOff, pendCount int
}

// alloc allocates the arrays for n messages (and, if gro, groMsgs GRO
// buffers at most).
func (q *rxQueue) alloc(n int, gro bool) { q.allocGRO(n, gro, groMsgs) }

// allocGRO is alloc with at most groN GRO buffers: a recvmmsg on q then
// asks for that many messages (armRecv).
func (q *rxQueue) allocGRO(n int, gro bool, groN int) {
	q.hdrs, q.iovs, q.names = make([]mmsghdr, n), make([]unix.Iovec, n), make([]sockaddr, n)
	q.oob = make([]byte, n*oobLen)
	q.meta = make([]rxMeta, n)
	if gro {
		q.groBuf = make([]byte, min(groN, n)*groBufSize)
	}
	for i := 0; i < n; i++ {
		h := &q.hdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&q.names[i]))
		h.Iov = &q.iovs[i]
		h.SetIovlen(1)
		h.Control = &q.oob[i*oobLen]
	}
}

// Close closes the socket; blocked and later calls return an error wrapping
// net.ErrClosed.
func (e *Endpoint) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.signalWaitGone()
	var serr error
	// A send in progress holds tx.mu, and gives up a wait for room within
	// sendPollMs: the descriptor is not closed under it (nor reused).
	e.tx.mu.Lock()
	if e.tx.fd >= 0 {
		serr = os.NewSyscallError("close", unix.Close(e.tx.fd))
		e.tx.fd = -1
	}
	for port, fd := range e.tx.ports {
		if fd >= 0 {
			serr = errors.Join(serr, os.NewSyscallError("close", unix.Close(fd)))
		}
		delete(e.tx.ports, port)
	}
	e.tx.maxPorts = 0
	e.closePeers()
	e.tx.mu.Unlock()
	if e.inbox != nil {
		serr = errors.Join(serr, e.inbox.close())
	}
	serr = errors.Join(serr, e.state.close())
	if e.conn != nil {
		return errors.Join(e.conn.Close(), serr)
	}
	return errors.Join(e.sock.Close(), serr)
}

func (e *Endpoint) doRead(fd uintptr) bool {
	if e.rx.slept {
		e.rx.slept = false
		e.wakeLocal()
	}
	for {
		n, errno, _ := e.recvm(fd, e.rx.hdrs[:e.rx.want], false)
		switch errno {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			e.ctr.emptyReads.Add(1)
			if e.rx.nowait {
				e.rx.got, e.rx.errno = 0, 0
				return true
			}
			if !e.sleepLocal() {
				continue // the lanes hold records
			}
			e.rx.slept = true
			e.ctr.waits.Add(1)
			return false
		}
		e.rx.got, e.rx.errno = n, errno
		return true
	}
}

// ReadBatch receives up to min(len(pkts), BatchSize()) datagrams, blocking
// until at least one arrives. Each packet's Buf is used up to its capacity; a
// datagram that does not fit is reported with N = 0 (Stats.Truncated).
//
// With UDP GRO the kernel hands over runs of datagrams of one flow as one
// buffer; they are received into the endpoint's own buffers and copied out
// one datagram per packet, and what does not fit in pkts is returned by the
// next call.
func (e *Endpoint) ReadBatch(pkts []link.Packet) (int, error) { return e.readBatch(pkts, false, false) }

// ReadBatchView is ReadBatch without a copy when the endpoint receives with
// UDP GRO: each filled packet's Buf is replaced by a read-only view of the
// endpoint's receive buffer (capacity N), valid only until the next
// ReadBatch or ReadBatchView call. Without GRO it is ReadBatch, and the
// callers' buffers are filled as usual. It suits a single reader that has
// finished with a batch before reading the next.
func (e *Endpoint) ReadBatchView(pkts []link.Packet) (int, error) {
	return e.readBatch(pkts, true, false)
}

// PollBatch is ReadBatch without waiting: it returns 0 at once when no
// datagram is waiting (busy polling; one recvmmsg per call).
func (e *Endpoint) PollBatch(pkts []link.Packet) (int, error) { return e.pollBatch(pkts, false) }

// PollBatchView is ReadBatchView without waiting, as PollBatch.
func (e *Endpoint) PollBatchView(pkts []link.Packet) (int, error) { return e.pollBatch(pkts, true) }

// Pending reports datagrams waiting to be read, in a same-host lane or in
// the socket (link.Pender), without reading them: a look at the lanes and
// a poll(2) of the socket that does not wait. A reader that holds the
// lanes at the moment counts as pending (it is taking them). A wake-up
// datagram counts too.
func (e *Endpoint) Pending() bool {
	if e.closed.Load() {
		return false
	}
	if in := e.inbox; in != nil {
		if !in.mu.TryLock() {
			return true
		}
		p := !in.closed && in.pendingLocked()
		in.mu.Unlock()
		if p {
			return true
		}
	}
	ready := false
	e.rc.Control(func(fd uintptr) {
		pfd := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd[:], 0)
		ready = err == nil && n > 0 && pfd[0].Revents&unix.POLLIN != 0
	})
	return ready
}

func (e *Endpoint) pollBatch(pkts []link.Packet, view bool) (int, error) {
	return e.readBatch(pkts, view, true)
}

func (e *Endpoint) readBatch(pkts []link.Packet, view, nowait bool) (int, error) {
	if e.closed.Load() {
		return 0, errClosed
	}
	n := min(len(pkts), e.batch)
	if n == 0 {
		return 0, nil
	}
	rx := &e.rx
	rx.mu.Lock()
	defer rx.mu.Unlock()
	rx.nowait = nowait
	if e.gro && view {
		return e.readGRO(pkts[:n], true)
	}
	for i := 0; i < n; i++ {
		if cap(pkts[i].Buf) == 0 {
			return 0, fmt.Errorf("udp: ReadBatch: packet %d has a buffer of capacity 0: give each packet a buffer of at least MTU bytes", i)
		}
	}
	if e.gro {
		return e.readGRO(pkts[:n], false)
	}
	e.armRecv(&rx.rxQueue, pkts[:n])
	k, err := e.recv(n)
	clearIovs(rx.iovs[:n])
	if err != nil {
		return 0, err
	}
	e.fillPlain(&rx.rxQueue, pkts, k)
	return k, nil
}

// fillPlain completes the first k packets of a read without GRO, received
// into their own buffers, from what recv decoded.
func (e *Endpoint) fillPlain(q *rxQueue, pkts []link.Packet, k int) {
	var bytes uint64
	for i := 0; i < k; i++ {
		p, m := &pkts[i], &q.meta[i]
		p.N = m.n
		if m.trunc {
			p.N = 0
			e.ctr.truncated.Add(1)
		}
		bytes += uint64(p.N)
		p.Src, p.Dst, p.TOS, p.Local = m.src, m.dst, m.tos, m.local
		p.IPHdrLen, p.TTL = 0, 0
	}
	e.ctr.packetsIn.Add(uint64(k))
	e.ctr.bytesIn.Add(bytes)
}

// rxMeta is what recv learned about one received message.
type rxMeta struct {
	src, dst netip.AddrPort
	n        int // bytes
	seg      int // GRO segment size (0: one datagram)
	tos      uint8
	trunc    bool
	local    bool // from a same-host lane (link.Packet.Local)
}

// recv runs recvmmsg for the first n messages (armed by armRecv) and
// decodes their addresses and control messages into rx.meta.
func (e *Endpoint) recv(n int) (int, error) {
	rx := &e.rx
	rx.want = n
	if err := e.rc.Read(rx.fn); err != nil {
		if e.closed.Load() || errors.Is(err, net.ErrClosed) {
			return 0, errClosed
		}
		e.ctr.readErrors.Add(1)
		return 0, fmt.Errorf("udp: read: %w", err)
	}
	if rx.errno != 0 {
		e.ctr.readErrors.Add(1)
		return 0, os.NewSyscallError("recvmmsg", rx.errno)
	}
	e.decodeAll(&rx.rxQueue, rx.got)
	return rx.got, nil
}

// decodeAll decodes the k messages one recvmmsg returned.
func (e *Endpoint) decodeAll(q *rxQueue, k int) {
	for i := 0; i < k; i++ {
		e.decodeMsg(q, i)
	}
	e.ctr.readCalls.Add(1)
}

// decodeMsg decodes received message i (its length, address and control
// messages) into q.meta[i].
func (e *Endpoint) decodeMsg(q *rxQueue, i int) {
	m, h := &q.meta[i], &q.hdrs[i]
	sa := &q.names[i]
	*m = rxMeta{src: addrPortOf(sa), dst: e.local, n: int(h.n), trunc: h.hdr.Flags&unix.MSG_TRUNC != 0,
		local: h.hdr.Flags&msgLocal != 0}
	zone := ""
	if sa.Family == unix.AF_INET6 && sa.Scope_id != 0 && m.src.Addr().IsLinkLocalUnicast() {
		// A link-local sender: keep its scope so that replies to Src work.
		zone = e.zoneName(sa.Scope_id)
		m.src = netip.AddrPortFrom(m.src.Addr().WithZone(zone), m.src.Port())
	}
	if cl := int(h.hdr.Controllen); cl > 0 {
		dst, tos, seg := parseCmsgs(q.oob[i*oobLen : i*oobLen+min(cl, oobLen)])
		m.tos, m.seg = tos, seg
		if e.wildcard && dst.IsValid() {
			if dst.IsLinkLocalUnicast() {
				dst = dst.WithZone(zone)
			}
			m.dst = netip.AddrPortFrom(dst, e.local.Port())
		}
	}
}

// Receive buffers for GRO: each message can carry up to 64 KiB. The
// receive loop's recvmmsg asks for groMsgs of them; Poll's for
// pollGROMsgs: its caller polls again at once, and the 256 KiB it then
// holds (not 1 MiB) is less for a C program's first poll to clear and
// for every collection to pace against.
const (
	groBufSize  = 65536
	groMsgs     = 16
	pollGROMsgs = 4
)

// readGRO fills pkts from the pending GRO buffers, receiving more first if
// none are pending; view points the packets into those buffers instead of
// copying.
func (e *Endpoint) readGRO(pkts []link.Packet, view bool) (int, error) {
	rx := &e.rx
	for {
		if rx.pendMsg >= rx.pendCount {
			k, err := e.recv(e.armRecv(&rx.rxQueue, pkts))
			if err != nil {
				return 0, err
			}
			rx.pendMsg, rx.pendOff, rx.pendCount = 0, 0, k
		}
		// Only empty datagrams (wake-ups) leave nothing: read on, unless
		// polling.
		if n := e.handOutGRO(&rx.rxQueue, pkts, view); n > 0 || rx.nowait {
			return n, nil
		}
	}
}

// handOutGRO fills pkts with q's pending GRO datagrams, one per packet, and
// returns how many it filled.
func (e *Endpoint) handOutGRO(q *rxQueue, pkts []link.Packet, view bool) int {
	var bytes uint64
	i := 0
	for i < len(pkts) && q.pendMsg < q.pendCount {
		j := q.pendMsg
		m := &q.meta[j]
		if m.n == 0 && !m.trunc {
			q.pendMsg++ // an empty datagram: a same-host lane's wake-up
			continue
		}
		data := q.groBuf[j*groBufSize : j*groBufSize+m.n]
		seg := m.n
		if m.seg > 0 {
			seg = m.seg
			if m.n > seg {
				e.ctr.groSegments.Add(1)
				if q.pendOff == 0 {
					e.ctr.groMessages.Add(1)
				}
			}
		}
		take := min(seg, m.n-q.pendOff)
		p := &pkts[i]
		if view {
			end := q.pendOff + take
			p.Buf = data[q.pendOff:end:end]
			p.N = take
		} else {
			p.N = copy(p.Buf[:cap(p.Buf)], data[q.pendOff:q.pendOff+take])
		}
		if p.N < take || m.trunc {
			p.N = 0
			e.ctr.truncated.Add(1)
		}
		bytes += uint64(p.N)
		p.Src, p.Dst, p.TOS, p.Local = m.src, m.dst, m.tos, m.local
		p.IPHdrLen, p.TTL = 0, 0
		q.pendOff += take
		if q.pendOff >= m.n {
			q.pendMsg++
			q.pendOff = 0
		}
		i++
	}
	e.ctr.packetsIn.Add(uint64(i))
	e.ctr.bytesIn.Add(bytes)
	return i
}

// setIov points v at b (not empty).
func setIov(v *unix.Iovec, b []byte) {
	v.Base = &b[0]
	v.SetLen(len(b))
}

func clearIovs(iovs []unix.Iovec) {
	for i := range iovs {
		iovs[i].Base = nil
	}
}

func (e *Endpoint) doWrite(fd uintptr) bool {
	for {
		n, errno := sendmmsg(fd, e.tx.hdrs[e.tx.off:e.tx.end])
		e.ctr.syscalls.Add(1)
		switch errno {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		e.tx.got, e.tx.errno = n, errno
		return true
	}
}

// WriteBatch fills in each packet's ICRC (for IPv4 ID 0 with DF, which is
// what the kernel writes on this socket) and sends the packets in order,
// up to BatchSize() per system call. It returns how many were sent; on a
// short count the error says why the next one was not (a bad destination, a
// datagram over the path MTU, ...). Packets before it have been sent.
//
// With UDP GSO, runs of consecutive packets to one destination with equal
// sizes (the last may be shorter) go to the kernel as one buffer that it
// cuts into datagrams; the kernel numbers the IPv4 Identification of those
// segments 0, 1, 2, ..., and each packet's ICRC is computed for its ID.
//
// Each packet handed to the kernel gets Src set to the address and port it
// leaves from (SendAddr, or with Config.SourcePorts the port Src named), so
// that taps (link/tee) record what the wire carries.
func (e *Endpoint) WriteBatch(pkts []link.Packet) (int, error) {
	if e.closed.Load() {
		return 0, errClosed
	}
	if e.group {
		return 0, errGroupSend
	}
	tx := &e.tx
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if !tx.local {
		return e.writeSocket(pkts)
	}
	// Runs of packets to same-host inboxes go to their lanes, the rest
	// through the socket, in order.
	sent := 0
	for sent < len(pkts) {
		k, err := e.writeLocal(pkts[sent:])
		sent += k
		if err != nil {
			return sent, err
		}
		if sent == len(pkts) {
			break
		}
		if k > 0 {
			continue
		}
		end := sent + 1
		for end < len(pkts) && (pkts[end].Dst == pkts[sent].Dst || e.peerFor(pkts[end].Dst) == nil) {
			end++
		}
		k, err = e.writeSocket(pkts[sent:end])
		sent += k
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// writeSocket is WriteBatch through the socket (tx.mu held).
func (e *Endpoint) writeSocket(pkts []link.Packet) (int, error) {
	tx := &e.tx
	sent := 0
	coalesce := true
	for sent < len(pkts) {
		nm, _, perr := e.build(pkts[sent:], coalesce && e.gso.Load())
		km, err := e.send(nm)
		clearIovs(tx.iovs[:tx.niov])
		kp := 0
		for _, c := range tx.msgPkts[:km] {
			kp += c
		}
		var bytes uint64
		for i := 0; i < kp; i++ {
			bytes += uint64(pkts[sent+i].Len())
		}
		e.ctr.packetsOut.Add(uint64(kp))
		e.ctr.bytesOut.Add(bytes)
		if err != nil {
			if km < nm && tx.msgPkts[km] > 1 && !errors.Is(err, net.ErrClosed) {
				// A GSO send failed: send those packets one by one (with
				// their ICRCs recomputed for ID 0), and stop using GSO if
				// the kernel or device cannot do it.
				e.ctr.gsoFallbacks.Add(1)
				if errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EOPNOTSUPP) {
					e.gso.Store(false)
					if e.log != nil {
						e.log.Info("udp: UDP GSO failed; sending one datagram per buffer from now on", "err", err)
					}
				}
				sent += kp
				coalesce = false
				continue
			}
			return sent + kp, e.writeError(err, &pkts[sent+kp])
		}
		sent += kp
		coalesce = true
		if perr != nil {
			return sent, perr
		}
	}
	return sent, nil
}

func (e *Endpoint) writeError(err error, p *link.Packet) error {
	if errors.Is(err, net.ErrClosed) {
		return err
	}
	e.ctr.writeErrors.Add(1)
	if errors.Is(err, syscall.EMSGSIZE) {
		return fmt.Errorf("udp: datagram of %d bytes to %v exceeds the path MTU (interface MTU %d; RoCE does not fragment): %w", p.N, p.Dst, e.mtu, err)
	}
	if e.log != nil {
		e.log.Debug("udp: send failed", "dst", p.Dst, "len", p.N, "err", err)
	}
	return fmt.Errorf("udp: send to %v: %w", p.Dst, err)
}

// send transmits the nm prepared messages and returns how many went out.
func (e *Endpoint) send(nm int) (int, error) {
	tx := &e.tx
	tx.off, tx.end = 0, nm
	if tx.cur >= 0 {
		return e.sendRaw(nm)
	}
	for tx.off < nm {
		if err := e.rc.Write(tx.fn); err != nil {
			if e.closed.Load() || errors.Is(err, net.ErrClosed) {
				return tx.off, errClosed
			}
			return tx.off, err
		}
		if tx.errno != 0 {
			return tx.off, os.NewSyscallError("sendmmsg", tx.errno)
		}
		e.ctr.writeCalls.Add(1)
		tx.off += tx.got
	}
	return nm, nil
}

// sendPollMs bounds one wait for room in the send socket's buffer, so that
// Close is not held up longer than that by a send.
const sendPollMs = 10

// sendRaw sends the nm prepared messages on their send socket (tx.cur,
// tx.mu held) and returns how many went out. A full send buffer (EAGAIN) is
// waited out in poll(2) on this thread, outside the netpoller.
func (e *Endpoint) sendRaw(nm int) (int, error) {
	tx := &e.tx
	pfd := [1]unix.PollFd{{Fd: int32(tx.cur), Events: unix.POLLOUT}}
	for tx.off < nm {
		n, errno := sendmmsg(uintptr(tx.cur), tx.hdrs[tx.off:nm])
		e.ctr.syscalls.Add(1)
		switch errno {
		case 0:
			e.ctr.writeCalls.Add(1)
			tx.off += n
		case unix.EINTR:
		case unix.EAGAIN:
			if e.closed.Load() {
				return tx.off, errClosed
			}
			e.ctr.sendWaits.Add(1)
			if _, err := unix.Poll(pfd[:], sendPollMs); err != nil && err != unix.EINTR {
				return tx.off, os.NewSyscallError("poll", err)
			}
		default:
			return tx.off, os.NewSyscallError("sendmmsg", errno)
		}
	}
	return nm, nil
}

// Limits of one UDP GSO send: the kernel's UDP_MAX_SEGMENTS (64 before
// Linux 6.11) and the 16-bit IP length of the unsegmented datagram.
const (
	maxGSOSegments = 64
	maxGSOBytes    = 65535 - 40 - 8
)

// txPktsPerMsg is the packets per message a send has room for, on average.
const txPktsPerMsg = 2

// build prepares up to BatchSize() messages for up to txPkts packets of
// pkts, computing their ICRCs, and returns the number of messages and
// packets. It stops before the first invalid packet and returns its error.
func (e *Endpoint) build(pkts []link.Packet, coalesce bool) (nm, np int, err error) {
	tx := &e.tx
	overhead := 8 + 20
	if e.is6 {
		overhead = 8 + 40
	}
	var (
		run      bool // the current message can take more segments
		rdst     netip.AddrPort
		rsrc     netip.AddrPort
		rtos     uint8
		rttl     uint8
		seg      int
		segs     int
		runBytes int
		cl       int // control bytes of the current message
		iv       int // iovecs filled
		miov     int // iovecs of the current message
	)
	finish := func() {
		if nm == 0 {
			return
		}
		m := nm - 1
		h := &tx.hdrs[m].hdr
		h.SetIovlen(miov)
		if segs > 1 {
			ctl := tx.oob[m*oobLen : (m+1)*oobLen]
			d, sp := putCmsg(ctl[cl:], unix.SOL_UDP, unix.UDP_SEGMENT, 2)
			*(*uint16)(unsafe.Pointer(&d[0])) = uint16(seg)
			cl += sp
			e.ctr.gsoMessages.Add(1)
			e.ctr.gsoSegments.Add(uint64(segs))
		}
		if cl > 0 {
			h.Control = &tx.oob[m*oobLen]
		} else {
			h.Control = nil
		}
		h.SetControllen(cl)
	}
	for np < len(pkts) && np < e.txPkts {
		p := &pkts[np]
		dst, src, scope, err := e.addrs(p)
		if err != nil {
			finish()
			tx.niov = iv
			e.ctr.icrcFilled.Add(uint64(np))
			return nm, np, err
		}
		fd, fallback := tx.fd, false
		if sp := p.Src.Port(); tx.maxPorts > 0 && sp != 0 && sp != src.Port() {
			f, ok := e.portSocket(sp)
			if ok {
				fd, src = f, netip.AddrPortFrom(src.Addr(), sp)
			}
			fallback = !ok
		}
		if np == 0 {
			tx.cur = fd
		} else if fd != tx.cur {
			break // another socket: the next send takes p
		}
		b := p.Buf[:p.N]
		size := p.Len()
		id := uint16(0)
		if run && dst == rdst && src == rsrc && p.TOS == rtos && p.TTL == rttl &&
			size <= seg && segs < maxGSOSegments && runBytes+size <= maxGSOBytes {
			if !e.is6 {
				id = uint16(segs)
			}
			segs++
			runBytes += size
			run = size == seg
			tx.msgPkts[nm-1]++
		} else {
			if nm == e.batch {
				break // no message left: the next send takes p
			}
			finish()
			m := nm
			nm++
			h := &tx.hdrs[m].hdr
			h.Namelen = putSockaddr(&tx.names[m], dst, e.is6, scope)
			h.Iov = &tx.iovs[iv]
			cl = e.putControl(tx.oob[m*oobLen:(m+1)*oobLen], p, src)
			tx.msgPkts[m] = 1
			run = coalesce && size+overhead <= e.mtu
			rdst, rsrc, rtos, rttl = dst, src, p.TOS, p.TTL
			seg, segs, runBytes, miov = size, 1, size, 0
		}
		if len(p.Data) == 0 {
			tx.icrc.FillICRC(b, src, dst, id)
			setIov(&tx.iovs[iv], b)
			iv++
			miov++
		} else {
			// Zero-copy: headers, the payload in place, pad and ICRC.
			at := p.DataAt
			wire.PutICRC(b, tx.icrc.ICRCForGather(src, dst, id, b[:at], p.Data, b[at:len(b)-wire.ICRCLen]))
			setIov(&tx.iovs[iv], b[:at])
			setIov(&tx.iovs[iv+1], p.Data)
			setIov(&tx.iovs[iv+2], b[at:])
			iv += 3
			miov += 3
			e.ctr.gathered.Add(1)
		}
		if fallback {
			e.ctr.portFallbacks.Add(1)
		}
		p.Src = src // the address it leaves from (WriteBatch's contract)
		np++
	}
	finish()
	tx.niov = iv
	e.ctr.icrcFilled.Add(uint64(np))
	return nm, np, nil
}

// addrs validates p and returns its destination and source addresses (of
// the socket's family) and the IPv6 scope to send with.
func (e *Endpoint) addrs(p *link.Packet) (dst, src netip.AddrPort, scope uint32, err error) {
	if p.N < wire.ICRCLen || p.N > cap(p.Buf) {
		if p.N > cap(p.Buf) {
			return dst, src, 0, fmt.Errorf("udp: packet length %d exceeds its buffer (cap %d)", p.N, cap(p.Buf))
		}
		return dst, src, 0, ErrShortPacket
	}
	if len(p.Data) > 0 && (p.DataAt < wire.BTHLen || p.DataAt > p.N-wire.ICRCLen) {
		return dst, src, 0, fmt.Errorf("udp: Packet.DataAt %d outside the headers and pad of a %d-byte buffer (want %d..%d)", p.DataAt, p.N, wire.BTHLen, p.N-wire.ICRCLen)
	}
	da := p.Dst.Addr()
	if !e.is6 {
		da = da.Unmap()
	}
	if !da.IsValid() || p.Dst.Port() == 0 || da.Is4() == e.is6 || da.Is4In6() {
		return dst, src, 0, e.badDst(p.Dst)
	}
	dst = netip.AddrPortFrom(da, p.Dst.Port())
	src = e.txAddr
	scope = e.scope
	if da.Zone() != "" {
		s, err := e.zoneOf(da.Zone())
		if err != nil {
			return dst, src, 0, fmt.Errorf("%w: %v: %v", ErrBadAddr, p.Dst, err)
		}
		scope = s
	} else if !da.IsLinkLocalUnicast() {
		scope = 0
	}
	if e.wildcard {
		sa := p.Src.Addr()
		if !e.is6 {
			sa = sa.Unmap()
		}
		if !sa.IsValid() || sa.Is4() == e.is6 || sa.IsUnspecified() {
			if sa, err = e.route(da); err != nil {
				return dst, src, 0, err
			}
		}
		src = netip.AddrPortFrom(sa, e.txAddr.Port())
	}
	return dst, src, scope, nil
}

// putControl writes the per-datagram control messages for p (source
// address on a wildcard endpoint, TOS, TTL) and returns their length.
func (e *Endpoint) putControl(ctl []byte, p *link.Packet, src netip.AddrPort) int {
	cl := 0
	if e.wildcard {
		if e.is6 {
			d, sp := putCmsg(ctl, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&d[0]))
			*pi = unix.Inet6Pktinfo{Addr: src.Addr().As16()}
			cl += sp
		} else {
			d, sp := putCmsg(ctl, unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&d[0]))
			*pi = unix.Inet4Pktinfo{Spec_dst: src.Addr().As4()}
			cl += sp
		}
	}
	if p.TOS != 0 {
		lvl, typ := int32(unix.IPPROTO_IP), int32(unix.IP_TOS)
		if e.is6 {
			lvl, typ = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
		}
		d, sp := putCmsg(ctl[cl:], lvl, typ, 4)
		putInt32(d, int32(p.TOS))
		cl += sp
	}
	if p.TTL != 0 {
		lvl, typ := int32(unix.IPPROTO_IP), int32(unix.IP_TTL)
		if e.is6 {
			lvl, typ = unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT
		}
		d, sp := putCmsg(ctl[cl:], lvl, typ, 4)
		putInt32(d, int32(p.TTL))
		cl += sp
	}
	return cl
}

func (e *Endpoint) badDst(d netip.AddrPort) error {
	fam := "IPv4"
	if e.is6 {
		fam = "IPv6"
	}
	return fmt.Errorf("%w: destination %v: this endpoint (%v) sends %s only, to a non-zero port", ErrBadAddr, d, e.local, fam)
}

// route returns (and caches) the source address the kernel picks for dst.
func (e *Endpoint) route(dst netip.Addr) (netip.Addr, error) {
	if s, ok := e.tx.routes[dst]; ok {
		return s, nil
	}
	e.ctr.sourceLookups.Add(1)
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, wire.UDPPort)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("udp: no route to %v: %w", dst, err)
	}
	defer c.Close()
	s := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr()
	if !e.is6 {
		s = s.Unmap()
	}
	s = s.WithZone("")
	e.tx.routes[dst] = s
	return s, nil
}

func (e *Endpoint) zoneOf(z string) (uint32, error) {
	if s, ok := e.tx.zones[z]; ok {
		return s, nil
	}
	s, err := zoneIndex(z)
	if err != nil {
		return 0, err
	}
	e.tx.zones[z] = s
	return s, nil
}

// zoneName returns (and caches) the interface name for an IPv6 scope ID.
// Called with rx.mu held.
func (e *Endpoint) zoneName(idx uint32) string {
	e.zones.mu.Lock()
	defer e.zones.mu.Unlock()
	if z, ok := e.zones.m[idx]; ok {
		return z
	}
	z := strconv.FormatUint(uint64(idx), 10)
	if ifi, err := net.InterfaceByIndex(int(idx)); err == nil {
		z = ifi.Name
	}
	if e.zones.m == nil {
		e.zones.m = make(map[uint32]string)
	}
	e.zones.m[idx] = z
	return z
}

func zoneIndex(z string) (uint32, error) {
	if n, err := strconv.ParseUint(z, 10, 32); err == nil {
		return uint32(n), nil
	}
	ifi, err := net.InterfaceByName(z)
	if err != nil {
		return 0, err
	}
	return uint32(ifi.Index), nil
}
