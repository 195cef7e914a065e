package udp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// Defaults used when a Config field is zero.
const (
	// DefaultBatchSize is the number of messages moved per system call.
	DefaultBatchSize = 64
	// MaxBatchSize bounds Config.BatchSize (the kernel caps recvmmsg/sendmmsg
	// at UIO_MAXIOV = 1024 messages per call).
	MaxBatchSize = 1024
	// DefaultSocketBuffer is the SO_RCVBUF/SO_SNDBUF size asked for. As root
	// the endpoint uses SO_RCVBUFFORCE/SO_SNDBUFFORCE to go past
	// net.core.rmem_max/wmem_max; otherwise the kernel clamps it silently.
	DefaultSocketBuffer = 32 << 20
	// MaxSourcePorts bounds Config.SourcePorts: rxe's per-QP ports span
	// 0xC000..0xFFFF, 16384 of them.
	MaxSourcePorts = 16384
)

var (
	// ErrBadAddr reports an address an endpoint cannot use (invalid, or a
	// destination whose family does not match the socket's).
	ErrBadAddr = errors.New("udp: bad address")
	// ErrShortPacket reports a packet to send shorter than its 4-byte ICRC
	// placeholder.
	ErrShortPacket = errors.New("udp: packet shorter than its ICRC (4 bytes): build it with wire.Packet.Append")

	// ErrNotMulticast reports a JoinGroup address that is not an IP
	// multicast group of the endpoint's family.
	ErrNotMulticast = errors.New("udp: not a multicast group address of the endpoint's family")
	// ErrWildcardGroup reports a JoinGroup on an endpoint bound to a
	// wildcard address, which names no interface to join on.
	ErrWildcardGroup = errors.New("udp: multicast needs an endpoint bound to one address (its interface joins the group), not a wildcard")

	errGroupSend = errors.New("udp: a multicast group's endpoint only receives: send from the endpoint that joined")

	errClosed = fmt.Errorf("udp: endpoint closed: %w", net.ErrClosed)
)

