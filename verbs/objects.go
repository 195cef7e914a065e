package verbs

import (
	"context"
	"net/netip"
	"time"

	"github.com/softroce/softroce/internal/engine"
	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/wire"
)

// Device is a software RDMA device on one link endpoint (struct ibv_context).
type Device struct{ x engine.Device }

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
func (d *Device) CreateCompChannel() *CompChannel {
	v := d.eng().CreateCompChannel()
	return wrapCompChannel(v)
}

// CreateCQ creates a CQ with room for at least cqe completions
// (ibv_create_cq); ch may be nil.
func (d *Device) CreateCQ(cqe int, ctx any, ch *CompChannel) (*CQ, error) {
	v, err := d.eng().CreateCQ(cqe, ctx, ch.eng())
	return wrapCQ(v), err
}

// Name returns the device name.
func (d *Device) Name() string {
	return d.eng().Name()
}

// LocalAddr returns the link's local address.
func (d *Device) LocalAddr() netip.AddrPort {
	return d.eng().LocalAddr()
}

// Stats returns the device's live counters.
func (d *Device) Stats() *Stats {
	return (*Stats)(d.eng().Stats())
}

// Clock returns the clock the device was configured with (RealClock by
// default). The device runs its own QP timers on one per-device heap
// rather than on RealClock's runtime timers.
func (d *Device) Clock() Clock {
	return d.eng().Clock()
}

// QueryDevice returns the device attributes (ibv_query_device), rxe's limits (docs/protocol.md §10.1).
func (d *Device) QueryDevice() DeviceAttr {
	return DeviceAttr(d.eng().QueryDevice())
}

// QueryPort returns port 1's attributes (ibv_query_port).
func (d *Device) QueryPort(port uint8) (PortAttr, error) {
	a, err := d.eng().QueryPort(port)
	return *portAttrOf(&a), err
}

// QueryGID returns GID index i of port 1 (ibv_query_gid).
func (d *Device) QueryGID(port uint8, i int) (GID, error) {
	g, err := d.eng().QueryGID(port, i)
	return GID(g), err
}

// GIDs returns the populated GID table entries.
func (d *Device) GIDs() []GID {
	return gidsOf(d.eng().GIDs())
}

// QueryPKey returns P_Key index i (only index 0, 0xFFFF).
func (d *Device) QueryPKey(port uint8, i int) (uint16, error) {
	return d.eng().QueryPKey(port, i)
}

// ActiveMTU returns the port's active MTU.
func (d *Device) ActiveMTU() wire.MTU {
	return d.eng().ActiveMTU()
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	v, err := d.eng().AllocPD()
	return wrapPD(v), err
}

// GetAsyncEvent waits for the next asynchronous event (ibv_get_async_event).
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	ev, err := d.eng().GetAsyncEvent(ctx)
	return asyncEventOf(ev), err
}

// AsyncEvents returns the channel asynchronous events arrive on.
func (d *Device) AsyncEvents() <-chan AsyncEvent {
	return asyncEventChan(d.eng().AsyncEvents())
}

// Close stops the device: all QPs go to ERR (flushing their work), the
// receive loop exits and the link is closed. It waits for the device's
// goroutines.
func (d *Device) Close() error {
	return d.eng().Close()
}

// Done is closed when the device closes.
func (d *Device) Done() <-chan struct{} {
	return d.eng().Done()
}

// MemoryRegistry returns the registry PD.RegMem and PD.RegDmabufMR use:
// Config.Memory, or the device's own with the "fd" and "heap" providers.
// Register further providers on it to make their memory registrable; they
// are asked after those two, and the heap takes every mem.Bytes
// descriptor, so name later providers' memory by address (or by their own
// descriptor types), or pass a Config.Memory ordered as you need.
func (d *Device) MemoryRegistry() *mem.Registry {
	return d.eng().MemoryRegistry()
}

