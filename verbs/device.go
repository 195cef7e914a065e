package verbs

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/wire"
)

// Config tunes a device. The zero value is ready to use.
type Config struct {
	// Name is the device name (default "softroce0").
	Name string
	// Clock drives the retransmit and RNR timers (default: the real clock).
	// On the real clock (nil or clock.Real) a device keeps all its QPs'
	// timers in one heap served by one goroutine; any other clock.Clock (a
	// test's clocktest.Fake) gets the QPs' timers directly.
	Clock clock.Clock
	// Logger receives debug logs (nil: silent).
	Logger *slog.Logger
	// NoICRCCheck skips the receive-side ICRC check (failures are still
	// counted when checking is on).
	NoICRCCheck bool
	// NoZeroCopySend copies every payload into its packet buffer, also on
	// links that can send it in place from the MR
	// (link.Capabilities.GatherWrite; see zc.go). For comparisons.
	NoZeroCopySend bool
	// LateSGECheck checks a work request's SGEs when the device uses them,
	// as rxe does, instead of when it is posted: a post with an SGE outside
	// its MR (or with a bad lkey) succeeds, and the work request completes
	// with WCLocProtErr, moving the QP to the error state. The default
	// refuses such a post at once (EINVAL). The C library sets it, since C
	// programs written against rxe expect the completion.
	LateSGECheck bool
	// BusyPoll keeps the receive loop polling the link, without sleeping,
	// for this long after each received batch when the link runs the loop
	// itself (link/udp's ServeView): a reply that arrives meanwhile is
	// handled without a thread wake-up. It trades a processor for latency,
	// as perftest's pollers do; the latency tools set it. 0: off.
	BusyPoll time.Duration
	// InflightBudget caps the packets the device's RC QPs may have sent
	// and not seen acknowledged, all QPs together (budget.go): beyond it
	// QPs take turns, oldest waiter first (a QP with nothing in flight
	// may still send one packet; QPs with timeout 0 stay outside it). 0
	// sizes it from the link's receive buffer
	// (link.Capabilities.ReceiveBuffer; the peer's is taken to be alike),
	// at most 2048; negative turns it off (each QP then has its whole
	// window).
	InflightBudget int
	// MAC is the hardware address the link-local default GID (index 0) is
	// derived from; zero derives one from the bound address.
	MAC [6]byte
	// MaxMR caps the number of registered MRs (0: rxe's 2^19-1; larger
	// values are lowered to it). Registrations beyond it fail with ENOMEM.
	MaxMR int
	// MaxMRSize caps one MR's length in bytes (0: no limit but the
	// address space, rxe's max_mr_size 2^64-1). Larger registrations fail
	// with EINVAL. QueryDevice reports both limits.
	MaxMRSize uint64
	// Memory is the memory-provider registry PD.RegMem and
	// PD.RegDmabufMR resolve memory with (see package mem). Nil gives the
	// device its own registry with the Go heap provider ("heap", the
	// catch-all for ordinary memory) and the file-descriptor provider ("fd").
	Memory *mem.Registry

	// hooks are set by package verbs' own tests only (nil otherwise).
	hooks *testHooks
}

// testHooks let package verbs' tests watch internal events of a device
// (Config.hooks); a nil *testHooks watches nothing.
type testHooks struct {
	// budgetWait sees each QP as it starts waiting for a turn in the send
	// budget (its lock held).
	budgetWait func(qp *QP)
	// noGapFill makes the requester ask again for lost READ responses only
	// as rxe's does: from the first missing one to the end, on its timer
	// (readgap.go).
	noGapFill bool
}

