package cm

import (
	"context"
	"log/slog"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/verbs"
	"github.com/softroce/softroce/wire"
)

// Config tunes an Agent. The zero value gives Linux's timing.
type Config struct {
	// Timeout is how long the CM waits for an answer (REP, RTU, DREP,
	// SIDR_REP) before it resends a MAD. Default 6.144 s, Linux ib_cm's wait
	// over RoCE: the CM response timeout (rdma_cm's CMA_CM_RESPONSE_TIMEOUT
	// 20, 4096 ms as ib_cm converts it) plus twice the packet lifetime (18,
	// 1024 ms); kernel rxe resends an unanswered REQ every 6.1-6.4 s. A
	// nonzero Timeout is also announced in REQs as the CM response timeout
	// (its log2 in 4.096 µs units); the default announces 20, as rdma_cm.
	// With the default, a passive side waits for the RTU as ib_cm does: the
	// REQ's local CM response timeout plus 256 ms (4.35 s for rdma_cm
	// peers), resending its REP at most the REQ's max CM retries times.
	Timeout time.Duration
	// MaxRetries is how many times a MAD is resent before the CM gives up
	// (UNREACHABLE, or DISCONNECTED for a DREQ). Default 15
	// (CMA_MAX_CM_RETRIES): an unanswered REQ is sent 16 times and gives
	// UNREACHABLE (ETIMEDOUT) after 16 × Timeout ≈ 98 s, as with Linux
	// rdma_cm. Negative means 0.
	MaxRetries int
	// TimeWait is how long a closed connection's IDs stay known, to answer
	// duplicates, before TIMEWAIT_EXIT. Default: Timeout.
	TimeWait time.Duration
	// MRADelay is how long the application may take to accept or reject a
	// connection request before the CM sends an MRA asking the peer to wait.
	// Default: Timeout/2.
	MRADelay time.Duration
	// ServiceTimeout is the MRA service timeout (log2 of 4.096 µs units)
	// announced to the peer. Default 24 (≈ 69 s), rdma_cm's CMA_CM_MRA_SETTING.
	ServiceTimeout uint8
	// RecvDepth is the number of receive buffers of the GSI QP (default
	// 4096, 1.2 MiB): MADs that find none are dropped and cost their
	// sender a 6 s resend. A burst of requests as large as the default
	// listen backlog (1024) must fit, with their RTUs, while the agent
	// works through them, and the agent's goroutine, unlike the kernel's
	// MAD handling, can be descheduled for milliseconds on a busy host
	// (stock cmtime -c 1000 on two cores: up to 1,235 MADs waited at once;
	// the kernel's ib_mad queues 512 per QP behind the network stack's own
	// backlog).
	RecvDepth int
	// Resolve, if set, checks that dst can be reached from the device's
	// address src, as rdma_resolve_addr's neighbour (ARP/ND) resolution
	// does; ID.ResolveAddr waits for it up to its timeout and reports
	// ADDR_ERROR with the errno it returns (ETIMEDOUT when ctx ends). Nil:
	// every address of the device's family resolves at once.
	Resolve func(ctx context.Context, src, dst netip.Addr) error
	// Resolved, if set with Resolve, reports whether dst needs no lookup
	// (Resolve would return nil at once: a local or loopback address, or a
	// neighbour entry already complete). ID.ResolveAddr then posts
	// ADDR_RESOLVED before it returns, as it does without Resolve, instead
	// of running Resolve on a goroutine of its own: one thread hand-off
	// less for the event (stock cmtime through the C library: 33-43 µs per
	// resolution awaited, against under 1 µs).
	Resolved func(src, dst netip.Addr) bool
	// Logger receives debug logs of every MAD (nil: silent).
	Logger *slog.Logger

	// pollOnly (tests): the agent's goroutine does not run, and received
	// MADs are handled only when Poll is called.
	pollOnly bool
}

func (c *Config) normalize() {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 15
	} else if c.MaxRetries < 0 {
		c.MaxRetries = 0
	}
	if c.TimeWait <= 0 {
		c.TimeWait = c.Timeout
	}
	if c.MRADelay <= 0 {
		c.MRADelay = c.Timeout / 2
	}
	if c.ServiceTimeout == 0 {
		c.ServiceTimeout = 24
	}
	if c.ServiceTimeout > 31 {
		c.ServiceTimeout = 31
	}
	if c.RecvDepth <= 0 {
		c.RecvDepth = 4096
	}
}