// CompChannel is a completion event channel (ibv_comp_channel): armed CQs
// attached to it deliver one event per arming.
type CompChannel struct{ x engine.CompChannel }

// GetCQEvent waits for the next CQ event (ibv_get_cq_event). Every event
// must be acknowledged with CQ.AckEvents.
func (c *CompChannel) GetCQEvent(ctx context.Context) (*CQ, error) {
	v, err := c.eng().GetCQEvent(ctx)
	return wrapCQ(v), err
}

// C returns the channel events arrive on (for select loops); events read
// from it directly count as received too.
func (c *CompChannel) C() <-chan *CQ {
	return cqChan(c.eng().C())
}

// CQ is a completion queue (ibv_cq).
type CQ struct{ x engine.CQ }

// CQE returns the CQ's capacity.
func (cq *CQ) CQE() int {
	return cq.eng().CQE()
}

// Context returns the user context given at creation.
func (cq *CQ) Context() any {
	return cq.eng().Context()
}

// Poll moves up to len(wc) completions into wc and returns how many (ibv_poll_cq).
func (cq *CQ) Poll(wc []WC) int {
	return cq.eng().Poll(engineWCs(wc))
}

// Len returns the number of completions waiting.
func (cq *CQ) Len() int {
	return cq.eng().Len()
}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion (or, with
// solicitedOnly, the next solicited or error completion) sends one event to
// the completion channel.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	return cq.eng().ReqNotify(solicitedOnly)
}

// AckEvents acknowledges n events received for this CQ (ibv_ack_cq_events).
func (cq *CQ) AckEvents(n int) {
	cq.eng().AckEvents(n)
}

// Resize changes the capacity (ibv_resize_cq); it fails with EINVAL if the
// completions waiting would not fit.
func (cq *CQ) Resize(cqe int) error {
	return cq.eng().Resize(cqe)
}

// Destroy frees the CQ (ibv_destroy_cq): EBUSY while QPs use it, or while
// events are unacknowledged.
func (cq *CQ) Destroy() error {
	return cq.eng().Destroy()
}

// PD is a protection domain: MRs, QPs, SRQs and AHs of one PD work together.
type PD struct{ x engine.PD }

// CreateQP creates a QP (ibv_create_qp).
func (pd *PD) CreateQP(attr *QPInitAttr) (*QP, error) {
	qp, err := pd.eng().CreateQP(attr.engine())
	return wrapQP(qp), err
}

// CreateGSIQP creates the device's GSI QP: a UD QP with QPN 1 that accepts
// only Q_Key 0x80010000 (docs/protocol.md §6.1, §8.1), for the connection manager's MADs.
func (pd *PD) CreateGSIQP(attr *QPInitAttr) (*QP, error) {
	qp, err := pd.eng().CreateGSIQP(attr.engine())
	return wrapQP(qp), err
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(attr SRQAttr, ctx any) (*SRQ, error) {
	v, err := pd.eng().CreateSRQ(engine.SRQAttr(attr), ctx)
	return wrapSRQ(v), err
}

// Device returns the device the PD belongs to.
func (pd *PD) Device() *Device {
	v := pd.eng().Device()
	return wrapDevice(v)
}

// Handle returns the PD's number (unique per device).
func (pd *PD) Handle() uint32 {
	return pd.eng().Handle()
}

// Dealloc frees the PD. Like ibv_dealloc_pd it fails with EBUSY while MRs,
// QPs, SRQs or AHs still use it.
func (pd *PD) Dealloc() error {
	return pd.eng().Dealloc()
}

// RegMR registers buf with the given access flags (ibv_reg_mr). The memory
// must stay valid until Deregister returns. Registrations beyond the
// device's MR count (ENOMEM) or size (EINVAL) limits fail (Config.MaxMR,
// Config.MaxMRSize).
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	v, err := pd.eng().RegMR(buf, engine.Access(access))
	return wrapMR(v), err
}