// Stats are a device's counters, updated atomically.
type Stats struct {
	RxPackets, RxBytes atomic.Uint64
	RxPolled           atomic.Uint64 // datagrams received by PollLink (on a polling caller's thread), part of RxPackets
	TxPackets, TxBytes atomic.Uint64
	TxErrors           atomic.Uint64 // packets the link failed to send
	Retransmits        atomic.Uint64 // retry sequences started (timeout, NAK, lost response)
	RetryTimeouts      atomic.Uint64 // retransmit timer expiries
	ReadReRequests     atomic.Uint64 // READ requests for the missing part of a READ whose later responses arrived (readgap.go)
	LossProbes         atomic.Uint64 // loss probes sent after a silence well short of the retransmit timeout (recover.go)
	ProbeRewinds       atomic.Uint64 // go-back-N retries a probe's answer started (packets after it were lost)
	ProbesDeferred     atomic.Uint64 // loss probes held back for probeSettle: their timer fired late, or datagrams waited unread in the link (the silence was this host's)
	ReorderRewinds     atomic.Uint64 // go-back-N retries a NAK during a retry started once its reordering window passed
	RetryDeferred      atomic.Uint64 // timer expiries not retried: the peer had answered (no progress) in that period, or the QP waited for its send-budget turn with nothing unacknowledged
	RNRNAKsSent        atomic.Uint64
	RNRNAKsRcvd        atomic.Uint64
	SeqNAKsSent        atomic.Uint64
	SeqNAKsRcvd        atomic.Uint64
	SeqNAKsIgnored     atomic.Uint64 // sequence-error NAKs received while a retry was under way (rxe ignores them too)
	NAKsSent           atomic.Uint64 // other NAKs (0x61-0x63)
	NAKsRcvd           atomic.Uint64
	DupRequests        atomic.Uint64 // duplicate requests answered
	ReadPaceCuts       atomic.Uint64 // losses the READ response pacing slowed down for: a duplicate READ asked again for responses already sent (resp_pace.go)
	ReadDupCrossed     atomic.Uint64 // duplicate READs that crossed the responses a burst after a quiet sent them (resp_pace.go): replayed, not taken as a loss
	ReadPaced          atomic.Uint64 // times READ responses were left for a later pacing tick or window
	ZeroCopyPackets    atomic.Uint64 // packets sent with their payload in place, not copied into a buffer (zc.go)
	ACKsBehindReply    atomic.Uint64 // deferred ACKs a post's reply went ahead of, to leave together (tx.go)
	BudgetWaits        atomic.Uint64 // times an RC QP waited for the device's send budget (budget.go)
	InflightMax        atomic.Uint64 // most packets RC QPs had in flight at once, all together (approximate high-water mark)
	BadInvalidates     atomic.Uint64 // SEND_WITH_INVALIDATE of a key that may not be invalidated remotely
	ICRCErrors         atomic.Uint64
	MRs                atomic.Uint64 // registered MRs now
	MWs                atomic.Uint64 // allocated memory windows now

	// Drops by reason.
	DropMalformed   atomic.Uint64 // wire.Packet.Parse failed
	DropNoQP        atomic.Uint64 // unknown destination QPN (or QP0)
	DropQPState     atomic.Uint64 // QP not ready for the packet (docs/protocol.md §5.9: receive from RTR, send from RTS)
	DropTransport   atomic.Uint64 // opcode's transport differs from the QP type
	DropPKey        atomic.Uint64
	DropQKey        atomic.Uint64 // UD Q_Key mismatch (docs/protocol.md §6.1)
	DropSrcAddr     atomic.Uint64 // RC/UC packet not from the QP's peer (docs/protocol.md §9)
	DropNoRecv      atomic.Uint64 // UD packet with no receive WQE
	DropLength      atomic.Uint64 // UD packet too large for the receive WQE or the MTU
	DropResponse    atomic.Uint64 // stray, duplicate or out-of-order responses
	DropBadResponse atomic.Uint64 // responses answering nothing sent or outstanding, or of the wrong kind (forged?)
	DropDuplicate   atomic.Uint64 // duplicates that need no answer
	DropOutOfSeq    atomic.Uint64 // requests after a PSN gap (NAK sent once)
	DropUCResync    atomic.Uint64 // UC packets dropped while resynchronising (docs/protocol.md §6.2)
	DropEvents      atomic.Uint64 // async or CQ events lost because the consumer lagged
	DropUnsupported atomic.Uint64 // CNP and other ignored packets
	// DropMcastLoopback counts the device's own multicast datagrams not
	// delivered to its QPs: their sender was made with
	// QPCreateBlockSelfMcastLB.
	DropMcastLoopback atomic.Uint64
}