// Config describes an endpoint to Open.
type Config struct {
	// Addr is the local IP address and UDP port to bind. A zero port means
	// wire.UDPPort (4791) unless AnyPort is set. A wildcard address
	// (0.0.0.0, ::) is allowed; see the package documentation.
	Addr netip.AddrPort
	// AnyPort lets the kernel choose the port when Addr's port is 0 (tests).
	AnyPort bool
	// MTU overrides the IP MTU reported by Endpoint.MTU; 0 looks it up from
	// the interface that holds Addr.
	MTU int
	// BatchSize is the most messages per system call (0: DefaultBatchSize):
	// datagrams, except that a UDP GSO or GRO message holds several (a
	// send then carries up to twice BatchSize datagrams).
	BatchSize int
	// SocketBuffer is the receive and send buffer size in bytes
	// (0: DefaultSocketBuffer; negative: leave the kernel default).
	SocketBuffer int
	// NoGSO turns UDP generic segmentation offload off. By default the
	// endpoint uses it when the kernel supports it (Linux 4.18 and later)
	// and stops using it if a send fails with EIO.
	NoGSO bool
	// NoGRO turns UDP generic receive offload off. By default the endpoint
	// asks for it (Linux 5.0 and later) and splits what arrives coalesced,
	// at the cost of 1 MiB of receive buffers and one copy per datagram.
	NoGRO bool
	// SendFromBound sends from the bound socket, so that datagrams carry
	// Addr's port as their UDP source port. By default the endpoint sends
	// from a second socket on the same address and a port the kernel
	// chooses (SendAddr), which Go's netpoller never watches: on the bound
	// socket, which it watches for reading, every sent datagram the kernel
	// frees would wake a thread parked in the netpoller (with GOMAXPROCS
	// above 1, a 1 MiB RDMA WRITE stream lost a quarter of its rate to
	// those wake-ups). RoCEv2 leaves the source port to the sender (rxe
	// uses a per-QP hash); receivers, softroce's and the kernel's, answer
	// to port 4791 (wire.UDPPort) whatever it is.
	SendFromBound bool
	// SourcePorts, when above 0, sends each datagram from the UDP source
	// port its link.Packet.Src names (the engine puts the QP's port there,
	// rxe's per-QP hash, docs/protocol.md §1.3), as rxe and RoCE NICs do,
	// so that switches hashing on the 5-tuple spread QPs over paths (ECMP;
	// several QPs per connection, as NCCL opens, then take several paths).
	// A socket cannot send from another port than its own: the endpoint
	// opens one unwatched send socket per port on its first datagram, at
	// most SourcePorts of them. A port it cannot bind (in use on this
	// address) and ports past the limit are sent from the shared send
	// socket (SendAddr) and counted in Stats.SourcePortFallbacks. A batch
	// takes one sendmmsg per run of datagrams with one port. 0 (the
	// default): every datagram leaves from SendAddr. Not with
	// SendFromBound.
	SourcePorts int
	// Netpoll waits for the bound socket through Go's netpoller (a
	// net.UDPConn), as the endpoint did before. By default the socket
	// reaches the netpoller only while a reader waits on it (through an
	// epoll instance of its own, where it is registered one-shot), and
	// ServeView leaves the socket to a busy Poll caller, sleeping
	// meanwhile. Registered with the netpoller, every datagram that makes
	// the socket readable wakes a runtime thread, even one a polling
	// caller then takes itself (docs/speed.md, "UCX and Open MPI over the
	// C library").
	Netpoll bool
	// Local lets the endpoint exchange datagrams with other Local
	// endpoints of the same user in the same network namespace through
	// shared memory instead of the kernel's loopback (same-host lanes:
	// an inbox file in /dev/shm per endpoint, one ring per sender): the
	// same datagrams, but for the ICRC, which is left out (Packet.Local
	// says so), without a system call while the receiver reads, as a NIC carries traffic between its own QPs without
	// the wire. Packet captures on the interface (tcpdump, Wireshark) do
	// not see that traffic; a tap on the device (link/tee, softroce dump)
	// does. Not for wildcard addresses. Stats.LocalIn and LocalOut count
	// it.
	Local bool
	// Logger receives rare events (buffer-size fallbacks, send errors);
	// nil is silent.
	Logger *slog.Logger

	group   bool   // a multicast group's receive-only endpoint (JoinGroup)
	groupIf uint32 // its interface, for an IPv6 group of link or interface scope
}

// Option changes a Config; see Listen.
type Option func(*Config)

// WithAnyPort lets the kernel choose the UDP port when the address's port is 0.
func WithAnyPort() Option { return func(c *Config) { c.AnyPort = true } }

// WithLocal enables same-host lanes (Config.Local).
func WithLocal() Option { return func(c *Config) { c.Local = true } }

// WithMTU overrides the reported IP MTU.
func WithMTU(mtu int) Option { return func(c *Config) { c.MTU = mtu } }

// WithBatchSize sets the number of messages per system call (Config.BatchSize).
func WithBatchSize(n int) Option { return func(c *Config) { c.BatchSize = n } }

// WithSocketBuffer sets the socket receive and send buffer sizes in bytes.
func WithSocketBuffer(n int) Option { return func(c *Config) { c.SocketBuffer = n } }

// WithoutGSO turns UDP GSO off.
func WithoutGSO() Option { return func(c *Config) { c.NoGSO = true } }

// WithoutGRO turns UDP GRO off.
func WithoutGRO() Option { return func(c *Config) { c.NoGRO = true } }

// WithSendFromBound sends from the bound socket (Config.SendFromBound).
func WithSendFromBound() Option { return func(c *Config) { c.SendFromBound = true } }

// WithSourcePorts sends from per-QP UDP source ports, with at most n
// sockets (Config.SourcePorts).
func WithSourcePorts(n int) Option { return func(c *Config) { c.SourcePorts = n } }

// WithNetpoll waits for the bound socket through Go's netpoller
// (Config.Netpoll).
func WithNetpoll() Option { return func(c *Config) { c.Netpoll = true } }