// DefaultTimeout is Config.Timeout's default: ib_cm's cm_convert_to_ms of
// the CM response timeout 20 (4096 ms) plus twice that of the RoCE packet
// lifetime 18 (1024 ms).
const DefaultTimeout = (4096 + 2*1024) * time.Millisecond

// cmResponseTimeout is rdma_cm's CMA_CM_RESPONSE_TIMEOUT, announced in REQs.
const cmResponseTimeout = 20

// GiveUpAfter returns how long the CM waits for an answer to a MAD before
// it gives up: the first transmission and MaxRetries resends, Timeout
// apart (with the defaults 16 × 6.144 s ≈ 98 s). An MRA from the peer
// extends it.
func (c Config) GiveUpAfter() time.Duration {
	c.normalize()
	return time.Duration(c.MaxRetries+1) * c.Timeout
}

// expDuration is 4.096 µs × 2^e, the IBA timeout encoding.
func expDuration(e uint8) time.Duration {
	return time.Duration(4096<<min(e, 31)) * time.Nanosecond
}

// durationExp is the smallest e with expDuration(e) >= d (0..31).
func durationExp(d time.Duration) uint8 {
	u := uint64(max(d, 1)+4095) / 4096
	e := bits.Len64(u - 1)
	return uint8(min(e, 31))
}

// Stats are an agent's counters, updated atomically.
type Stats struct {
	MADsSent     atomic.Uint64
	MADsReceived atomic.Uint64
	Retransmits  atomic.Uint64 // MADs resent after a timeout
	Duplicates   atomic.Uint64 // duplicate MADs (answered again or ignored)
	MRAsSent     atomic.Uint64
	Timeouts     atomic.Uint64 // exchanges given up after all retries
	SendErrors   atomic.Uint64 // MADs the GSI QP refused
	RejectsSent  atomic.Uint64
	// Every received MAD is counted once (MADsReceived) and once in one
	// of Handled, Duplicates or the drops.
	Handled atomic.Uint64 // MADs acted on (state change, event, or the protocol's answer)
	// Drops by reason.
	DropMalformed  atomic.Uint64 // not a valid CM MAD (bad length, version, class, method, fields)
	DropUnknown    atomic.Uint64 // unknown or unsupported attribute (ClassPortInfo, LAP, APR)
	DropUnexpected atomic.Uint64 // valid MAD that matches no ID or not its state
	DropBacklog    atomic.Uint64 // REQ dropped because the listener's backlog was full
	DropRecvError  atomic.Uint64 // GSI receive completions in error
	// Half-open connections (REP sent, no RTU yet) of listening IDs
	// (ID.SetHalfOpen): spoofed REQs make them and never answer.
	HalfOpenEvicted   atomic.Uint64 // dropped (REJ, UNREACHABLE) to make room for a newer one: the listener's half-open bound was reached
	HalfOpenShortREPs atomic.Uint64 // REPs sent under pressure (the listener's half-open bound at least half taken): resent once at most
}

// Each calls f with the name and value of every counter, in declaration
// order: for reports (the tools' and the C library's SOFTROCE_STATS), not
// for hot paths.
func (s *Stats) Each(f func(name string, v uint64)) {
	v := reflect.ValueOf(s).Elem()
	for i := 0; i < v.NumField(); i++ {
		if c, ok := v.Field(i).Addr().Interface().(*atomic.Uint64); ok {
			f(v.Type().Field(i).Name, c.Load())
		}
	}
}