// Device is a software RDMA device on one link endpoint (struct ibv_context).
type Device struct {
	ep    link.Endpoint
	cfg   Config
	clock clock.Clock // drives the QP timers: timers, or the configured clock
	timer *timerHeap  // the QP timers when the clock is the real one
	log   *slog.Logger
	local netip.AddrPort
	gids  []GID
	mtu   wire.MTU // active MTU
	stats Stats

	mu      sync.Mutex // PD numbers, lifecycle
	nextPD  uint32
	closed  atomic.Bool
	done    chan struct{}
	wg      sync.WaitGroup
	tx      txPath     // the transmit path all QPs share (tx.go)
	budget  sendBudget // packets RC QPs may have in flight, all together (budget.go)
	zc      bool       // payloads of one MR are sent in place (zc.go)
	atomMu  sync.Mutex // serialises remote atomics on this device
	rx      rxState    // the receive loop's (recv.go)
	rxp     rxPoller   // PollLink's (recv.go)
	events  chan AsyncEvent
	keys    keyTables // the MR and MW tables (mr.go, mw.go)
	memOnce sync.Once
	memReg  *mem.Registry
	qpMu    sync.RWMutex         // serialises QP table writers; guards mcast
	qps     *qpTable             // lookups are lock-free
	mcast   map[netip.Addr][]*QP // multicast groups (under qpMu)
	mcl     mcastLinks           // the groups the link joined for them (mcast.go)

	// The link's interface is down (portDown); its first report came
	// (portKnown). linkState sets them.
	portDown, portKnown atomic.Bool
}

// Open starts a device on a link endpoint (a UDP socket from link/udp or an
// in-memory pipe end from link/pipe). The device owns ep and closes it on
// Close. cfg may be nil.
func Open(ep link.Endpoint, cfg *Config) (*Device, error) {
	if ep == nil {
		return nil, newErr("open device", "nil link endpoint", syscall.EINVAL)
	}
	d := &Device{ep: ep, done: make(chan struct{}), events: make(chan AsyncEvent, eventQueue),
		qps: newQPTable(firstQPN, maxQPN)}
	if cfg != nil {
		d.cfg = *cfg
	}
	if d.cfg.Name == "" {
		d.cfg.Name = "softroce0"
	}
	if d.cfg.Clock == nil || d.cfg.Clock == (clock.Real{}) {
		// One heap and one goroutine for all the QPs' timers.
		d.timer = newTimerHeap()
		d.clock = d.timer
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.timer.run(d.done)
		}()
	} else {
		d.clock = d.cfg.Clock
	}
	d.log = d.cfg.Logger
	// flushSoon's timer, made stopped here so that its callers (the
	// receive loop, posts) only Reset it.
	d.tx.flushTimer = d.clock.AfterFunc(pollFlushDelay, d.flushTimerFired)
	d.tx.flushTimer.Stop()
	d.zc = link.CapabilitiesOf(ep).GatherWrite && !d.cfg.NoZeroCopySend && !raceEnabled
	d.rxp.lp, _ = ep.(linkPoller)
	d.local = ep.LocalAddr()
	m := ep.MTU()
	if m <= 0 {
		m = 1500
	}
	d.mtu = wire.ActiveMTU(m)
	if d.mtu == 0 {
		d.mtu = wire.MTU256
	}
	d.budget.init(d.cfg.InflightBudget, ep, d.mtu)
	d.budget.warnSmall(d.log, d.cfg.InflightBudget, ep)
	d.gids = makeGIDs(d.local.Addr(), d.cfg.MAC)
	d.wg.Add(1)
	go d.rxLoop()
	if w, ok := ep.(link.StateWatcher); ok {
		if err := w.WatchState(d.linkState); err != nil && !errors.Is(err, link.ErrNoState) && d.log != nil {
			d.log.Warn("verbs: the port will not follow its interface's state", "err", err)
		}
	}
	if !d.portDown.Load() {
		d.event(AsyncEvent{Type: EventPortActive, Port: 1})
	}
	return d, nil
}