// WithLogger sets the logger for rare events.
func WithLogger(l *slog.Logger) Option { return func(c *Config) { c.Logger = l } }

// Listen opens an endpoint bound to addr (port 0: 4791, see WithAnyPort).
func Listen(addr netip.AddrPort, opts ...Option) (*Endpoint, error) {
	cfg := Config{Addr: addr}
	for _, o := range opts {
		o(&cfg)
	}
	return Open(cfg)
}

// normalize validates c and fills in defaults.
func (c *Config) normalize() error {
	if !c.Addr.Addr().IsValid() {
		return fmt.Errorf("%w: %v: give an IP address (and optionally a port) to bind", ErrBadAddr, c.Addr)
	}
	a := c.Addr.Addr()
	if a.Is4In6() {
		a = a.Unmap()
	}
	port := c.Addr.Port()
	if port == 0 && !c.AnyPort {
		port = wire.UDPPort
	}
	c.Addr = netip.AddrPortFrom(a, port)
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchSize < 1 || c.BatchSize > MaxBatchSize {
		return fmt.Errorf("udp: batch size %d out of range 1..%d", c.BatchSize, MaxBatchSize)
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	if c.MTU < 0 {
		return fmt.Errorf("udp: negative MTU %d", c.MTU)
	}
	if c.SourcePorts < 0 || c.SourcePorts > MaxSourcePorts {
		return fmt.Errorf("udp: SourcePorts %d out of range 0..%d", c.SourcePorts, MaxSourcePorts)
	}
	if c.SourcePorts > 0 && c.SendFromBound {
		return errors.New("udp: SourcePorts and SendFromBound exclude each other: the bound socket has one port (leave one of them out)")
	}
	return nil
}

// Stats is a snapshot of an endpoint's counters.
type Stats struct {
	PacketsIn, BytesIn   uint64 // datagrams and UDP payload bytes received
	PacketsOut, BytesOut uint64 // datagrams and UDP payload bytes sent
	ReadCalls            uint64 // recvmmsg calls that returned datagrams
	WriteCalls           uint64 // sendmmsg calls that sent datagrams
	ReadErrors           uint64 // failed receive system calls
	WriteErrors          uint64 // datagrams the kernel refused (see the error returned)
	Truncated            uint64 // datagrams larger than the read buffer (reported with N = 0)
	ICRCFilled           uint64 // ICRCs computed on write
	SourceLookups        uint64 // route look-ups for a wildcard endpoint's source address
	GSOMessages          uint64 // UDP GSO sends (one buffer cut into several datagrams)
	GSOSegments          uint64 // datagrams sent through UDP GSO
	GSOFallbacks         uint64 // failed GSO sends that were retried one datagram per buffer
	GROMessages          uint64 // received buffers that held several datagrams
	GROSegments          uint64 // datagrams received in such buffers
	Syscalls             uint64 // receive and send system calls (recvmmsg and sendmmsg tries)
	Gathered             uint64 // datagrams sent zero-copy, their payload in place (link.Packet.Data)
	EmptyReads           uint64 // recvmmsg tries that found nothing waiting
	Waits                uint64 // times a reader waited for the socket to become readable
	SendWaits            uint64 // times a send waited for room in the send socket's buffer
	Asides               uint64 // sleeps of ServeView stepping aside for a busy Poll caller
	SourcePortSockets    uint64 // per-port send sockets opened (Config.SourcePorts)
	SourcePortFallbacks  uint64 // datagrams sent from SendAddr because their port had no socket
	LocalIn              uint64 // datagrams received through same-host lanes (Config.Local)
	LocalOut             uint64 // datagrams written to same-host lanes
	LocalDrops           uint64 // datagrams dropped for a lane that stayed full
	LocalFull            uint64 // writes that found a lane full and waited
	LocalWakes           uint64 // empty datagrams sent to wake a lane's sleeping reader
	LocalCorrupt         uint64 // lanes whose records broke the format (their contents dropped)
	LocalPeers           uint64 // destinations found to have same-host inboxes
}

type counters struct {
	packetsIn, bytesIn   atomic.Uint64
	packetsOut, bytesOut atomic.Uint64
	readCalls            atomic.Uint64
	writeCalls           atomic.Uint64
	readErrors           atomic.Uint64
	writeErrors          atomic.Uint64
	truncated            atomic.Uint64
	icrcFilled           atomic.Uint64
	sourceLookups        atomic.Uint64
	gsoMessages          atomic.Uint64
	gsoSegments          atomic.Uint64
	gsoFallbacks         atomic.Uint64
	groMessages          atomic.Uint64
	groSegments          atomic.Uint64
	syscalls             atomic.Uint64
	gathered             atomic.Uint64
	emptyReads           atomic.Uint64
	waits                atomic.Uint64
	sendWaits            atomic.Uint64
	asides               atomic.Uint64
	portSockets          atomic.Uint64
	portFallbacks        atomic.Uint64
	localIn, localOut    atomic.Uint64
	localDrops           atomic.Uint64
	localFull            atomic.Uint64
	localWakes           atomic.Uint64
	localCorrupt         atomic.Uint64
	localPeers           atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		PacketsIn: c.packetsIn.Load(), BytesIn: c.bytesIn.Load(),
		PacketsOut: c.packetsOut.Load(), BytesOut: c.bytesOut.Load(),
		ReadCalls: c.readCalls.Load(), WriteCalls: c.writeCalls.Load(),
		ReadErrors: c.readErrors.Load(), WriteErrors: c.writeErrors.Load(),
		Truncated: c.truncated.Load(), ICRCFilled: c.icrcFilled.Load(),
		SourceLookups: c.sourceLookups.Load(),
		GSOMessages:   c.gsoMessages.Load(), GSOSegments: c.gsoSegments.Load(),
		GSOFallbacks: c.gsoFallbacks.Load(),
		GROMessages:  c.groMessages.Load(), GROSegments: c.groSegments.Load(),
		Syscalls: c.syscalls.Load(), Gathered: c.gathered.Load(),
		EmptyReads: c.emptyReads.Load(), Waits: c.waits.Load(),
		SendWaits:         c.sendWaits.Load(),
		Asides:            c.asides.Load(),
		SourcePortSockets: c.portSockets.Load(), SourcePortFallbacks: c.portFallbacks.Load(),
		LocalIn: c.localIn.Load(), LocalOut: c.localOut.Load(), LocalDrops: c.localDrops.Load(),
		LocalFull: c.localFull.Load(), LocalWakes: c.localWakes.Load(),
		LocalCorrupt: c.localCorrupt.Load(), LocalPeers: c.localPeers.Load(),
	}
}

var (
	_ link.Endpoint = (*Endpoint)(nil)
	_ link.Capable  = (*Endpoint)(nil)
)

// interfaceMTU returns the MTU of the interface holding a, the loopback MTU
// for loopback addresses, or for a wildcard address the smallest MTU of the
// interfaces that are up (excluding loopback when others exist). It returns
// 0 when nothing matches.
func interfaceMTU(a netip.Addr) int {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0
	}
	if a.IsUnspecified() {
		best, lo := 0, 0
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 {
				continue
			}
			if ifc.Flags&net.FlagLoopback != 0 {
				lo = ifc.MTU
				continue
			}
			if best == 0 || ifc.MTU < best {
				best = ifc.MTU
			}
		}
		if best == 0 {
			return lo
		}
		return best
	}
	var loMTU, prefixMTU int
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 && loMTU == 0 {
			loMTU = ifc.MTU
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			ipn, ok := ad.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			if ip.Unmap() == a.WithZone("") {
				return ifc.MTU
			}
			if prefixMTU == 0 && ipn.Contains(a.AsSlice()) {
				prefixMTU = ifc.MTU
			}
		}
	}
	if a.IsLoopback() && loMTU != 0 {
		return loMTU
	}
	return prefixMTU
}
