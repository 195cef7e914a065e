//go:build linux && cgo && softroce_capi

package main

/*
#include "capi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"runtime"

	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/verbs"
	"github.com/softroce/softroce/wire"
)

// Environment variables the library reads.
const (
	// envDevice names the one device the process sees (softroce exec -d):
	// a link, a netdev or an address, as the Go tools' -d.
	envDevice = "SOFTROCE_DEVICE"
	// envAddr is the IP address (or IP:port) the device binds, overriding
	// the link's or the automatic loopback choice.
	envAddr = "SOFTROCE_ADDR"
	// envDebug turns on the library's debug log on stderr.
	envDebug = "SOFTROCE_DEBUG"
	// envBusyPoll is how long the receive loop keeps polling after each
	// batch (verbs.Config.BusyPoll; default 0).
	envBusyPoll = "SOFTROCE_BUSY_POLL"
	// envMonitorSlack is the timer slack, in ns, of the Go runtime's
	// monitor thread (misc.c); the library's constructor reads it.
	envMonitorSlack = "SOFTROCE_MONITOR_SLACK_NS"
	// envAutoNet is the /24 the automatic loopback choice searches
	// (default 127.0.0), so tests can keep clear of other users of 4791.
	envAutoNet = "SOFTROCE_AUTO_NET"
)

// devSpec is one device of the list: what the Go tools would open for it.
type devSpec struct {
	info toolkit.Device
	// auto: a loopback device with no fixed address; each process binds
	// the first 127.0.0.x whose UDP port 4791 is free.
	auto bool
	// spare are addresses of the device's netdev to bind, in order, when
	// another process holds UDP 4791 on info.Addr (toolkit.LibraryDevice).
	spare []netip.Addr
	// index is the device's place in the list.
	index int
}

// openDev is a device some context of this process has open: one Go
// verbs.Device per listed device, shared by the contexts (and so by
// verbs objects and, later, rdma_cm ids).
type openDev struct {
	spec devSpec
	dev  *verbs.Device
	refs int
	ctxs map[*devCtx]struct{}
	stop chan struct{}
	done chan struct{}
}

var (
	devMu    sync.Mutex
	devList  []devSpec
	devErr   error
	devOnce  sync.Once
	devsOpen = map[int]*openDev{}
)

func loadDevices() {
	devOnce.Do(func() {
		devs, skipped, err := toolkit.LibraryDevices(os.Getenv(envDevice))
		if err != nil {
			devErr = err
			warn("%s=%s: %v", envDevice, os.Getenv(envDevice), err)
			return
		}
		for _, e := range skipped {
			warn("%v", e)
		}
		for _, d := range devs {
			devList = append(devList, devSpec{info: d.Device, auto: d.Auto, spare: d.Spare, index: len(devList)})
		}
	})
}

func warn(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "softroce: "+format+"\n", args...)
}

//export srgo_num_devices
func srgo_num_devices() C.int {
	loadDevices()
	if devErr != nil {
		return -C.int(syscall.ENODEV)
	}
	return C.int(len(devList))
}

//export srgo_device_info
func srgo_device_info(i C.int, name *C.char, n C.int, guid *C.uint64_t) C.int {
	loadDevices()
	if int(i) < 0 || int(i) >= len(devList) {
		return -1
	}
	s := devList[i]
	b := unsafe.Slice((*byte)(unsafe.Pointer(name)), int(n))
	m := copy(b[:len(b)-1], s.info.Name)
	b[m] = 0
	devMu.Lock()
	od := devsOpen[int(i)]
	devMu.Unlock()
	if od != nil {
		*guid = C.uint64_t(od.dev.QueryDevice().NodeGUID)
	} else {
		*guid = C.uint64_t(verbs.NodeGUIDFor(s.info.Addr.Addr(), toolkit.DeviceMAC(s.info.Netdev)))
	}
	return 0
}

//export srgo_num_comp_vectors
func srgo_num_comp_vectors() C.int { return C.int(possibleCPUs()) }

// possibleCPUs is what rxe reports as num_comp_vectors (the kernel's
// num_possible_cpus()): the CPUs /sys/devices/system/cpu/possible lists,
// else runtime.NumCPU().
var possibleCPUs = sync.OnceValue(func() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/possible"); err == nil {
		if n := countCPUList(strings.TrimSpace(string(b))); n > 0 {
			return n
		}
	}
	return max(runtime.NumCPU(), 1)
})

// countCPUList counts the CPUs of a kernel CPU list ("0-3,8,10-11"); 0 if
// it does not parse.
func countCPUList(s string) int {
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}

// devCtx is one ibv_context: its device and its async event queue.
type devCtx struct {
	od   *openDev
	idx  int
	cptr unsafe.Pointer // struct ibv_context *

	events eventQueue[asyncItem]
}

// asyncItem is an async event waiting for ibv_get_async_event; reported
// counts the events of its object handed to the program, which the
// object's destroy waits to see acknowledged (rdma-core's events_completed).
type asyncItem struct {
	ev       C.struct_ibv_async_event
	owner    any
	reported *atomic.Uint32
}

// dropEvents forgets the pending events of a destroyed object.
func (c *devCtx) dropEvents(owner any) {
	c.events.drop(func(it asyncItem) bool { return it.owner == owner })
}

//export srgo_open
func srgo_open(idx C.int, cctx *C.struct_ibv_context, asyncFd C.int, errp *C.int) C.uintptr_t {
	loadDevices()
	if int(idx) < 0 || int(idx) >= len(devList) {
		*errp = C.int(syscall.ENODEV)
		return 0
	}
	opened := false
	defer func() {
		if opened {
			settleHeap() // after devMu is released
		}
	}()
	devMu.Lock()
	defer devMu.Unlock()
	od := devsOpen[int(idx)]
	if od == nil {
		dev, err := openDevice(devList[idx])
		if err != nil {
			warn("%v", err)
			*errp = C.int(errnoOf(err, syscall.ENODEV))
			return 0
		}
		// The port came up before any context existed: a context hears
		// only of events after it opened, as from the kernel.
	drain:
		for {
			select {
			case <-dev.AsyncEvents():
			default:
				break drain
			}
		}
		od = &openDev{spec: devList[idx], dev: dev, ctxs: map[*devCtx]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
		devsOpen[int(idx)] = od
		go od.routeAsync()
		opened = true
	}
	c := &devCtx{od: od, idx: int(idx), cptr: unsafe.Pointer(cctx)}
	c.events.fd = int(asyncFd)
	h := handles.add(c)
	if h == 0 {
		*errp = C.int(syscall.ENOMEM)
		return 0
	}
	od.refs++
	od.ctxs[c] = struct{}{}
	return C.uintptr_t(h)
}

//export srgo_close
func srgo_close(h C.uintptr_t) C.int {
	c, ok := lookup[*devCtx](uintptr(h))
	if !ok {
		return C.int(syscall.EINVAL)
	}
	handles.remove(uintptr(h))
	devMu.Lock()
	od := c.od
	delete(od.ctxs, c)
	od.refs--
	last := od.refs == 0
	var ag *cm.Agent
	if last {
		delete(devsOpen, c.idx)
		ag = agents[od.dev]
		delete(agents, od.dev)
	}
	devMu.Unlock()
	if !last {
		return 0
	}
	// Outside devMu: the event router takes it to deliver an event the
	// closing device raises, and the close waits for the router.
	if os.Getenv(envDebug) != "" {
		logStats(od.dev)
	}
	appendStats(od.dev, ag)
	close(od.stop)
	if ag != nil {
		ag.Close()
	}
	od.dev.Close()
	<-od.done
	return 0
}

// openDevice binds the device's UDP socket and starts its engine.
func openDevice(s devSpec) (*verbs.Device, error) {
	info := s.info
	if v := os.Getenv(envMonitorSlack); v != "" {
		// The constructor left the slack alone for a value it could not read.
		if _, err := strconv.ParseUint(v, 10, 64); err != nil {
			return nil, fmt.Errorf("%s=%s: want nanoseconds such as 200000, or 0 for the default timer slack", envMonitorSlack, v)
		}
	}
	if a, ok := wantAddr[s.index]; ok {
		// rdma_bind_addr named the address before any context opened it.
		delete(wantAddr, s.index)
		info.Addr, s.auto, s.spare = netip.AddrPortFrom(a, info.Addr.Port()), false, nil
	} else if a := os.Getenv(envAddr); a != "" {
		ap, err := toolkit.ParseDeviceAddr(a)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %v", envAddr, a, err)
		}
		info.Addr, s.auto, s.spare = ap, false, nil
	}
	var ep *udp.Endpoint
	var err error
	if s.auto {
		// Each process on one host gets its own loopback address.
		net := [3]byte{127, 0, 0}
		if v := os.Getenv(envAutoNet); v != "" {
			a, err := netip.ParseAddr(v + ".1")
			if err != nil || !a.Is4() || !a.IsLoopback() {
				return nil, fmt.Errorf("%s=%s: want the first three octets of a loopback /24, e.g. 127.0.0", envAutoNet, v)
			}
			b := a.As4()
			net = [3]byte{b[0], b[1], b[2]}
		}
		for x := 1; x < 255; x++ {
			ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{net[0], net[1], net[2], byte(x)}), wire.UDPPort)
			ep, err = udp.Listen(ap, toolkit.UDPOptions(info)...)
			if err == nil {
				info.Addr = ap
				break
			}
			if !errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("device %s: %v: %w", info.Name, ap, err)
			}
		}
		if ep == nil {
			return nil, fmt.Errorf("device %s: UDP port %d is in use on every address %d.%d.%d.1-254: set %s to a free address", info.Name, wire.UDPPort, net[0], net[1], net[2], envAddr)
		}
	} else {
		ep, err = udp.Listen(info.Addr, toolkit.UDPOptions(info)...)
		for _, a := range s.spare {
			if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
				break
			}
			// Another process has the device on its first address: take
			// the netdev's next one.
			ap := netip.AddrPortFrom(a, info.Addr.Port())
			if ep, err = udp.Listen(ap, toolkit.UDPOptions(info)...); err == nil {
				info.Addr = ap
			}
		}
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				who := udpHolder(info.Addr)
				if len(s.spare) > 0 {
					return nil, fmt.Errorf("device %s: UDP port %d is in use on every address of netdev %s: add an address to it, or set %s to a free one", info.Name, info.Addr.Port(), info.Netdev, envAddr)
				}
				return nil, fmt.Errorf("device %s: UDP %v is in use%s: another process has this device; give this one its own address (%s=IP, or softroce exec -d with another link)", info.Name, info.Addr, who, envAddr)
			}
			return nil, fmt.Errorf("device %s: %v: %w", info.Name, info.Addr, err)
		}
	}
	var cfg verbs.Config
	cfg.Name = info.Name
	cfg.MAC = toolkit.DeviceMAC(info.Netdev)
	cfg.LateSGECheck = true // rxe: a bad SGE is an error completion, not a failed post
	// SOFTROCE_BUSY_POLL=50us makes the receive loop poll its socket a
	// while after each batch, as the Go latency tools do: a reply then
	// needs no thread wake-up, at the cost of a processor, which a C
	// program's own polling thread already takes (off by default).
	if v := os.Getenv(envBusyPoll); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s=%s: want a duration such as 50us or 0", envBusyPoll, v)
		}
		cfg.BusyPoll = d
	}
	if os.Getenv(envDebug) != "" {
		cfg.Logger = debugLogger()
		cfg.Logger.Debug("softroce: the Go runtime's processors (setProcs)", "GOMAXPROCS", runtime.GOMAXPROCS(0), "cpus", allowedCPUs())
	}
	dev, err := verbs.Open(ep, &cfg)
	if err != nil {
		ep.Close()
		return nil, fmt.Errorf("device %s: %w", info.Name, err)
	}
	// The program's threads poll the link (ibv_poll_cq, rdma_get_cm_event):
	// what the first poll would allocate is allocated now, not in a
	// thread's first call (a stock cmtime client's event thread made it
	// inside the timed steps).
	dev.PreparePollLink()
	return dev, nil
}

// settleHeap collects the garbage now, after a device or its CM agent was
// set up (megabytes of receive buffers, which start the runtime's first
// collection), when the runtime has one processor: the program's threads
// then hold it while they call the library, and the collection ran on into
// their first timed work, its marking done by their allocations (stock
// cmtime's create qp step took 9.5 µs a connection against 5). It costs
// the call that opens a device, and the one that attaches its CM agent, a
// few ms each, once; it runs after devMu is released, but a caller may
// hold its own locks (the C side's CM mutex, an rsocket's), whose other
// users wait that long.
func settleHeap() {
	if runtime.GOMAXPROCS(0) == 1 {
		runtime.GC()
	}
}

// udpHolder names the process holding UDP address ap, as " by pid N
// (comm)", or "" when it cannot be known (another user's process).
func udpHolder(ap netip.AddrPort) string {
	inode := udpInode(ap)
	if inode == "" {
		return ""
	}
	want := "socket:[" + inode + "]"
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + p.Name() + "/fd")
		for _, fd := range fds {
			if l, _ := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name()); l == want {
				comm, _ := os.ReadFile("/proc/" + p.Name() + "/comm")
				return fmt.Sprintf(" by pid %s (%s)", p.Name(), strings.TrimSpace(string(comm)))
			}
		}
	}
	return ""
}

// udpInode finds the socket inode bound to ap in /proc/net/udp{,6}.
func udpInode(ap netip.AddrPort) string {
	file, want := "/proc/net/udp", ""
	if ap.Addr().Is4() {
		b := ap.Addr().As4()
		want = fmt.Sprintf("%02X%02X%02X%02X:%04X", b[3], b[2], b[1], b[0], ap.Port())
	} else {
		file = "/proc/net/udp6"
		b := ap.Addr().As16()
		for i := 0; i < 16; i += 4 {
			want += fmt.Sprintf("%02X%02X%02X%02X", b[i+3], b[i+2], b[i+1], b[i])
		}
		want += fmt.Sprintf(":%04X", ap.Port())
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == want {
			return f[9]
		}
	}
	return ""
}

// routeAsync hands the device's async events to the contexts whose objects
// they concern (port events to every context).
func (od *openDev) routeAsync() {
	defer close(od.done)
	for {
		select {
		case <-od.stop:
			return
		case ev, ok := <-od.dev.AsyncEvents():
			if !ok {
				return
			}
			od.route(ev)
		}
	}
}

func (od *openDev) route(ev verbs.AsyncEvent) {
	var ce C.struct_ibv_async_event
	ce.event_type = C.enum_ibv_event_type(ev.Type)
	elem := (*unsafe.Pointer)(unsafe.Pointer(&ce.element))
	var to *devCtx
	var owner any
	var reported *atomic.Uint32
	switch {
	case ev.QP != nil:
		r, ok := ev.QP.Context().(*qpRec)
		if !ok {
			return
		}
		*elem, to, owner, reported = r.cptr, r.ctx, r, &r.asyncReported
	case ev.CQ != nil:
		r, ok := ev.CQ.Context().(*cqRec)
		if !ok {
			return
		}
		*elem, to, owner, reported = r.cptr, r.ctx, r, &r.asyncReported
	case ev.SRQ != nil:
		r, ok := ev.SRQ.Context().(*srqRec)
		if !ok {
			return
		}
		*elem, to, owner, reported = r.cptr, r.ctx, r, &r.asyncReported
	case ev.MR != nil:
		return // no libibverbs event for a provider's revocation
	default:
		*(*C.int)(unsafe.Pointer(&ce.element)) = C.int(ev.Port)
	}
	devMu.Lock()
	defer devMu.Unlock()
	for c := range od.ctxs {
		if to == nil || to == c {
			c.events.push(asyncItem{ev: ce, owner: owner, reported: reported})
		}
	}
}

//export srgo_take_async_event
func srgo_take_async_event(h C.uintptr_t, ev *C.struct_ibv_async_event) C.int {
	c, ok := lookup[*devCtx](uintptr(h))
	if !ok {
		return C.int(syscall.EINVAL)
	}
	it, ok := c.events.take()
	if !ok {
		return 1
	}
	if it.reported != nil {
		it.reported.Add(1)
	}
	*ev = it.ev
	return 0
}

// dev returns the verbs device of context handle h.
func ctxDev(h C.uintptr_t) (*devCtx, *verbs.Device, bool) {
	c, ok := lookup[*devCtx](uintptr(h))
	if !ok {
		return nil, nil, false
	}
	return c, c.od.dev, true
}

// errnoOf is err's errno (verbs errors carry one), or def.
func errnoOf(err error, def syscall.Errno) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return def
}

func cerr(err error) C.int {
	if err == nil {
		return 0
	}
	return C.int(errnoOf(err, syscall.EINVAL))
}

//export srgo_query_device
func srgo_query_device(h C.uintptr_t, a *C.struct_ibv_device_attr) C.int {
	_, d, ok := ctxDev(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	v := d.QueryDevice()
	*a = C.struct_ibv_device_attr{}
	fw := unsafe.Slice((*byte)(unsafe.Pointer(&a.fw_ver[0])), len(a.fw_ver))
	copy(fw[:len(fw)-1], v.FWVer)
	a.node_guid = C.__be64(bits.ReverseBytes64(v.NodeGUID))
	a.sys_image_guid = C.__be64(bits.ReverseBytes64(v.SysImageGUID))
	a.max_mr_size = C.uint64_t(v.MaxMRSize)
	a.page_size_cap = C.uint64_t(v.PageSizeCap)
	a.vendor_id = C.uint32_t(v.VendorID)
	a.vendor_part_id = C.uint32_t(v.VendorPartID)
	a.hw_ver = C.uint32_t(v.HWVer)
	a.max_qp = C.int(v.MaxQP)
	a.max_qp_wr = C.int(v.MaxQPWR)
	a.device_cap_flags = C.uint(v.DeviceCapFlags)
	a.max_sge = C.int(v.MaxSGE)
	a.max_sge_rd = C.int(v.MaxSGERd)
	a.max_cq = C.int(v.MaxCQ)
	a.max_cqe = C.int(v.MaxCQE)
	a.max_mr = C.int(v.MaxMR)
	a.max_pd = C.int(v.MaxPD)
	a.max_qp_rd_atom = C.int(v.MaxQPRdAtom)
	a.max_ee_rd_atom = C.int(v.MaxEECRdAtom)
	a.max_res_rd_atom = C.int(v.MaxResRdAtom)
	a.max_qp_init_rd_atom = C.int(v.MaxQPInitRdAtom)
	a.atomic_cap = C.enum_ibv_atomic_cap(v.AtomicCap)
	a.max_mw = C.int(v.MaxMW)
	a.max_mcast_grp = C.int(v.MaxMcastGrp)
	a.max_mcast_qp_attach = C.int(v.MaxMcastQPAttach)
	a.max_total_mcast_qp_attach = C.int(v.MaxTotalMcastQPAttach)
	a.max_ah = C.int(v.MaxAH)
	a.max_srq = C.int(v.MaxSRQ)
	a.max_srq_wr = C.int(v.MaxSRQWR)
	a.max_srq_sge = C.int(v.MaxSRQSGE)
	a.max_pkeys = C.uint16_t(v.MaxPKeys)
	a.local_ca_ack_delay = C.uint8_t(v.LocalCAAckDelay)
	a.phys_port_cnt = C.uint8_t(v.PhysPortCnt)
	return 0
}

//export srgo_query_port
func srgo_query_port(h C.uintptr_t, port C.uint8_t, a *C.struct_ibv_port_attr) C.int {
	_, d, ok := ctxDev(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	p, err := d.QueryPort(uint8(port))
	if err != nil {
		return cerr(err)
	}
	a.state = C.enum_ibv_port_state(p.State)
	a.max_mtu = C.enum_ibv_mtu(p.MaxMTU)
	a.active_mtu = C.enum_ibv_mtu(p.ActiveMTU)
	a.gid_tbl_len = C.int(p.GIDTblLen)
	a.port_cap_flags = C.uint32_t(p.PortCapFlags)
	a.max_msg_sz = C.uint32_t(p.MaxMsgSz)
	a.pkey_tbl_len = C.uint16_t(p.PKeyTblLen)
	a.link_layer = C.uint8_t(p.LinkLayer)
	a.active_speed = C.uint8_t(p.ActiveSpeed)
	a.active_width = C.uint8_t(p.ActiveWidth)
	a.phys_state = C.uint8_t(p.PhysState)
	a.max_vl_num = 1 // rxe: one VL
	return 0
}

//export srgo_query_gid
func srgo_query_gid(h C.uintptr_t, port C.uint32_t, idx C.int, gid *C.union_ibv_gid) C.int {
	_, d, ok := ctxDev(h)
	if !ok || port > 255 {
		return C.int(syscall.EINVAL)
	}
	g, err := d.QueryGID(uint8(port), int(idx))
	if err != nil {
		return cerr(err)
	}
	*(*[16]byte)(unsafe.Pointer(gid)) = g
	return 0
}

//export srgo_gid_table_len
func srgo_gid_table_len(h C.uintptr_t) C.int {
	_, d, ok := ctxDev(h)
	if !ok {
		return 0
	}
	return C.int(len(d.GIDs()))
}

//export srgo_ifindex
func srgo_ifindex(h C.uintptr_t) C.uint32_t {
	c, _, ok := ctxDev(h)
	if !ok || c.od.spec.info.Netdev == "" {
		return 0
	}
	ifc, err := netInterfaceByName(c.od.spec.info.Netdev)
	if err != nil {
		return 0
	}
	return C.uint32_t(ifc)
}

//export srgo_query_pkey
func srgo_query_pkey(h C.uintptr_t, port C.uint8_t, idx C.int, pkey *C.uint16_t) C.int {
	_, d, ok := ctxDev(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	v, err := d.QueryPKey(uint8(port), int(idx))
	if err != nil {
		return cerr(err)
	}
	*pkey = C.uint16_t(v)
	return 0
}

// With SOFTROCE_STATS=FILE (toolkit.StatsEnv) the library appends to FILE
// the counters of every device it opened, and of the device's CM agent, as
// the Go tools do: when the device closes, or when the program ends with
// it still open (as rdma_cm programs and those killed by a signal do).
func init() {
	if os.Getenv(toolkit.StatsEnv) != "" {
		onExit(appendOpenStats)
	}
}

// statsWarned: an unwritable SOFTROCE_STATS file is reported once.
var statsWarned atomic.Bool

// appendStats appends the counter lines of d and of its agent a (nil:
// none) to $SOFTROCE_STATS, if set.
func appendStats(d *verbs.Device, a *cm.Agent) {
	if os.Getenv(toolkit.StatsEnv) == "" {
		return
	}
	text := toolkit.StatsLine(d)
	if a != nil {
		text += toolkit.AgentStatsLine(d, a)
	}
	if err := toolkit.AppendStats(text); err != nil && !statsWarned.Swap(true) {
		warn("%v", err)
	}
}

// appendOpenStats appends the counters of the devices still open (at the
// program's end).
func appendOpenStats() {
	type pair struct {
		d *verbs.Device
		a *cm.Agent
	}
	var open []pair
	devMu.Lock()
	for _, od := range devsOpen {
		open = append(open, pair{od.dev, agents[od.dev]})
	}
	devMu.Unlock()
	for _, p := range open {
		appendStats(p.d, p.a)
	}
}

// logStats prints the device's non-zero counters on stderr (SOFTROCE_DEBUG).
func logStats(d *verbs.Device) {
	var b strings.Builder
	d.Stats().Each(func(name string, v uint64) {
		if v != 0 {
			fmt.Fprintf(&b, " %s=%d", name, v)
		}
	})
	// The Go heap's allocation count so far, for the hot-path allocation
	// test (capi/capitest TestHotPathAllocs).
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	warn("device %s counters:%s go_mallocs=%d", d.Name(), b.String(), ms.Mallocs)
}