// RegRegion registers memory a provider resolved (see package mem): the MR
// reads and writes the region's view inside the region's guard, and when
// the provider revokes the region the MR becomes invalid (remote access then
// gets NAK 0x62, local use LOC_PROT_ERR). The MR's address is the region's
// address (0 if ZERO_BASED). Deregister does not deregister the region.
func (pd *PD) RegRegion(r *mem.Region, access Access) (*MR, error) {
	v, err := pd.eng().RegRegion(r, engine.Access(access))
	return wrapMR(v), err
}

// CreateAH creates an address handle (ibv_create_ah). RoCE needs a GRH.
func (pd *PD) CreateAH(attr *AHAttr) (*AH, error) {
	v, err := pd.eng().CreateAH(attr.eng())
	return wrapAH(v), err
}

// RegMem registers memory a provider of the device's registry resolves
// (Device.MemoryRegistry): req names it by address (host or device) and/or
// descriptor (mem.Bytes, mem.FileDesc, mem.ShmSegment, ...); req.Write is
// set from access. The MR owns the region: Deregister deregisters it too.
// A range spanning several providers' memory fails with an error matching
// mem.ErrSpansProviders (and EINVAL); a range no provider owns,
// mem.ErrNoProvider (EFAULT). When the provider revokes the memory the MR
// becomes invalid and an EventMRInvalidated async event reports it.
func (pd *PD) RegMem(req mem.Request, access Access) (*MR, error) {
	v, err := pd.eng().RegMem(req, engine.Access(access))
	return wrapMR(v), err
}

// RegDmabufMR registers length bytes at offset of the file descriptor fd
// (a dma-buf, memfd, tmpfs or any mmap-able file) as ibv_reg_dmabuf_mr
// does: iova is the address the MR is known by (remote RDMA addresses and
// SGE addresses are iova plus an offset). The fd is duplicated; the caller
// may close its own. It goes through the registry's fd provider.
func (pd *PD) RegDmabufMR(fd int, offset uint64, length uint64, iova uint64, access Access) (*MR, error) {
	v, err := pd.eng().RegDmabufMR(fd, offset, length, iova, engine.Access(access))
	return wrapMR(v), err
}

// AllocMW allocates a memory window (ibv_alloc_mw). A type 1 window starts
// valid but unbound; a type 2 window starts free (unusable until bound).
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	v, err := pd.eng().AllocMW(engine.MWType(typ))
	return wrapMW(v), err
}

// MR is a registered memory region. Remote and local access by the device
// goes only through the device's MR table (key -> MR -> PD -> access ->
// bounds) under the MR's read lock; Deregister and Invalidate take it
// exclusively, so after they return the device never touches the memory again.
type MR struct{ x engine.MR }

// LKey returns the local key.
func (mr *MR) LKey() uint32 {
	return mr.eng().LKey()
}

// RKey returns the remote key (equal to the local key, as rxe's user MRs).
func (mr *MR) RKey() uint32 {
	return mr.eng().RKey()
}

// Addr returns the address of the region's first byte in the region's own
// address space: 0 for zero-based MRs, otherwise the buffer's address. SGEs
// and remote RDMA addresses are Addr plus an offset.
func (mr *MR) Addr() uint64 {
	return mr.eng().Addr()
}

// Len returns the region's length in bytes.
func (mr *MR) Len() int {
	return mr.eng().Len()
}

// Access returns the access flags.
func (mr *MR) Access() Access {
	return Access(mr.eng().Access())
}

// PD returns the protection domain.
func (mr *MR) PD() *PD {
	v := mr.eng().PD()
	return wrapPD(v)
}

// Bytes returns the registered buffer.
func (mr *MR) Bytes() []byte {
	return mr.eng().Bytes()
}

// Valid reports whether the region is usable (registered and not invalidated).
func (mr *MR) Valid() bool {
	return mr.eng().Valid()
}

