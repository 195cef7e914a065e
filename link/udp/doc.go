// Package udp is the production link of softroce: RoCEv2 datagrams over a
// real UDP socket (port 4791 by default), moved in batches with recvmmsg and
// sendmmsg so that one system call carries up to BatchSize datagrams.
//
// The socket is deliberately left unconnected and has path-MTU discovery set
// to "do" (IP_MTU_DISCOVER = IP_PMTUDISC_DO, IPv6 likewise). Linux then sends
// every IPv4 datagram with DF set and Identification 0, and since the ICRC
// covers the Identification, WriteBatch can compute each packet's ICRC for
// the header it will really carry (see package wire and
// docs/protocol.md §4.2; TestRawCapture checks it on lo). A
// connected socket, or the default PMTU setting, makes the kernel write
// unpredictable IDs and kernel rdma_rxe would silently drop the packets.
// As a consequence a datagram larger than the path MTU is refused with
// EMSGSIZE instead of being fragmented: RoCE never relies on fragmentation.
//
// Bind a device to the IP address of its GID (for example 192.0.2.10:4791).
// Several endpoints may share port 4791 on different addresses of one host
// (127.0.0.1 and 127.0.0.2, say). An endpoint bound to a wildcard address
// (0.0.0.0 or ::) learns each datagram's local address from IP_PKTINFO and,
// when sending, uses Packet.Src as the source address if it is set, or else
// the address the routing table picks for the destination (looked up once
// per destination and cached); the ICRC is computed for that source.
//
// IPv6 link-local addresses work with zones: bind to fe80::1%eth0; a
// link-local sender's Src carries the zone of the interface it came in on,
// so replies to Src's address go out the right way; a link-local destination without
// a zone uses the bound address's. Zone names are resolved (and cached) in
// the network namespace of the calling thread.
//
// On read the link reports the IPv4 TOS / IPv6 traffic class (so ECN marks
// are visible) but not the IP header itself: Packet.IPHdrLen is 0, and the
// receiver checks the ICRC with wire.VerifyICRCAddrs. On write, Packet.TOS
// and Packet.TTL, when not zero, are sent as per-datagram ancillary data.
//
// Segmentation offload is used when the kernel has it (probed at Open;
// Config.NoGSO and Config.NoGRO turn it off). On send (UDP GSO), a run of
// consecutive packets to one destination with equal sizes (the last may be
// shorter) goes to the kernel as one buffer, gathered from the callers'
// buffers without a copy, that the kernel cuts into datagrams. A packet with
// Packet.Data (link.Capabilities.GatherWrite) is gathered from three
// iovecs, the headers, the payload in place and the pad with the ICRC, whose
// ICRC is computed over the three without a copy. Linux numbers
// the IPv4 Identification of such segments 0, 1, 2, ... (checked on the wire
// by this package's tests through a TUN device), so the ICRC of the i-th
// packet of a run is computed for ID i. If a GSO send fails, its packets are
// sent again one per buffer, and after EIO GSO is turned off. A NIC that
// segments in hardware (USO) is expected to number IDs the same way, as it
// does for TCP; if a peer drops GSO traffic, set Config.NoGSO. On receive
// (UDP GRO), the kernel may hand over a run of datagrams of one flow as one
// buffer; the endpoint receives into its own 64 KiB buffers and copies each
// datagram into a caller's packet, keeping what does not fit for the next
// ReadBatch. ReadBatchView skips that copy: it points the packets into the
// endpoint's buffers, valid until the next read. Without GRO, datagrams land
// directly in the callers' buffers. ServeView runs a whole receive loop (the
// engine's) on those views inside one wait on the socket, so that a read
// that drained the socket is followed by a wait rather than an empty read;
// ServeSteps is ServeView with a function called after each step, once the
// step has released the endpoint (where the engine yields the processor).
//
// In steady state neither ReadBatch nor WriteBatch allocates.
//
// Datagrams leave from a second socket, bound to the same address with a
// port the kernel chooses (Endpoint.SendAddr), with the same unconnected
// IP_PMTUDISC_DO setting, that Go's netpoller never watches: sends on it
// are raw sendmmsg calls, and a full send buffer is waited out in poll(2)
// on the sending thread (Stats.SendWaits). The netpoller registers a socket
// for writability as well as readability, edge-triggered, so on the bound
// socket every sent buffer the kernel freed woke a thread parked in the
// netpoller whenever the process had an idle processor (GOMAXPROCS above
// 1): a 1 MiB RDMA WRITE stream between two processes with GOMAXPROCS=2 ran
// about a third faster with the send socket, and with GOMAXPROCS=1 no
// slower (docs/speed.md, "Latency, busy polling and processors").
// RoCEv2 leaves the UDP source port to the sender (rxe derives one per QP)
// and every receiver answers to port 4791, so nothing depends on it;
// Config.SendFromBound sends from the bound socket and its port instead.
// Nothing reads a send socket, so a socket filter (classic BPF, no
// privilege needed) drops whatever is sent to its port, rather than let it
// fill the socket's receive buffer for the endpoint's life.
// Config.SourcePorts sends each datagram from the port its link.Packet.Src
// names (the engine's per-QP port, rxe's rule), for switches that spread
// flows over paths by the 5-tuple (ECMP): one unwatched send socket per
// port, opened on the port's first datagram, up to SourcePorts of them;
// a batch then takes one sendmmsg per run of datagrams with one port.
// WriteBatch sets each packet's Src to the address it left from
// (link.Capabilities.ReportsSource), so that taps record what the wire
// carries.
//
// The bound socket is not registered with Go's netpoller itself (unless
// Config.Netpoll): a reader waits on an epoll instance of the socket's own,
// which the netpoller watches, with the socket registered there
// edge-triggered. While a caller polls the socket (Endpoint.Poll, as the C
// library's ibv_poll_cq does), ServeView takes the socket out of that
// instance and sleeps in short steps until the poller goes quiet, so that
// datagrams the poller takes wake no thread of the runtime (a registered
// socket wakes one for every datagram that arrives; docs/speed.md, "UCX and
// Open MPI over the C library").
//
// recvmmsg and sendmmsg never wait (MSG_DONTWAIT; waiting for the socket is
// the netpoller's, through the endpoint's RawConn), so they are made as
// raw system calls, outside the runtime's system-call bookkeeping. Through
// that bookkeeping, the first call after the process had gone idle woke the
// runtime's parked monitor thread, which then polled: a 1 MiB RDMA WRITE
// stream between two processes spent about a fifth of its system calls on
// those futex wake-ups and nanosleeps; as raw calls it makes none of them,
// runs faster and costs less CPU per MiB (docs/speed.md, "The raw UDP
// ceiling and raw system calls").
//
// Multicast (link.GroupJoiner): JoinGroup joins an IP group on the
// interface of the endpoint's address and returns a receive-only endpoint
// on a socket of its own, bound to the group's address and the endpoint's
// port with SO_REUSEADDR, so that every endpoint of the host that joins
// gets its own copy of each datagram, and the endpoint's own socket gets
// none. Binding the group's address (not the wildcard, as the net package
// would) keeps unicast datagrams to the port off it. Sends to a group
// leave on the interface of the bound address (IP_MULTICAST_IF,
// IPV6_MULTICAST_IF), and reach the host's own members (multicast loop).
// Neither needs privilege, and the loopback interface needs no MULTICAST
// flag for IPv4.
//
// WatchState (link.StateWatcher) reports the bound interface's state, up
// and running or not, through an rtnetlink socket opened with the endpoint
// (in its network namespace; none for loopback and wildcard addresses): the
// device's port follows it, as rxe's follows its netdev. LinkSpeed
// (link.SpeedReporter) is the interface's ethtool speed, asked on the
// endpoint's own socket.
//
// With Config.Local, two endpoints of one user in one network namespace
// exchange datagrams through shared memory instead of the kernel's
// loopback (same-host lanes, local_linux.go): an inbox file in /dev/shm per
// endpoint, one single-producer ring per sender, read before the socket in
// every read path (by the view readers in place, without a copy), and an
// empty datagram to wake a reader that sleeps (one until it runs, however
// many senders write meanwhile). Their datagrams carry no
// ICRC (link.Packet.Local): nothing on the way can flip a bit.
//
// io_uring was measured against recvmmsg/sendmmsg and not adopted: it made
// half the system calls but cost more CPU per MiB and moved fewer bytes
// (numbers and reasons in docs/speed.md).
//
// The package works on Linux only; elsewhere Open returns an error wrapping
// errors.ErrUnsupported.
package udp
