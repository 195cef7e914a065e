package cm

import (
	"context"
	"strconv"
	"sync"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/verbs"
)

// EventType is an rdma_cm event (enum rdma_cm_event_type values).
type EventType uint8

// rdma_cm events.
const (
	EventAddrResolved    EventType = 0
	EventAddrError       EventType = 1
	EventRouteResolved   EventType = 2
	EventRouteError      EventType = 3
	EventConnectRequest  EventType = 4
	EventConnectResponse EventType = 5
	EventConnectError    EventType = 6
	EventUnreachable     EventType = 7
	EventRejected        EventType = 8
	EventEstablished     EventType = 9
	EventDisconnected    EventType = 10
	EventDeviceRemoval   EventType = 11
	EventTimewaitExit    EventType = 15
)

var eventNames = [...]string{
	"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

// String returns the name rdma_event_str gives ("RDMA_CM_EVENT_ESTABLISHED").
func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "UNKNOWN EVENT " + strconv.Itoa(int(t))
}

// ConnParam are the connection parameters of Connect and Accept (struct
// rdma_conn_param), and what CONNECT_REQUEST, CONNECT_RESPONSE and
// ESTABLISHED report about the peer's.
type ConnParam struct {
	// PrivateData is sent in the REQ (up to 56 bytes after rdma_cm's
	// header), REP (196), REJ (148) or SIDR messages; in events it is the
	// peer's, the whole private-data field as received (zero-padded).
	PrivateData []byte
	// ResponderResources is the number of RDMA READ/atomic operations this
	// side accepts in flight from the peer (max_dest_rd_atomic); in
	// CONNECT_REQUEST it is the peer's initiator depth.
	ResponderResources uint8
	// InitiatorDepth is the number of RDMA READ/atomic operations this side
	// issues in flight (max_rd_atomic); in CONNECT_REQUEST it is the peer's
	// responder resources.
	InitiatorDepth uint8
	FlowControl    bool
	// RetryCount and RNRRetryCount are the transport and RNR retry counts
	// (0..7; 7 means infinite RNR retries). Connect uses them for the
	// connection; Accept ignores RetryCount (the active side's rules).
	RetryCount    uint8
	RNRRetryCount uint8
	SRQ           bool
	// QPNum is the QP number to announce when the ID has no QP of its own
	// (the application manages the QP); in events, the peer's QPN.
	QPNum uint32
	// ECE is sent in the REQ (Connect) or REP (Accept); in CONNECT_REQUEST,
	// CONNECT_RESPONSE and ESTABLISHED events it is the peer's.
	ECE ECE
}

// ECE is Enhanced Connection Establishment data (struct ibv_ece): a vendor
// ID (24 bits; 0: none) and vendor-defined options, carried in the REQ's and
// REP's vendor ID fields and MAD attribute modifier, as the kernel's IB CM
// does.
type ECE struct {
	VendorID uint32
	Options  uint32
}

// UDParam is what an ESTABLISHED event on a UD (port space UDP) ID carries:
// how to reach the peer's QP (struct rdma_ud_param).
type UDParam struct {
	QPNum       uint32
	QKey        uint32
	AHAttr      verbs.AHAttr
	PrivateData []byte
}

// Event is a connection manager event (struct rdma_cm_event).
type Event struct {
	Type EventType
	// ID is the ID the event is about; for CONNECT_REQUEST, the new ID of
	// the incoming connection (its Listener is the listening ID).
	ID *ID
	// Listen is the listening ID of a CONNECT_REQUEST.
	Listen *ID
	// Status is 0, a negative errno (UNREACHABLE: -ETIMEDOUT, ...), the CM
	// reject reason of REJECTED, or the SIDR status of a failed UD connect.
	Status int
	// Reason is the reject reason of REJECTED.
	Reason mad.RejectReason
	// Param is the peer's connection parameters and private data
	// (CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED, REJECTED).
	Param ConnParam
	// UD is set on ESTABLISHED for UD IDs, and on MULTICAST_JOIN (the
	// group's address vector, QPN and Q_Key).
	UD *UDParam
	// Multicast is the group a MULTICAST_JOIN or MULTICAST_ERROR is about
	// (mcast.go).
	Multicast *Multicast
}