// Deregister removes the region (ibv_dereg_mr). It waits for any access in
// progress; afterwards remote access gets NAK 0x62 and local use LOC_PROT_ERR.
func (mr *MR) Deregister() error {
	return mr.eng().Deregister()
}

// Invalidate moves the region to the invalid state (as LOCAL_INV or an
// incoming SEND_WITH_INV does): synchronous, later accesses fail until
// Revalidate. The memory provider uses it to revoke access.
func (mr *MR) Invalidate() {
	mr.eng().Invalidate()
}

// Revalidate makes an invalidated region usable again with a new key8
// (like a fast-register). It returns the new key.
func (mr *MR) Revalidate() uint32 {
	return mr.eng().Revalidate()
}

// Rereg changes the region's buffer, PD and/or access (ibv_rereg_mr); flags
// select what changes. The keys stay the same index with a new key8, and
// the MR is valid again (also after an invalidation). Changing the
// translation of an MR over provider memory detaches it from the provider
// region (deregistering the region if RegMem made it); write access to a
// read-only provider region is refused (EACCES). It fails with EBUSY while
// memory windows are bound to the MR.
func (mr *MR) Rereg(flags int, pd *PD, buf []byte, access Access) error {
	return mr.eng().Rereg(flags, pd.eng(), buf, engine.Access(access))
}

// Region returns the provider region behind the MR, or nil.
func (mr *MR) Region() *mem.Region {
	return mr.eng().Region()
}

// MW is a memory window (struct ibv_mw): a remotely accessible view of part
// of an MR with its own R_Key, access and lifetime. Remote access through a
// window checks the window (key, state, PD, access, QP for type 2, range),
// then the MR under it (state, range).
type MW struct{ x engine.MW }

// Type returns the window type.
func (mw *MW) Type() MWType {
	return MWType(mw.eng().Type())
}

// PD returns the window's protection domain.
func (mw *MW) PD() *PD {
	v := mw.eng().PD()
	return wrapPD(v)
}

// RKey returns the window's remote key (ibv_mw.rkey). As ibv_bind_mw(3)
// says, QP.BindMW sets it to the new key when it posts the bind; if the
// bind then fails (WCMWBindErr) the old key stays in force and RKey returns
// it again. A type 2 window takes the key its WRBindMW carries when the
// bind executes.
func (mw *MW) RKey() uint32 {
	return mw.eng().RKey()
}

// Bound reports whether the window is bound to an MR.
func (mw *MW) Bound() bool {
	return mw.eng().Bound()
}

// Dealloc frees the window (ibv_dealloc_mw). A bound window is unbound
// first; afterwards its R_Key gets remote access errors. Like Invalidate it
// waits for remote accesses in progress through the window.
func (mw *MW) Dealloc() error {
	return mw.eng().Dealloc()
}

// QP is a queue pair (ibv_qp).
type QP struct{ x engine.QP }

// QPN returns the QP number.
func (qp *QP) QPN() uint32 {
	return qp.eng().QPN()
}

// Type returns the QP type.
func (qp *QP) Type() QPType {
	return QPType(qp.eng().Type())
}

// Context returns the user context given at creation.
func (qp *QP) Context() any {
	return qp.eng().Context()
}

// State returns the current state.
func (qp *QP) State() QPState {
	return QPState(qp.eng().State())
}

// Device returns the QP's device.
func (qp *QP) Device() *Device {
	v := qp.eng().Device()
	return wrapDevice(v)
}

// SourcePort returns the UDP source port the QP sends from (docs/protocol.md §1.3).
func (qp *QP) SourcePort() uint16 {
	return qp.eng().SourcePort()
}

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, QPInitAttr) {
	a, ia := qp.eng().Query()
	return *qpAttrOf(&a), qpInitAttrOf(ia)
}