// Agent runs the CM protocol on one device (its GSI QP). Attach creates it
// and registers it by address; NewAgent creates one outside that registry.
// Its Dial and Listen connect through it alone.
type Agent struct {
	dev   *verbs.Device
	cfg   Config
	log   *slog.Logger
	clock clock.Clock
	addr  netip.Addr // the device's IP address (its GID)
	sgid  uint8      // GID index of addr
	guid  uint64
	mtu   wire.MTU
	// listed: the agent is in the registry (Attach). One outside it
	// (NewAgent) keeps its IDs' ports in ports, under reg.mu.
	listed bool
	ports  map[portKey][]*ID
	// respExp is the CM response timeout announced in REQs.
	respExp uint8
	// defaultTiming: Config.Timeout was left to its default (passive IDs
	// then time their REPs from the REQ, as ib_cm).
	defaultTiming bool

	pd   *verbs.PD // GSI resources, and the default PD of IDs on this device
	scq  *verbs.CQ
	rcq  *verbs.CQ
	cc   *verbs.CompChannel
	qp   *verbs.QP
	rmr  *verbs.MR
	rbuf []byte

	stats Stats

	// inMu serializes the handling of received MADs: the agent's goroutine
	// and Poll's callers take turns, so that MADs are handled in the order
	// they arrived.
	inMu sync.Mutex

	mu sync.Mutex
	// closed: Close has begun (set under mu). An atomic, so that Poll,
	// which a blocking rdma_get_cm_event calls twice a wait, need not
	// wait for another thread's accept holding mu.
	closed   atomic.Bool
	byLocal  map[uint32]*ID      // local comm ID (and SIDR request ID) -> ID
	byRemote map[remoteKey]*ID   // (peer, remote comm ID / request ID) -> ID
	ahs      map[ahKey]*verbs.AH // GSI address handles by peer and traffic class
	nextComm uint32
	// halfOpen holds, per listening ID, its passive IDs on this agent whose
	// REP went out, oldest first (some may have left REP_SENT since).
	halfOpen map[*ID][]*ID

	ctx    context.Context // ends at Close (the loop; ResolveAddr's lookups)
	cancel context.CancelFunc
	done   chan struct{}
}

type remoteKey struct {
	peer netip.Addr
	id   uint32
	sidr bool
}

// recvSlot is the size of one GSI receive buffer: the 40-byte GRH area and
// the 256-byte MAD.
const recvSlot = 40 + mad.MADLen

// Attach starts the CM on dev and registers the device so that IDs, Dial
// and Listen find it by its IP address. It creates the GSI QP (QP1); a
// device can have one agent, and attached devices need distinct IP
// addresses. cfg may be nil. Close the agent before the device.
func Attach(dev *verbs.Device, cfg *Config) (*Agent, error) { return start(dev, cfg, true) }

// NewAgent starts the CM on dev as Attach does, but leaves the agent out of
// the registry: package-level Dial and Listen, Agents and IDs that bind or
// resolve by address do not find it, and the ports its connections and
// listeners use are its own, so its address may be another agent's too.
// Connect through its Dial and Listen methods. Close the agent before the
// device.
func NewAgent(dev *verbs.Device, cfg *Config) (*Agent, error) { return start(dev, cfg, false) }