// inputPending reports datagrams waiting unread in the link (link.Pender;
// false for a link that cannot tell).
func (d *Device) inputPending() bool {
	p, ok := d.ep.(link.Pender)
	return ok && p.Pending()
}

// linkState follows the link's interface (link.StateWatcher), as rxe
// follows its netdev: while the interface is down or has no carrier the
// port is DOWN and a port error event is raised; when it is back, a port
// active event. Traffic is left to the kernel meanwhile (sends to a down
// interface fail and RC retries run out as over a lost path).
//
// The first report is the state at open (link/udp gives it before
// WatchState returns): it raises no event of its own, and a device opened
// on a down interface raises no port active event either.
func (d *Device) linkState(up bool) {
	if !d.portKnown.Swap(true) {
		d.portDown.Store(!up)
		return
	}
	if d.closed.Load() || d.portDown.Swap(!up) == !up {
		return
	}
	ev := EventPortActive
	if !up {
		ev = EventPortErr
	}
	d.event(AsyncEvent{Type: ev, Port: 1})
	if d.log != nil {
		d.log.Info("verbs: port state follows the interface", "device", d.Name(), "up", up)
	}
}

// makeGIDs builds the GID table: index 0 the link-local default GID from
// the MAC's EUI-64 (docs/protocol.md §9), index 1 the bound address (IPv4-mapped for IPv4).
func makeGIDs(a netip.Addr, mac [6]byte) []GID {
	if mac == ([6]byte{}) {
		// A locally administered MAC derived from the address.
		b := a.Unmap().AsSlice()
		mac = [6]byte{0x02, 0x00}
		copy(mac[2:], b[len(b)-4:])
	}
	var ll GID
	ll[0], ll[1] = 0xfe, 0x80
	ll[8], ll[9], ll[10], ll[11], ll[12] = mac[0]^0x02, mac[1], mac[2], 0xff, 0xfe
	ll[13], ll[14], ll[15] = mac[3], mac[4], mac[5]
	gids := []GID{ll}
	if a.IsValid() && !a.IsUnspecified() {
		gids = append(gids, GIDFromAddr(a))
	}
	return gids
}

// Name returns the device name.
func (d *Device) Name() string { return d.cfg.Name }

// LocalAddr returns the link's local address.
func (d *Device) LocalAddr() netip.AddrPort { return d.local }

// Stats returns the device's live counters.
func (d *Device) Stats() *Stats { return &d.stats }

// Each calls f with the name and value of every counter, in declaration
// order. It is for reports (tools' SOFTROCE_STATS, the C library's
// SOFTROCE_DEBUG), not for hot paths.
func (s *Stats) Each(f func(name string, v uint64)) {
	v := reflect.ValueOf(s).Elem()
	for i := 0; i < v.NumField(); i++ {
		if c, ok := v.Field(i).Addr().Interface().(*atomic.Uint64); ok {
			f(v.Type().Field(i).Name, c.Load())
		}
	}
}

// Clock returns the clock the device was configured with (clock.Real by
// default). The device runs its own QP timers on one per-device heap
// rather than on clock.Real's runtime timers.
func (d *Device) Clock() clock.Clock {
	if d.cfg.Clock == nil {
		return clock.Real{}
	}
	return d.cfg.Clock
}

// QueryDevice returns the device attributes (ibv_query_device), rxe's limits (docs/protocol.md §10.1).
func (d *Device) QueryDevice() DeviceAttr {
	g := nodeGUID(d.gids[0])
	return DeviceAttr{
		FWVer: "0.0.0", NodeGUID: g, SysImageGUID: g, MaxMRSize: d.maxMRSize(), PageSizeCap: pageSizeCap,
		VendorID: vendorID, MaxQP: maxQP, MaxQPWR: maxQPWR, DeviceCapFlags: deviceCapFlags,
		MaxSGE: MaxSGE, MaxSGERd: MaxSGE, MaxCQ: maxCQ, MaxCQE: maxCQE, MaxMR: d.maxMR(), MaxPD: maxPD,
		MaxQPRdAtom: maxRdAtom, MaxResRdAtom: maxResRdAtom, MaxQPInitRdAtom: maxRdAtom, AtomicCap: 1,
		MaxMcastGrp: maxMcastGrp, MaxMcastQPAttach: maxMcastQPs, MaxTotalMcastQPAttach: maxTotalMcastQPs,
		MaxAH: maxAH, MaxSRQ: maxSRQ, MaxSRQWR: maxQPWR, MaxSRQSGE: maxSRQSGE, MaxPKeys: maxPKeys,
		LocalCAAckDelay: localCAAckDelay, PhysPortCnt: 1, MaxInlineData: MaxInline, MaxMsgSz: maxMsgSize, MaxMW: MaxMW,
	}
}