// Modify changes the QP's attributes selected by mask (ibv_modify_qp),
// following the state machine and the required attributes per transition (docs/protocol.md §5.9).
func (qp *QP) Modify(attr *QPAttr, mask AttrMask) error {
	return qp.eng().Modify(attr.eng(), engine.AttrMask(mask))
}

// PostSend posts send WRs (ibv_post_send). It returns how many were posted;
// if fewer than len(wrs), err says why wrs[n] was refused (bad_wr).
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	return qp.eng().PostSend(engineSendWRs(wrs))
}

// PostRecv posts receive WRs (ibv_post_recv); it returns how many were
// posted and, if fewer than len(wrs), why wrs[n] was refused.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	return qp.eng().PostRecv(engineRecvWRs(wrs))
}

// Destroy destroys the QP (ibv_destroy_qp); outstanding work is discarded.
func (qp *QP) Destroy() error {
	return qp.eng().Destroy()
}

// AttachMcast attaches the UD QP to the multicast group gid (ibv_attach_mcast):
// datagrams sent to QPN 0xFFFFFF and the group's address reach it. The link
// must receive the group's traffic (joining the IP group is the link's job).
func (qp *QP) AttachMcast(gid GID, lid uint16) error {
	return qp.eng().AttachMcast(engine.GID(gid), lid)
}

// DetachMcast detaches the QP from the group (ibv_detach_mcast).
func (qp *QP) DetachMcast(gid GID, lid uint16) error {
	return qp.eng().DetachMcast(engine.GID(gid), lid)
}

// BindMW binds a type 1 window (ibv_bind_mw): it posts a bind work request
// on qp and returns the window's new R_Key, valid once the request has
// executed (in order with earlier work requests; its completion has opcode
// WCBindMW and, on failure, status WCMWBindErr with the QP moved to ERR).
func (qp *QP) BindMW(mw *MW, b MWBind) (uint32, error) {
	return qp.eng().BindMW(mw.eng(), b.engine())
}

// SRQ is a shared receive queue (ibv_srq).
type SRQ struct{ x engine.SRQ }

// PostRecv posts receive WRs (ibv_post_srq_recv); it returns how many were
// posted and, if not all, why the next one was refused.
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	return s.eng().PostRecv(engineRecvWRs(wrs))
}

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() SRQAttr {
	return SRQAttr(s.eng().Query())
}

// Modify changes the limit (SRQAttrLimit) and/or size (SRQAttrMaxWR) (ibv_modify_srq).
// Setting a non-zero limit arms the limit event: when fewer WQEs than the
// limit remain, EventSRQLimitReached is raised once and the limit returns to 0.
func (s *SRQ) Modify(attr SRQAttr, mask SRQAttrMask) error {
	return s.eng().Modify(engine.SRQAttr(attr), engine.SRQAttrMask(mask))
}

// Destroy frees the SRQ (ibv_destroy_srq); EBUSY while QPs use it.
func (s *SRQ) Destroy() error {
	return s.eng().Destroy()
}

// AH is an address handle (ibv_ah): a resolved destination for UD sends.
type AH struct{ x engine.AH }

// Attr returns the AH's address vector.
func (ah *AH) Attr() AHAttr {
	a := ah.eng().Attr()
	return *ahAttrOf(&a)
}

// Destroy frees the AH (ibv_destroy_ah).
func (ah *AH) Destroy() error {
	return ah.eng().Destroy()
}

// FakeClock is a manual Clock for deterministic tests: time stands still
// until Advance moves it, and timers fire (synchronously, in deadline
// order, in Advance's goroutine) when it passes their deadline.
type FakeClock struct{ x engine.FakeClock }

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	return c.eng().Now()
}

// AfterFunc starts a timer that calls f once the clock passes now+d.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer {
	return c.eng().AfterFunc(d, f)
}

// Advance moves the clock forward by d, firing due timers.
func (c *FakeClock) Advance(d time.Duration) {
	c.eng().Advance(d)
}