// start creates an agent on dev, in the registry if listed.
func start(dev *verbs.Device, cfg *Config, listed bool) (*Agent, error) {
	if dev == nil {
		return nil, newErr("attach", "nil device", syscall.EINVAL)
	}
	a := &Agent{dev: dev, listed: listed, clock: dev.Clock(), byLocal: map[uint32]*ID{}, byRemote: map[remoteKey]*ID{},
		ahs: map[ahKey]*verbs.AH{}, halfOpen: map[*ID][]*ID{}, nextComm: rand.Uint32(), done: make(chan struct{}), mtu: dev.ActiveMTU()}
	a.respExp = cmResponseTimeout
	a.defaultTiming = cfg == nil || cfg.Timeout <= 0
	if cfg != nil {
		a.cfg = *cfg
		if cfg.Timeout > 0 {
			a.respExp = durationExp(cfg.Timeout)
		}
	}
	a.cfg.normalize()
	a.log = a.cfg.Logger
	a.addr = dev.LocalAddr().Addr().Unmap()
	g := verbs.GIDFromAddr(a.addr)
	a.sgid = 0
	for i, x := range dev.GIDs() {
		if x == g {
			a.sgid = uint8(i)
		}
	}
	a.guid = dev.QueryDevice().NodeGUID
	var err error
	if a.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	fail := func(err error) (*Agent, error) {
		a.release()
		return nil, err
	}
	depth := a.cfg.RecvDepth
	a.cc = dev.CreateCompChannel()
	if a.rcq, err = dev.CreateCQ(depth, nil, a.cc); err != nil {
		return fail(err)
	}
	if a.scq, err = dev.CreateCQ(256, nil, nil); err != nil {
		return fail(err)
	}
	a.qp, err = a.pd.CreateGSIQP(&verbs.QPInitAttr{SendCQ: a.scq, RecvCQ: a.rcq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: uint32(depth), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: mad.MADLen}})
	if err != nil {
		return fail(err)
	}
	if err = a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QKey: wire.GSIQKey},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
		return fail(err)
	}
	if err = a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
		return fail(err)
	}
	if err = a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 0}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return fail(err)
	}
	a.rbuf = make([]byte, depth*recvSlot)
	if a.rmr, err = a.pd.RegMR(a.rbuf, verbs.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if err = a.postRecvs(depth); err != nil {
		return fail(err)
	}
	if err = a.rcq.ReqNotify(false); err != nil {
		return fail(err)
	}
	if listed {
		if err = register(a); err != nil {
			return fail(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.ctx, a.cancel = ctx, cancel
	if a.cfg.pollOnly {
		close(a.done)
	} else {
		go a.loop(ctx)
	}
	return a, nil
}

// postRecvs posts the first n receive buffers, in batches.
func (a *Agent) postRecvs(n int) error {
	var wrs [64]verbs.RecvWR
	var sges [64]verbs.SGE
	for i := 0; i < n; {
		k := min(n-i, len(wrs))
		for j := range k {
			slot := uint64(i + j)
			sges[j] = verbs.SGE{Addr: a.rmr.Addr() + slot*recvSlot, Length: recvSlot, LKey: a.rmr.LKey()}
			wrs[j] = verbs.RecvWR{WRID: slot, SGList: sges[j : j+1]}
		}
		if _, err := a.qp.PostRecv(wrs[:k]); err != nil {
			return err
		}
		i += k
	}
	return nil
}

func (a *Agent) postRecv(slot uint64) error {
	_, err := a.qp.PostRecv([]verbs.RecvWR{{WRID: slot, SGList: []verbs.SGE{{
		Addr: a.rmr.Addr() + slot*recvSlot, Length: recvSlot, LKey: a.rmr.LKey()}}}})
	return err
}

// release frees the GSI resources (errors ignored: best effort).
func (a *Agent) release() {
	if a.qp != nil {
		a.qp.Destroy()
	}
	for _, ah := range a.ahs {
		ah.Destroy()
	}
	a.ahs = nil
	if a.rmr != nil {
		a.rmr.Deregister()
	}
	if a.rcq != nil {
		a.rcq.Destroy()
	}
	if a.scq != nil {
		a.scq.Destroy()
	}
}

// Close stops the agent: pending exchanges are abandoned (their timers
// stopped, no more events), the GSI QP is destroyed and the device is
// unregistered (if Attach registered it). It does not close the device.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed.Swap(true) {
		a.mu.Unlock()
		return nil
	}
	for _, id := range a.byLocal {
		id.stopTimer()
	}
	a.mu.Unlock()
	if a.listed {
		unregister(a)
	}
	a.cancel()
	<-a.done
	a.inMu.Lock() // a Poll in progress ends first; later ones see closed
	defer a.inMu.Unlock()
	a.mu.Lock()
	a.release()
	a.mu.Unlock()
	return nil
}

// isClosed reports whether Close has begun.
func (a *Agent) isClosed() bool { return a.closed.Load() }

// Device returns the agent's device.
func (a *Agent) Device() *verbs.Device { return a.dev }

// Addr returns the device's IP address, which IDs bind to.
func (a *Agent) Addr() netip.Addr { return a.addr }

// PD returns the agent's protection domain, the default PD of IDs on this
// device (rdma_cm's per-device PD when rdma_create_qp gets a NULL pd).
func (a *Agent) PD() *verbs.PD { return a.pd }

// Stats returns the agent's live counters.
func (a *Agent) Stats() *Stats { return &a.stats }

// Config returns the agent's effective configuration.
func (a *Agent) Config() Config { return a.cfg }

// IDs returns the number of communication IDs the agent tracks (live
// connections, pending requests and IDs in time-wait): 0 when idle.
func (a *Agent) IDs() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byLocal)
}

func (a *Agent) loop(ctx context.Context) {
	defer close(a.done)
	wcs := make([]verbs.WC, 32)
	for {
		a.inMu.Lock()
		a.drain(wcs, math.MaxInt)
		a.inMu.Unlock()
		cq, err := a.cc.GetCQEvent(ctx)
		if err != nil {
			return
		}
		cq.AckEvents(1)
		if cq.ReqNotify(false) != nil {
			return
		}
	}
}

// drain handles the MADs the GSI QP holds, until it is empty or about
// limit were taken (under inMu), and returns how many it took.
func (a *Agent) drain(wcs []verbs.WC, limit int) int {
	total := 0
	for total < limit {
		n := a.rcq.Poll(wcs)
		for i := range n {
			a.completion(&wcs[i])
		}
		total += n
		if n < len(wcs) {
			break
		}
	}
	return total
}