// NodeGUIDFor returns the node GUID a device bound to address a, with
// hardware address mac (zero: derived from a), reports in QueryDevice:
// for listing a device before it is opened (ibv_get_device_guid).
func NodeGUIDFor(a netip.Addr, mac [6]byte) uint64 { return nodeGUID(makeGIDs(a, mac)[0]) }

func nodeGUID(ll GID) uint64 {
	var g uint64
	for _, b := range ll[8:] {
		g = g<<8 | uint64(b)
	}
	return g
}

// QueryPort returns port 1's attributes (ibv_query_port).
func (d *Device) QueryPort(port uint8) (PortAttr, error) {
	if port != 1 {
		return PortAttr{}, newErr("query port", "softroce devices have one port, number 1", syscall.EINVAL)
	}
	// Physical state: 5 link up, 3 disabled (rxe's values for its netdev).
	st, phys := PortActive, uint8(5)
	if d.closed.Load() || d.portDown.Load() {
		st, phys = PortDown, 3
	}
	mbps := 0
	if r, ok := d.ep.(link.SpeedReporter); ok && !d.closed.Load() {
		mbps = r.LinkSpeed()
	}
	speed, width := ibSpeed(mbps)
	return PortAttr{State: st, MaxMTU: wire.MTU4096, ActiveMTU: d.mtu, GIDTblLen: 1024,
		PortCapFlags: portCapCMSup,
		MaxMsgSz:     maxMsgSize, PKeyTblLen: 1, LinkLayer: 2, ActiveSpeed: speed, ActiveWidth: width, PhysState: phys}, nil
}

// ibSpeed maps an Ethernet link speed in Mb/s to the InfiniBand speed and
// width a RoCE port reports, as the kernel's ib_get_eth_speed does for rxe
// (an unknown speed, 0, counts as 1000). Values are enum ibv_port_attr's:
// speed SDR 1, DDR 2, FDR10 8, EDR 32; width 1X 1, 4X 2.
func ibSpeed(mbps int) (speed, width uint8) {
	switch {
	case mbps <= 1000:
		return 1, 1 // 2.5 Gb/s: SDR 1X
	case mbps <= 10000:
		return 8, 1 // 10 Gb/s: FDR10 1X
	case mbps <= 20000:
		return 2, 2 // 20 Gb/s: DDR 4X
	case mbps <= 25000:
		return 32, 1 // 25 Gb/s: EDR 1X
	case mbps <= 40000:
		return 8, 2 // 40 Gb/s: FDR10 4X
	}
	return 32, 2 // 100 Gb/s: EDR 4X
}

// QueryGID returns GID index i of port 1 (ibv_query_gid).
func (d *Device) QueryGID(port uint8, i int) (GID, error) {
	if port != 1 || i < 0 || i >= 1024 {
		return GID{}, newErr("query gid", "port must be 1 and index 0..1023", syscall.EINVAL)
	}
	if i >= len(d.gids) {
		return GID{}, nil
	}
	return d.gids[i], nil
}

// GIDs returns the populated GID table entries.
func (d *Device) GIDs() []GID { return append([]GID(nil), d.gids...) }

// QueryPKey returns P_Key index i (only index 0, 0xFFFF).
func (d *Device) QueryPKey(port uint8, i int) (uint16, error) {
	if port != 1 || i != 0 {
		return 0, newErr("query pkey", "port must be 1 and index 0", syscall.EINVAL)
	}
	return wire.DefaultPKey, nil
}