// EventChannel delivers the events of the IDs created on it
// (rdma_event_channel). Events queue without bound until read.
type EventChannel struct {
	mu     sync.Mutex
	q      []*Event
	ready  chan struct{}
	closed bool
	// level is SetLevel's function.
	level func(bool)
	// onTake: SetBacklogOnTake.
	onTake bool
}

// NewEventChannel creates an event channel (rdma_create_event_channel).
func NewEventChannel() *EventChannel {
	return &EventChannel{ready: make(chan struct{}, 1)}
}

func (c *EventChannel) post(ev *Event) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		if ev.Type == EventConnectRequest && ev.ID != nil {
			// Nobody will accept or reject it: reject it, as rdma_cm
			// does a request its listener did not take. Not here: the
			// agent posts with its lock held.
			go ev.ID.Destroy()
		}
		return
	}
	c.q = append(c.q, ev)
	if len(c.q) == 1 && c.level != nil {
		c.level(true)
	}
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// SetLevel registers f, which the channel then calls with true when an
// event is queued on an empty channel and with false when Get, TryGet or
// Close takes its last event: what an fd needs that must be readable
// exactly while events wait, as the kernel's rdma_cm file is (the C
// library's event channels), with no goroutine between the agent and the
// fd. f runs with the channel's lock held, often with the agent's too: it
// must be short and must not call the channel or the agent. Set it before
// the channel has IDs.
func (c *EventChannel) SetLevel(f func(ready bool)) {
	c.mu.Lock()
	c.level = f
	c.mu.Unlock()
}

// Relevel calls the SetLevel function with whether events are queued,
// under the channel's lock: for a level function that held back a raise
// while its caller handled datagrams on its own thread (the C library's
// rdma_get_cm_event, which then takes the first event itself), so that
// the fd ends up level with the queue.
func (c *EventChannel) Relevel() {
	c.mu.Lock()
	if c.level != nil {
		c.level(len(c.q) > 0)
	}
	c.mu.Unlock()
}

// SetBacklogOnTake makes a connection request stop counting against its
// listening ID's backlog (ID.Listen) as soon as its CONNECT_REQUEST is
// taken from this channel (Get, TryGet), as the kernel's rdma_cm file
// does (rdma_get_cm_event gives the slot back), rather than once it is
// accepted or rejected. A program that hands requests from its event
// thread to slower workers (stock cmtime's server) then loses none of a
// burst as large as the backlog while the workers catch up. Set it before
// the channel has IDs. The C library's channels are made so.
func (c *EventChannel) SetBacklogOnTake(on bool) {
	c.mu.Lock()
	c.onTake = on
	c.mu.Unlock()
}

// TryGet returns the oldest queued event, if any, without waiting.
func (c *EventChannel) TryGet() (*Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.q) == 0 {
		return nil, false
	}
	return c.takeLocked(), true
}

// takeLocked removes and returns the oldest event (c.mu held, c.q not
// empty).
func (c *EventChannel) takeLocked() *Event {
	ev := c.q[0]
	c.q[0] = nil
	c.q = c.q[1:]
	if c.onTake && ev.Type == EventConnectRequest && ev.ID != nil {
		ev.ID.uncount()
	}
	if len(c.q) == 0 {
		c.q = nil
		if c.level != nil {
			c.level(false)
		}
	}
	return ev
}

// Get waits for the next event (rdma_get_cm_event). rdma_ack_cm_event has
// no counterpart: events need no acknowledgement.
func (c *EventChannel) Get(ctx context.Context) (*Event, error) {
	for {
		c.mu.Lock()
		if len(c.q) > 0 {
			ev := c.takeLocked()
			c.mu.Unlock()
			return ev, nil
		}
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		select {
		case <-c.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Len returns the number of queued events.
func (c *EventChannel) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.q)
}

// Close discards queued events and makes Get fail with ErrClosed
// (rdma_destroy_event_channel). Destroy the channel's IDs first. The
// connection requests among the discarded events, whose IDs nobody else
// holds, are rejected and their IDs destroyed, as closing an rdma_cm event
// channel does; so is a request that arrives after Close.
func (c *EventChannel) Close() error {
	c.mu.Lock()
	c.closed = true
	q := c.q
	c.q = nil
	if len(q) > 0 && c.level != nil {
		c.level(false)
	}
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
	for _, ev := range q {
		if ev.Type == EventConnectRequest && ev.ID != nil {
			ev.ID.Destroy()
		}
	}
	return nil
}