// pollMADs bounds the MADs one Poll handles: a thread that polls for its
// own events (rdma_get_cm_event) then takes a burst's events as it goes.
// Handled in one Poll, cmtime -c 2000's burst of REQs became 2,000 events
// not yet taken, beyond the listen backlog that counts them (1,024, as
// the kernel's): requests were dropped and resent 6 s later.
const pollMADs = 64

// Poll handles, on the calling goroutine, the MADs the agent's GSI QP has
// received so far, at most pollMADs, and returns how many: 0 when none
// waited or the agent's goroutine is handling them. What it leaves, the
// agent's goroutine takes: the GSI CQ is armed whenever that goroutine
// waits, so the MADs left raised its event. It does not allocate.
func (a *Agent) Poll() int { return a.poll(false) }

// PollLink handles on the calling goroutine what the device's link holds
// now (verbs.Device.PollLink) and then, as Poll, the MADs among it, and
// returns how many datagrams and MADs it handled. Meanwhile the GSI CQ is
// disarmed (verbs.CQ.Disarm), so that MADs this goroutine handles itself
// do not also wake the agent's goroutine, which would then wait for
// PollLink's turn and find nothing: a thread that waits for its CM events
// on the link (the C library's rdma_get_cm_event) turns a datagram into
// its event with no wake-up of the device's or the agent's goroutines.
// What it leaves (more than pollMADs, or MADs the device's receive loop
// queued meanwhile) raises the event it held back (verbs.CQ.Rearm). It
// does not allocate.
func (a *Agent) PollLink() int { return a.poll(true) }

// poll is Poll, and with link PollLink.
func (a *Agent) poll(link bool) int {
	if !a.inMu.TryLock() {
		// The agent's goroutine is handling MADs: the ones the link
		// brings, it takes next.
		if link {
			return a.dev.PollLink()
		}
		return 0
	}
	if a.isClosed() {
		a.inMu.Unlock()
		return 0
	}
	armed, n := false, 0
	if link {
		armed = a.rcq.Disarm()
		n = a.dev.PollLink()
	}
	var wcs [8]verbs.WC
	n += a.drain(wcs[:], pollMADs)
	a.inMu.Unlock()
	// After the unlock: a goroutine the leftovers wake takes them at
	// once, not after waiting for this turn to end.
	if armed {
		a.rcq.Rearm()
	}
	return n
}

func (a *Agent) completion(wc *verbs.WC) {
	slot := wc.WRID
	if slot >= uint64(a.cfg.RecvDepth) {
		return
	}
	if wc.Status != verbs.WCSuccess {
		if wc.Status == verbs.WCWRFlushErr {
			return // QP going away
		}
		a.stats.DropRecvError.Add(1)
		a.postRecv(slot)
		return
	}
	b := a.rbuf[slot*recvSlot : slot*recvSlot+uint64(min(int(wc.ByteLen), recvSlot))]
	var peer netip.Addr
	var payload []byte
	if len(b) >= 40 {
		peer = grhSource(b[:40])
		payload = b[40:]
	}
	a.input(peer, payload)
	a.postRecv(slot)
}

// grhSource returns the source address in a UD receive's 40-byte GRH area:
// an IPv6 header, or 20 zero bytes and an IPv4 header.
func grhSource(g []byte) netip.Addr {
	if g[20]>>4 == 4 && g[0] == 0 {
		return netip.AddrFrom4([4]byte(g[32:36]))
	}
	return netip.AddrFrom16([16]byte(g[8:24])).Unmap()
}

// ahKey selects a GSI address handle: the peer and the traffic class.
type ahKey struct {
	peer netip.Addr
	tc   uint8
}

// send transmits one MAD that belongs to no connection (a stateless
// answer) to peer's GSI QP, with traffic class 0.
func (a *Agent) send(peer netip.Addr, b []byte) { a.sendTC(peer, 0, b) }