// ActiveMTU returns the port's active MTU.
func (d *Device) ActiveMTU() wire.MTU { return d.mtu }

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	d.mu.Lock()
	d.nextPD++
	h := d.nextPD
	d.mu.Unlock()
	return &PD{dev: d, handle: h}, nil
}

// GetAsyncEvent waits for the next asynchronous event (ibv_get_async_event).
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	select {
	case ev := <-d.events:
		return ev, nil
	case <-ctx.Done():
		return AsyncEvent{}, ctx.Err()
	case <-d.done:
		select {
		case ev := <-d.events:
			return ev, nil
		default:
		}
		return AsyncEvent{}, ErrClosed
	}
}

// AsyncEvents returns the channel asynchronous events arrive on.
func (d *Device) AsyncEvents() <-chan AsyncEvent { return d.events }

func (d *Device) event(ev AsyncEvent) {
	select {
	case d.events <- ev:
	default:
		d.stats.DropEvents.Add(1)
	}
}

// Close stops the device: all QPs go to ERR (flushing their work), the
// receive loop exits and the link is closed. It waits for the device's
// goroutines.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.event(AsyncEvent{Type: EventPortErr, Port: 1})
	d.qpMu.Lock()
	var qps []*QP
	d.qps.each(func(qp *QP) { qps = append(qps, qp) })
	d.qpMu.Unlock()
	for _, qp := range qps {
		qp.mu.Lock()
		qp.stopTimers()
		qp.mu.Unlock()
	}
	close(d.done)
	// What the receive loop is handling (and the ACKs it owes) goes out
	// before the link closes; batches after this one are dropped (handle).
	// The link closes without rx.mu held: link/udp's Close waits for a
	// batch being handled inside its read (ServeView), which needs rx.mu.
	d.rx.mu.Lock()
	d.kick()
	d.rx.mu.Unlock()
	err := d.ep.Close()
	d.closeGroups()
	d.wg.Wait()
	// Wait for callbacks of a configured clock that may still be running
	// (the device's own timer goroutine has exited).
	for _, qp := range qps {
		qp.mu.Lock()
		qp.stopTimers()
		qp.mu.Unlock()
	}
	d.releaseMemory()
	return err
}

// Done is closed when the device closes.
func (d *Device) Done() <-chan struct{} { return d.done }

// AttachMcast attaches the UD QP to the multicast group gid (ibv_attach_mcast):
// datagrams sent to QPN 0xFFFFFF and the group's address reach it. The
// first QP of the device to attach makes the link join the IP group
// (link.GroupJoiner: link/udp joins on the interface of its address); lid
// is ignored (RoCE has no LIDs).
func (qp *QP) AttachMcast(gid GID, lid uint16) error {
	a := gid.Addr()
	if qp.typ != QPTypeUD || !a.IsMulticast() {
		return newErr("attach mcast", "only UD QPs attach, to a multicast GID", syscall.EINVAL)
	}
	d := qp.dev
	if d.closed.Load() {
		return ErrClosed
	}
	d.mcl.mu.Lock()
	defer d.mcl.mu.Unlock()
	d.qpMu.RLock()
	l := d.mcast[a]
	d.qpMu.RUnlock()
	for _, q := range l {
		if q == qp {
			return nil
		}
	}
	if len(l) >= maxMcastQPs {
		return newErr("attach mcast", "group already has "+utoa(maxMcastQPs)+" QPs (max_mcast_qp_attach)", syscall.ENOMEM)
	}
	qp.mu.Lock()
	dead := qp.dead
	qp.mu.Unlock()
	if dead {
		return newErr("attach mcast", "QP destroyed", syscall.EINVAL)
	}
	if err := d.linkJoin(a); err != nil {
		return err
	}
	d.qpMu.Lock()
	if d.mcast == nil {
		d.mcast = map[netip.Addr][]*QP{}
	}
	d.mcast[a] = append(d.mcast[a], qp)
	d.qpMu.Unlock()
	return nil
}