// sendTC transmits one MAD to peer's GSI QP with traffic class tc: a
// connection's MADs carry its path's (ID.SetTOS on the active side, the
// REQ's primary path on the passive one), as the kernel's ib_cm sends them
// with the address vector of the connection's path.
func (a *Agent) sendTC(peer netip.Addr, tc uint8, b []byte) {
	if a.closed.Load() {
		return
	}
	key := ahKey{peer, tc}
	ah := a.ahs[key]
	if ah == nil {
		var err error
		ah, err = a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1,
			GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(peer), SGIDIndex: a.sgid, HopLimit: 64, TrafficClass: tc}})
		if err != nil {
			a.stats.SendErrors.Add(1)
			return
		}
		if len(a.ahs) > 1024 { // bound the cache
			for k, v := range a.ahs {
				v.Destroy()
				delete(a.ahs, k)
				break
			}
		}
		a.ahs[key] = ah
	}
	// Sends are unsignaled: only failed ones complete. Drain them.
	var wcs [4]verbs.WC
	for n := a.scq.Poll(wcs[:]); n > 0; n = a.scq.Poll(wcs[:]) {
		a.stats.SendErrors.Add(uint64(n))
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, Inline: b,
		AH: ah, RemoteQPN: 1, RemoteQKey: wire.GSIQKey}}); err != nil {
		a.stats.SendErrors.Add(1)
		return
	}
	a.stats.MADsSent.Add(1)
	if a.log != nil {
		h, _ := mad.ParseHeader(b)
		a.log.Debug("cm send", "dev", a.dev.Name(), "to", peer, "mad", h.AttrID, "tid", h.TID)
	}
}

// newCommID returns an unused nonzero local communication ID.
func (a *Agent) newCommID() uint32 {
	for {
		a.nextComm++
		id := a.nextComm
		if id != 0 && a.byLocal[id] == nil {
			return id
		}
	}
}

// newTID returns a transaction ID: like Linux, the local comm ID in the
// low half and a per-agent sequence in the high half.
func (a *Agent) newTID(comm uint32) uint64 {
	return uint64(rand.Uint32()&0x7FFFFFFF)<<32 | uint64(comm)
}

// registry of agents by address, and of the ports bound on them and on
// the wildcard address. reg.mu also guards the port tables of the agents
// outside the registry (Agent.ports) and IDs' backlogs.
var reg struct {
	mu     sync.Mutex
	agents []*Agent
	ports  map[portKey][]*ID
}

// portsOf returns the port table of IDs bound on agent a (nil: on the
// wildcard address): its own for an agent outside the registry, else the
// registry's. reg.mu held.
func portsOf(a *Agent) map[portKey][]*ID {
	if a != nil && !a.listed {
		if a.ports == nil {
			a.ports = map[portKey][]*ID{}
		}
		return a.ports
	}
	if reg.ports == nil {
		reg.ports = map[portKey][]*ID{}
	}
	return reg.ports
}

type portKey struct {
	ps   mad.PortSpace
	port uint16
}

func register(a *Agent) error {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for _, x := range reg.agents {
		if x.dev == a.dev {
			return newErr("attach", "device already has a CM agent", syscall.EBUSY)
		}
		if x.addr == a.addr {
			return newErr("attach", "another attached device has the same IP address: addresses select devices", syscall.EADDRINUSE)
		}
	}
	reg.agents = append(reg.agents, a)
	return nil
}

func unregister(a *Agent) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for i, x := range reg.agents {
		if x == a {
			reg.agents = append(reg.agents[:i], reg.agents[i+1:]...)
			break
		}
	}
}

// agentFor returns the agent of the device with IP address addr.
func agentFor(addr netip.Addr) *Agent {
	addr = addr.Unmap()
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for _, a := range reg.agents {
		if a.addr == addr {
			return a
		}
	}
	return nil
}

// agentToward picks the device to reach dst from when no source address is
// given, as a route lookup would: among the devices of dst's family other
// than dst itself, the one whose address shares the longest prefix with
// dst; else the device that is dst (loopback).
func agentToward(dst netip.Addr) *Agent {
	dst = dst.Unmap()
	reg.mu.Lock()
	defer reg.mu.Unlock()
	var self, best *Agent
	bestLen := -1
	for _, a := range reg.agents {
		if a.addr.Is4() != dst.Is4() {
			continue
		}
		if a.addr == dst {
			self = a
			continue
		}
		if n := commonPrefix(a.addr, dst); n > bestLen {
			best, bestLen = a, n
		}
	}
	if best != nil {
		return best
	}
	return self
}

// commonPrefix returns the number of leading bits a and b share.
func commonPrefix(a, b netip.Addr) int {
	x, y := a.As16(), b.As16()
	for i := range x {
		if d := x[i] ^ y[i]; d != 0 {
			return i*8 + bits.LeadingZeros8(d)
		}
	}
	return 128
}

// Agents returns the attached agents (Attach; not those from NewAgent).
func Agents() []*Agent {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return append([]*Agent(nil), reg.agents...)
}