// DetachMcast detaches the QP from the group (ibv_detach_mcast); the last
// QP of the device to detach makes the link leave the group.
func (qp *QP) DetachMcast(gid GID, lid uint16) error {
	a := gid.Addr()
	d := qp.dev
	d.mcl.mu.Lock()
	defer d.mcl.mu.Unlock()
	d.qpMu.Lock()
	l := d.mcast[a]
	for i, q := range l {
		if q == qp {
			d.mcast[a] = append(l[:i:i], l[i+1:]...)
			if len(d.mcast[a]) == 0 {
				delete(d.mcast, a)
			}
			d.qpMu.Unlock()
			d.linkLeave(a)
			return nil
		}
	}
	d.qpMu.Unlock()
	return newErr("detach mcast", "QP is not attached to that group", syscall.EINVAL)
}

// addQP assigns a QPN (or the requested one) and inserts qp, in O(1).
func (d *Device) addQP(qp *QP, want uint32) error {
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	if d.closed.Load() {
		return ErrClosed
	}
	if want != 0 {
		if d.qps.get(want) != nil {
			return newErr("create qp", "QPN already in use (one GSI QP per device)", syscall.EBUSY)
		}
		qp.qpn = want
	} else {
		n, ok := d.qps.alloc()
		if !ok {
			return newErr("create qp", "no free QP numbers: destroy QPs first", syscall.ENOMEM)
		}
		qp.qpn = n
	}
	d.qps.put(qp.qpn, qp)
	return nil
}

func (d *Device) removeQP(qp *QP) {
	if qp.typ != QPTypeUD { // only UD QPs join multicast groups
		d.qpMu.Lock()
		d.qps.del(qp.qpn, qp)
		d.qpMu.Unlock()
		return
	}
	d.mcl.mu.Lock()
	defer d.mcl.mu.Unlock()
	d.qpMu.Lock()
	d.qps.del(qp.qpn, qp)
	var left []netip.Addr
	for g, l := range d.mcast {
		for i, q := range l {
			if q == qp {
				d.mcast[g] = append(l[:i:i], l[i+1:]...)
				break
			}
		}
		if len(d.mcast[g]) == 0 {
			delete(d.mcast, g)
			left = append(left, g)
		}
	}
	d.qpMu.Unlock()
	for _, g := range left {
		d.linkLeave(g)
	}
}

// AH is an address handle (ibv_ah): a resolved destination for UD sends.
type AH struct {
	pd   *PD
	attr AHAttr
	dst  netip.AddrPort
}

// CreateAH creates an address handle (ibv_create_ah). RoCE needs a GRH.
func (pd *PD) CreateAH(attr *AHAttr) (*AH, error) {
	if attr == nil || !attr.IsGlobal {
		return nil, newErr("create ah", "RoCE address handles need a GRH (is_global=1 with a dgid)", syscall.EINVAL)
	}
	if int(attr.GRH.SGIDIndex) >= len(pd.dev.gids) {
		return nil, newErr("create ah", "sgid_index names an empty GID table entry", syscall.EINVAL)
	}
	if attr.PortNum > 1 {
		return nil, newErr("create ah", "port must be 1", syscall.EINVAL)
	}
	dst, err := avDest(attr)
	if err != nil {
		return nil, err
	}
	if err := pd.ref(); err != nil {
		return nil, err
	}
	return &AH{pd: pd, attr: *attr, dst: dst}, nil
}

func avDest(attr *AHAttr) (netip.AddrPort, error) {
	a := attr.GRH.DGID.Addr()
	if !a.IsValid() || a.IsUnspecified() {
		return netip.AddrPort{}, newErr("address vector", "dgid is zero: RoCE needs the peer's GID", syscall.EINVAL)
	}
	port := attr.DstPort
	if port == 0 {
		port = wire.UDPPort
	}
	return netip.AddrPortFrom(a, port), nil
}

// Attr returns the AH's address vector.
func (ah *AH) Attr() AHAttr { return ah.attr }

// Destroy frees the AH (ibv_destroy_ah).
func (ah *AH) Destroy() error {
	if ah.pd == nil {
		return newErr("destroy ah", "already destroyed", syscall.EINVAL)
	}
	ah.pd.unref()
	ah.pd = nil
	return nil
}
