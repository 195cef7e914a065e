package perftest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/verbs"
)

// resources holds one side's verbs resources: per QP a send region and a
// receive region (the one advertised to the peer as VAddr) in one MR.
type resources struct {
	c       *config
	td      *toolkit.ToolDevice
	dev     *verbs.Device
	pd      *verbs.PD
	buf     []byte
	huge    *mem.Mmap   // --use_hugepages: the buffer's provider (nil: Go memory)
	mapped  bool        // --mmap: the buffer is the file's mapping
	mrs     []*verbs.MR // one over the whole buffer, or with --mr_per_qp one per QP's two regions
	region  int         // bytes per region
	scq     *verbs.CQ
	rcq     *verbs.CQ
	srq     *verbs.SRQ // --use-srq on a receiving side: every QP's receives
	cpu     *cpuUsage  // --cpu_util: the running size's sampler (nil: none)
	sch     *verbs.CompChannel
	rch     *verbs.CompChannel
	qps     []*verbs.QP
	ahs     []*verbs.AH
	qpIndex map[uint32]int
	local   []oob.PerftestDest
	remote  []oob.PerftestDest
	mtu     verbs.MTU
	posted  bool              // receives posted
	qpAttr  *verbs.QPInitAttr // -R: for rdma_cm's QPs
	watch   *peerWatch        // nil: no TCP side channel to watch
}

func (r *resources) sendOff(q int) int { return 2 * q * r.region }
func (r *resources) recvOff(q int) int { return (2*q + 1) * r.region }

// mr is the MR that holds QP q's regions.
func (r *resources) mr(q int) *verbs.MR { return r.mrs[min(q, len(r.mrs)-1)] }

// addr is the address of byte off of the buffer (every MR is over it,
// not zero-based).
func (r *resources) addr(off int) uint64 { return r.mrs[0].Addr() + uint64(off) }

func newResources(c *config, td *toolkit.ToolDevice, gid verbs.GID) (_ *resources, err error) {
	r := &resources{c: c, td: td, dev: td.Dev, qpIndex: map[uint32]int{}}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	maxSize := c.size
	if c.all {
		maxSize = 1 << 23
	}
	r.region = max(maxSize, cycleBuffer)
	if c.qpType() == verbs.QPTypeUD {
		r.region += toolkit.GRHLen
	}
	r.region = (r.region + cycleBuffer - 1) &^ (cycleBuffer - 1)
	if c.mmapFile != "" {
		// perftest's pp_init_mmap, which wins over --use_hugepages; the
		// buffer then filled as perftest's create_single_mr fills it.
		if r.buf, err = mmap(c.mmapFile, c.mmapOffset, 2*c.numQP*r.region); err != nil {
			return nil, err
		}
		r.mapped = true
		fill(r.buf, c.tool.lat && c.tool.verb == verbWrite)
	} else if c.hugePages {
		// perftest's shmget(SHM_HUGETLB): reserved huge pages or nothing.
		n := 2 * c.numQP * r.region
		r.huge = mem.NewMmap(mem.MmapOptions{HugePages: mem.HugeRequire})
		if r.buf, err = r.huge.Alloc(n); err != nil {
			r.huge = nil
			if errors.Is(err, mem.ErrNoHugePages) {
				err = fmt.Errorf("not enough free reserved huge pages for the buffers' %.1f MiB: reserve more, e.g. sysctl vm.nr_hugepages=%d (2 MiB each)",
					float64(n)/(1<<20), (n+2<<20-1)/(2<<20)+8)
			}
			return nil, fmt.Errorf("Failed to allocate hugepages. Please configure hugepages (%w)\n Failed to allocate hugepage region.", err)
		}
	} else {
		r.buf = make([]byte, 2*c.numQP*r.region)
	}
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	parts := [][]byte{r.buf}
	if c.mrPerQP {
		parts = parts[:0]
		for q := range c.numQP {
			parts = append(parts, r.buf[r.sendOff(q):r.sendOff(q)+2*r.region])
		}
	}
	for _, b := range parts {
		mr, err := r.pd.RegMR(b, acc)
		if err != nil {
			return nil, fmt.Errorf("Couldn't allocate MR: %w", err)
		}
		r.mrs = append(r.mrs, mr)
	}
	r.sch, r.rch = r.dev.CreateCompChannel(), r.dev.CreateCompChannel()
	// Deep queues on many QPs would ask for more entries than a CQ has:
	// the CQ holds what it can (perftest's QPs share it the same way).
	maxCQE := r.dev.QueryDevice().MaxCQE
	if r.scq, err = r.dev.CreateCQ(min(c.txDepth*c.numQP+1, maxCQE), nil, r.sch); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	if r.rcq, err = r.dev.CreateCQ(min(c.rxDepth*c.numQP+1, maxCQE), nil, r.rch); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	rx := 1
	if c.tool.verb == verbSend {
		rx = c.rxDepth
	}
	typ := c.qpType()
	ia := &verbs.QPInitAttr{SendCQ: r.scq, RecvCQ: r.rcq, QPType: typ,
		Cap: verbs.QPCap{MaxSendWR: uint32(c.txDepth), MaxRecvWR: uint32(rx), MaxSendSGE: 1, MaxRecvSGE: 1,
			MaxInlineData: uint32(c.inline)}}
	if c.useSRQ && r.receives() {
		if r.srq, err = r.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(c.rxDepth), MaxSGE: 1}, nil); err != nil {
			return nil, fmt.Errorf("Couldn't create SRQ: %w", err)
		}
		ia.SRQ = r.srq
	}
	if c.rdmaCM {
		// The QPs come from rdma_cm (cmChannel.connectTraffic).
		r.qpAttr = ia
		r.ahs = make([]*verbs.AH, c.numQP)
		return r, nil
	}
	for i := 0; i < c.numQP; i++ {
		qp, err := r.pd.CreateQP(ia)
		if err != nil {
			return nil, fmt.Errorf("Couldn't create QP: %w", err)
		}
		a := &verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: uint8(c.ibPort), QKey: qKey}
		m := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
		switch typ {
		case verbs.QPTypeUD:
			m |= verbs.QPAttrQKey
		case verbs.QPTypeUC:
			a.QPAccessFlags = verbs.AccessRemoteWrite | verbs.AccessLocalWrite
			m |= verbs.QPAttrAccessFlags
		default:
			a.QPAccessFlags = verbs.AccessRemoteWrite | verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
			m |= verbs.QPAttrAccessFlags
		}
		if err := qp.Modify(a, m); err != nil {
			return nil, fmt.Errorf("Failed to modify QP to INIT: %w", err)
		}
		r.qpIndex[qp.QPN()] = i
		r.qps = append(r.qps, qp)
		r.local = append(r.local, oob.PerftestDest{OutReads: uint16(c.outReads), QPN: qp.QPN(), PSN: toolkit.RandPSN(),
			RKey: r.mr(i).RKey(), VAddr: r.addr(r.recvOff(i)), GID: gid})
	}
	r.ahs = make([]*verbs.AH, c.numQP)
	return r, nil
}

// close releases what the run created on the device, in verbs' order:
// QPs (rdma_cm's belong to its IDs, cmChannel.close), AHs, the SRQ, the CQs,
// the MRs (waiting for payloads still lent to the kernel), the PD; and the
// huge page buffers or --mmap's mapping. Each step ignores what failed before it.
func (r *resources) close() {
	if !r.c.rdmaCM {
		for _, qp := range r.qps {
			qp.Destroy()
		}
	}
	for _, ah := range r.ahs {
		if ah != nil {
			ah.Destroy()
		}
	}
	if r.srq != nil {
		r.srq.Destroy()
	}
	for _, cq := range []*verbs.CQ{r.scq, r.rcq} {
		if cq != nil {
			cq.Destroy()
		}
	}
	for _, mr := range r.mrs {
		mr.Deregister()
	}
	if r.pd != nil {
		r.pd.Dealloc()
	}
	if r.huge != nil {
		r.huge.Free(r.buf)
	}
	if r.mapped {
		munmap(r.buf)
	}
}

// connect is ctx_connect: every QP to RTR and RTS with perftest's attributes.
func (r *resources) connect() error {
	c := r.c
	for i, qp := range r.qps {
		d := &r.remote[i]
		if d.GID == ([16]byte{}) {
			return fmt.Errorf("remote QP %#06x sent no GID (peer run without -x?): RoCE needs a GID on both sides", d.QPN)
		}
		ah := verbs.AHAttr{IsGlobal: true, SL: uint8(c.sl), PortNum: uint8(c.ibPort),
			GRH: verbs.GlobalRoute{DGID: d.GID, SGIDIndex: uint8(c.gidx), HopLimit: 0xFF, TrafficClass: c.trafficClass()}}
		switch c.qpType() {
		case verbs.QPTypeUD:
			if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
				return fmt.Errorf("Failed to modify QP %#06x to RTR: %w", qp.QPN(), err)
			}
			if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: r.local[i].PSN}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
				return fmt.Errorf("Failed to modify QP %#06x to RTS: %w", qp.QPN(), err)
			}
			a, err := r.pd.CreateAH(&ah)
			if err != nil {
				return fmt.Errorf("Failed to create AH: %w", err)
			}
			r.ahs[i] = a
			continue
		case verbs.QPTypeUC:
			a := &verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: r.mtu, DestQPNum: d.QPN, RQPSN: d.PSN, AHAttr: ah}
			if err := qp.Modify(a, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN); err != nil {
				return fmt.Errorf("Failed to modify QP %#06x to RTR: %w", qp.QPN(), err)
			}
			if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: r.local[i].PSN}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
				return fmt.Errorf("Failed to modify QP %#06x to RTS: %w", qp.QPN(), err)
			}
			continue
		}
		a := &verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: r.mtu, DestQPNum: d.QPN, RQPSN: d.PSN,
			MaxDestRdAtomic: uint8(c.outReads), MinRNRTimer: minRNRTimer, AHAttr: ah}
		if err := qp.Modify(a, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			return fmt.Errorf("Failed to modify QP %#06x to RTR: %w", qp.QPN(), err)
		}
		out := min(max(int(d.OutReads), 1), 128)
		a = &verbs.QPAttr{QPState: verbs.QPStateRTS, Timeout: uint8(c.qpTimeout), RetryCnt: 7, RNRRetry: 7,
			SQPSN: r.local[i].PSN, MaxRdAtomic: uint8(out)}
		if err := qp.Modify(a, verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
			verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic); err != nil {
			return fmt.Errorf("Failed to modify QP %#06x to RTS: %w", qp.QPN(), err)
		}
	}
	return nil
}

// receives reports whether this side posts receives (send tests: the
// server of send_bw, both sides of send_lat).
func (r *resources) receives() bool {
	return r.c.tool.verb == verbSend && (r.c.tool.lat || r.c.isServer())
}

func (r *resources) recvWR(q int) [1]verbs.RecvWR {
	return [1]verbs.RecvWR{{WRID: uint64(q), SGList: []verbs.SGE{{Addr: r.addr(r.recvOff(q)),
		Length: uint32(r.region), LKey: r.mr(q).LKey()}}}}
}

// ready posts the receive queues (once; they are refilled as they drain).
func (r *resources) ready(int) error {
	if !r.receives() || r.posted {
		return nil
	}
	r.posted = true
	n := r.c.rxDepth
	if r.srq != nil {
		n /= len(r.qps) // as perftest: the SRQ's entries shared out by buffer
	}
	for q := range r.qps {
		wr := r.recvWR(q)
		for range n {
			if err := r.postRecv(q, wr[:]); err != nil {
				return err
			}
		}
	}
	return nil
}

// postRecv posts a receive for QP q's buffer: on the QP, or on the SRQ.
func (r *resources) postRecv(q int, wr []verbs.RecvWR) error {
	var err error
	if r.srq != nil {
		_, err = r.srq.PostRecv(wr)
	} else {
		_, err = r.qps[q].PostRecv(wr)
	}
	if err != nil {
		return fmt.Errorf("Couldn't post receive: %w", err)
	}
	return nil
}

// sendWR builds QP q's work request of the test for size bytes.
func (r *resources) sendWR(q, size int) verbs.SendWR {
	c := r.c
	wr := verbs.SendWR{WRID: uint64(q)}
	local := r.addr(r.sendOff(q))
	switch c.tool.verb {
	case verbSend:
		wr.Opcode = verbs.WRSend
		if c.qpType() == verbs.QPTypeUD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = r.ahs[q], r.remote[q].QPN, qKey
		}
	case verbWrite:
		wr.Opcode = verbs.WRRDMAWrite
	case verbRead:
		wr.Opcode = verbs.WRRDMARead
	case verbAtomic:
		if c.atomicType == "CMP_AND_SWAP" {
			wr.Opcode = verbs.WRAtomicCmpAndSwp
		} else {
			wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, 1
		}
	}
	if c.tool.verb != verbSend {
		wr.RemoteAddr, wr.RKey = r.remote[q].VAddr, r.remote[q].RKey
	}
	wr.SGList = []verbs.SGE{{Addr: local, Length: uint32(size), LKey: r.mr(q).LKey()}}
	if size <= c.inline && (c.tool.verb == verbSend || c.tool.verb == verbWrite) {
		wr.Flags |= verbs.SendInline
	}
	return wr
}

func (r *resources) waiter(ctx context.Context, cq *verbs.CQ, ch *verbs.CompChannel) *toolkit.CQWaiter {
	w := &toolkit.CQWaiter{Ctx: ctx, CQ: cq, Ch: ch}
	if r.watch != nil {
		w.Alive = r.watch.check
	}
	if r.c.tool.lat {
		w.Spin = toolkit.LatencySpin
	}
	if r.c.events {
		w.Spin = 1
	}
	return w
}

// errWCFailed marks a failed completion; its text is empty so that the
// message keeps perftest's words.
var errWCFailed = errors.New("")

// wcError is perftest's NOTIFY_COMP_ERROR_SEND (client: the counts of
// posted and completed sends) or NOTIFY_COMP_ERROR_RECV (server: the
// receives), printed after a leading space.
func wcError(side string, e *verbs.WC, a, b uint64) error {
	counts := fmt.Sprintf("scnt=%d, ccnt=%d", a, b)
	if side == "server" {
		counts = fmt.Sprintf(" rcnt=%d", a)
	}
	return fmt.Errorf("Completion with error at %s\n Failed status %d: wr_id %d syndrom 0x%x\n%s%w",
		side, e.Status, e.WRID, e.VendorErr, counts, errWCFailed)
}

// drainWait bounds, after a -D run's time is up, the wait for the last
// completions.
func (r *resources) drainGrace() time.Duration {
	return 2*retryBudget(r.c.qpTimeout, 7) + 2*time.Second
}

// warmUp is perftest's --perform_warm_up: QP by QP, -t messages, each
// signaled, and a wait for their completions, before the measured run.
func (r *resources) warmUp(ctx context.Context, wrs [][1]verbs.SendWR, w *toolkit.CQWaiter) error {
	var wc [16]verbs.WC
	for q, qp := range r.qps {
		wr := wrs[q]
		wr[0].Flags |= verbs.SendSignaled
		for i := range r.c.txDepth {
			if _, err := qp.PostSend(wr[:]); err != nil {
				return fmt.Errorf("Couldn't post send during warm up: qp %d scnt=%d: %w\n Problems with warm up", q, i, err)
			}
		}
		for left := r.c.txDepth; left > 0; {
			ne := r.scq.Poll(wc[:])
			if ne == 0 {
				if err := ctx.Err(); err != nil {
					return errors.New("interrupted")
				}
				if err := w.Idle(); err != nil {
					return err
				}
				continue
			}
			w.Progress()
			for i := range wc[:ne] {
				if wc[i].Status != verbs.WCSuccess {
					return fmt.Errorf("%w\n Problems with warm up", wcError("client", &wc[i], uint64(r.c.txDepth), uint64(r.c.txDepth-left)))
				}
			}
			left -= ne
		}
	}
	return nil
}

// pacer is perftest's SW rate limiter (--rate_limit_type=SW): the client
// posts bursts of burst messages, across its QPs in turn, one burst every
// burst/pps seconds. The deadlines add up, so a client that fell behind
// catches up with bursts back to back and the average holds. A nil
// *pacer lets everything through.
type pacer struct {
	gap      time.Duration
	next     time.Time // when the next burst may start
	burst, n int       // messages per burst; left in the current one
}

func newPacer(pps float64, burst int, start time.Time) *pacer {
	if pps <= 0 {
		return nil
	}
	return &pacer{gap: time.Duration(float64(burst) / pps * float64(time.Second)), next: start, burst: burst}
}

// open starts a burst if none is running and its time has come; it
// reports whether messages may be posted.
func (p *pacer) open(now time.Time) bool {
	if p == nil || p.n > 0 {
		return true
	}
	if now.Before(p.next) {
		return false
	}
	p.next = p.next.Add(p.gap)
	p.n = p.burst
	return true
}

func (p *pacer) sending() bool { return p == nil || p.n > 0 }

func (p *pacer) sent() {
	if p != nil {
		p.n--
	}
}

// wait is how long until the next burst may start (0: now, or no limit).
func (p *pacer) wait(now time.Time) time.Duration {
	if p == nil || p.n > 0 {
		return 0
	}
	return max(p.next.Sub(now), 0)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// flushQPs moves every QP to the error state: their traffic stops and
// their outstanding work requests complete with WR_FLUSH_ERR, unread.
func (r *resources) flushQPs() {
	for _, qp := range r.qps {
		_ = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	}
}

// traffic runs one message size and returns what the tool reports.
func (r *resources) traffic(ctx context.Context, size int, prog *progress) (sizeResult, error) {
	c := r.c
	res := sizeResult{size: size}
	var err error
	switch {
	case !c.tool.lat && !c.isServer():
		res.bw, err = r.bwClient(ctx, size, prog)
	case !c.tool.lat && c.tool.verb == verbSend:
		res.bw, err = r.bwServer(ctx, size, prog)
	case !c.tool.lat:
		// write/read/atomic BW server: passive, the client's report is shown.
	case c.tool.verb == verbWrite || c.tool.verb == verbSend || !c.isServer():
		var lr latRun
		switch c.tool.verb {
		case verbWrite:
			lr, err = r.latWrite(ctx, size, prog)
		case verbSend:
			lr, err = r.latSend(ctx, size, prog)
		default:
			lr, err = r.latOne(ctx, size, prog)
		}
		res.lat, res.latAvg, res.latIter, res.latPeriod = lr.deltas, lr.avg, lr.iters, lr.period
	}
	res.bw.Size = uint64(size)
	res.cpu, r.cpu = r.cpu.util(), nil
	return res, err
}

// bwUnits converts bytes per second to the report's unit.
func (c *config) bwUnits(bytesPerSec float64) float64 {
	if c.reportGbits {
		return bytesPerSec / 125e6
	}
	return bytesPerSec / 0x100000
}

// peakLimit bounds the O(n²) peak computation (perftest computes it over
// all iterations; softroce over the first peakLimit).
const peakLimit = 20000

func (r *resources) bwClient(ctx context.Context, size int, prog *progress) (oob.BWReport, error) {
	b := r.newBWRun(size)
	stopProg := prog.run(b.totC.Load)
	defer stopProg()
	w := r.waiter(ctx, r.scq, r.sch)
	if size >= parkAtOnceSize {
		w.Spin = 1
	}
	var wc [16]verbs.WC
	if b.c.warmUp && b.c.tool.verb != verbSend {
		if err := r.warmUp(ctx, b.wrs, w); err != nil {
			return oob.BWReport{}, err
		}
	}
	b.begin(time.Now())
	for {
		now := time.Now()
		if b.dur > 0 && !b.stopped && now.Sub(b.start) >= b.dur {
			b.stopped, b.stoppedAt = true, now
		}
		if err := b.post(now); err != nil {
			return oob.BWReport{}, err
		}
		ne := r.scq.Poll(wc[:])
		if ne > 0 {
			w.Progress()
			if err := b.reap(wc[:ne], time.Now()); err != nil {
				return oob.BWReport{}, err
			}
		}
		if b.done() {
			break
		}
		if b.stopped && b.smp != nil {
			// With margins the measured period is over: the run ends here,
			// as perftest's, without waiting for the work still posted
			// (-q 256 QPs of 1 MiB at perftest's default -t 128 have 32
			// GiB posted, ten seconds here). The QPs go to the error state,
			// which stops their traffic and flushes what is left.
			r.flushQPs()
			break
		}
		if b.stopped && time.Since(later(b.last, b.stoppedAt)) > r.drainGrace() {
			// Without margins the run is measured to its last completion:
			// what is posted is waited for (counting it is what makes the
			// bytes moved over the time taken; the pipeline's fill would
			// be missing otherwise), as long as completions keep coming.
			return oob.BWReport{}, fmt.Errorf("completions still missing %v after the last one, %v after the %v of -D: the peer stopped answering",
				r.drainGrace(), time.Since(b.stoppedAt).Round(time.Millisecond), b.dur)
		}
		if ne == 0 {
			if err := b.idle(ctx, w); err != nil {
				return oob.BWReport{}, err
			}
		}
	}
	return b.report(), nil
}

// parkAtOnceSize is the message size from which a bandwidth client parks
// on its completion channel at its first empty poll instead of yielding
// (toolkit.CQWaiter): its completions come tens of microseconds apart, and
// each yield runs the scheduler for nothing (a 1 MiB stream's sender spent
// about 12 µs of CPU per MiB on them; docs/speed.md). Small messages keep
// spinning: their completions come every few microseconds.
const parkAtOnceSize = 64 << 10

// bwRun is a bandwidth client's run of one size: what bwClient's loop
// posts, counts and times, per QP.
type bwRun struct {
	r    *resources
	c    *config
	size int
	dur  time.Duration // -D; 0: -n iterations per QP
	keep bool          // record the times for the peak

	wrs                 [][1]verbs.SendWR
	scnt, ccnt          []int   // posted and completed, per QP
	tposted, tcompleted []int64 // for the peak: ns since start, the first peakLimit
	totC                atomic.Uint64

	start           time.Time
	smp             *marginSampler
	pace            *pacer
	stopped         bool      // -D is over: no more posts
	stoppedAt, last time.Time // when it stopped; the last completion
}

func (r *resources) newBWRun(size int) *bwRun {
	c := r.c
	n := len(r.qps)
	b := &bwRun{r: r, c: c, size: size, dur: time.Duration(c.duration) * time.Second, keep: c.duration == 0 && !c.noPeak,
		wrs: make([][1]verbs.SendWR, n), scnt: make([]int, n), ccnt: make([]int, n)}
	if b.keep {
		k := min(c.iters*n, peakLimit)
		b.tposted, b.tcompleted = make([]int64, 0, k), make([]int64, 0, k)
	}
	for q := range b.wrs {
		b.wrs[q][0] = r.sendWR(q, size)
	}
	return b
}

// begin starts the measured period, its samplers and the pacer.
func (b *bwRun) begin(start time.Time) {
	b.start = start
	b.smp = b.c.sampler(start)
	b.r.cpu = b.c.cpuSampler(start)
	b.pace = newPacer(b.c.ratePPS(b.size), b.c.burstSize, start)
}

// post posts on every QP while it has room (-t), the pacer allows and
// the run wants more, signalling every -Q-th and the last.
func (b *bwRun) post(now time.Time) error {
	c := b.c
	for q, qp := range b.r.qps {
		if !b.pace.open(now) {
			break
		}
		for b.scnt[q]-b.ccnt[q] < c.txDepth && b.pace.sending() {
			if b.dur == 0 && b.scnt[q] >= c.iters {
				break
			}
			if b.stopped && b.scnt[q]%c.cqMod == 0 {
				break
			}
			wr := &b.wrs[q][0]
			wr.Flags &^= verbs.SendSignaled
			if (b.scnt[q]+1)%c.cqMod == 0 || (b.dur == 0 && b.scnt[q]+1 == c.iters) {
				wr.Flags |= verbs.SendSignaled
			}
			if _, err := qp.PostSend(b.wrs[q][:]); err != nil {
				return fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", q, b.scnt[q], err)
			}
			if b.keep && len(b.tposted) < cap(b.tposted) {
				b.tposted = append(b.tposted, time.Since(b.start).Nanoseconds())
			}
			b.scnt[q]++
			b.pace.sent()
		}
	}
	return nil
}

// reap counts the completions wcs, polled at now: each covers the
// unsignalled work requests before it.
func (b *bwRun) reap(wcs []verbs.WC, now time.Time) error {
	c := b.c
	for i := range wcs {
		e := &wcs[i]
		if e.Status != verbs.WCSuccess {
			var posted int
			for _, v := range b.scnt {
				posted += v
			}
			return wcError("client", e, uint64(posted), b.totC.Load())
		}
		q := int(e.WRID)
		if q >= len(b.ccnt) {
			return fmt.Errorf("completion for unknown wr_id %d", e.WRID)
		}
		next := (b.ccnt[q]/c.cqMod + 1) * c.cqMod
		if b.dur == 0 {
			next = min(next, c.iters)
		}
		covered := next - b.ccnt[q]
		b.ccnt[q] = next
		b.totC.Add(uint64(covered))
		if b.smp != nil {
			b.smp.add(now, uint64(covered))
		}
		for range covered {
			if b.keep && len(b.tcompleted) < cap(b.tcompleted) {
				b.tcompleted = append(b.tcompleted, now.Sub(b.start).Nanoseconds())
			}
		}
	}
	b.last = now
	return nil
}

// done reports whether every QP has completed its run: -n iterations, or
// with -D all it posted before the time was up.
func (b *bwRun) done() bool {
	for q := range b.scnt {
		if b.dur == 0 && b.ccnt[q] < b.c.iters || b.dur > 0 && (!b.stopped || b.ccnt[q] < b.scnt[q]) {
			return false
		}
	}
	return true
}

// idle waits when a poll found nothing: parked on the CQ when no QP has
// room to post, else until the pacer's next burst; it fails when the run
// is cancelled or the peer is gone.
func (b *bwRun) idle(ctx context.Context, w *toolkit.CQWaiter) error {
	c := b.c
	room := false
	for q := range b.scnt {
		if b.scnt[q]-b.ccnt[q] < c.txDepth && (b.dur == 0 && b.scnt[q] < c.iters || b.dur > 0 && !b.stopped) {
			room = true
		}
	}
	if !room {
		return w.Idle()
	}
	if d := b.pace.wait(time.Now()); d > 0 {
		time.Sleep(min(d, 10*time.Millisecond)) // nothing to do before the next burst
		return nil
	}
	if err := ctx.Err(); err != nil {
		return errors.New("interrupted")
	}
	return b.r.watch.check()
}

// report is the run's result: #iterations counts all QPs' messages, as
// perftest's does (-n per QP times -q; with -D, the completions of the
// measured period).
func (b *bwRun) report() oob.BWReport {
	c := b.c
	iters := b.totC.Load()
	secs := b.last.Sub(b.start).Seconds()
	if b.smp != nil {
		iters, secs = b.smp.result()
	}
	if secs <= 0 {
		secs = 1e-9
	}
	rep := oob.BWReport{Size: uint64(b.size), Iters: iters}
	rep.BWAvg = c.bwUnits(float64(b.size) * float64(iters) / secs)
	rep.MsgRateAvg = float64(iters) / secs / 1e6
	if b.keep {
		rep.BWPeak = b.r.peak(b.size, b.tposted, b.tcompleted)
	}
	return rep
}

// peak is perftest's peak bandwidth: the best rate over any run of
// consecutive iterations, min over i<=j of (completed[j]-posted[i])/(j-i+1).
func (r *resources) peak(size int, posted, completed []int64) float64 {
	k := min(len(posted), len(completed))
	best := int64(-1)
	bestN := int64(1)
	for i := 0; i < k; i++ {
		for j := i; j < k; j++ {
			d := completed[j] - posted[i]
			// d/(j-i+1) < best/bestN
			if d > 0 && (best < 0 || d*bestN < best*int64(j-i+1)) {
				best, bestN = d, int64(j-i+1)
			}
		}
	}
	if best <= 0 {
		return 0
	}
	perIter := float64(best) / float64(bestN) / 1e9
	return r.c.bwUnits(float64(size) / perIter)
}

// bwServer receives the messages of send_bw and measures its own rate.
func (r *resources) bwServer(ctx context.Context, size int, prog *progress) (oob.BWReport, error) {
	c := r.c
	n := len(r.qps)
	dur := time.Duration(c.duration) * time.Second
	total := uint64(c.iters * n)
	wrs := make([][1]verbs.RecvWR, n)
	for q := range wrs {
		wrs[q] = r.recvWR(q)
	}
	var rcnt atomic.Uint64
	stopProg := prog.run(rcnt.Load)
	defer stopProg()
	w := r.waiter(ctx, r.rcq, r.rch)
	var wc [16]verbs.WC
	var first, last time.Time
	begin := time.Now()
	smp := c.sampler(begin)
	r.cpu = c.cpuSampler(begin)
	ud := c.qpType() == verbs.QPTypeUD
	for {
		if dur == 0 && rcnt.Load() >= total {
			break
		}
		now := time.Now()
		if dur > 0 && now.Sub(begin) >= dur && now.Sub(last) > 100*time.Millisecond {
			break
		}
		if ud && !last.IsZero() && now.Sub(last) > 2*time.Second {
			break // UD drops are not retransmitted: report what arrived
		}
		// A client without margins sends what it has posted after its -D
		// (bwClient): as long as the run itself, then it is stuck.
		if dur > 0 && now.Sub(begin) > 2*dur+r.drainGrace() {
			return oob.BWReport{}, fmt.Errorf("no end of traffic %v after the %v of -D: the peer does not stop sending", dur+r.drainGrace(), dur)
		}
		ne := r.rcq.Poll(wc[:])
		if ne == 0 {
			if err := w.Idle(); err != nil {
				return oob.BWReport{}, err
			}
			continue
		}
		w.Progress()
		now = time.Now()
		if first.IsZero() {
			first = now
		}
		last = now
		for i := range wc[:ne] {
			e := &wc[i]
			if e.Status != verbs.WCSuccess {
				return oob.BWReport{}, wcError("server", e, rcnt.Load(), 0)
			}
			q := int(e.WRID)
			if q >= n {
				return oob.BWReport{}, fmt.Errorf("completion for unknown wr_id %d", e.WRID)
			}
			if dur == 0 || now.Sub(begin) < dur {
				rcnt.Add(1)
			}
			if smp != nil {
				smp.add(now, 1)
			}
			if err := r.postRecv(q, wrs[q][:]); err != nil {
				return oob.BWReport{}, err
			}
		}
	}
	got := rcnt.Load()
	secs := last.Sub(first).Seconds()
	if smp != nil {
		got, secs = smp.result()
	}
	if secs <= 0 {
		secs = 1e-9
	}
	rep := oob.BWReport{Size: uint64(size), Iters: got} // all QPs', as perftest's
	rep.BWAvg = c.bwUnits(float64(size) * float64(got) / secs)
	rep.MsgRateAvg = float64(got) / secs / 1e6
	return rep, nil
}

// loadByte reads b[i] with an atomic load of its aligned 4-byte word, so
// that a poll loop sees the engine's RDMA WRITE into the buffer. b must
// start 4-byte aligned (Go heap allocations do) and len(b) be a multiple of 4.
func loadByte(b []byte, i int) byte {
	v := atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[i&^3])))
	var x [4]byte
	*(*uint32)(unsafe.Pointer(&x)) = v
	return x[i&3]
}

// spinPolls is how many times spinWait polls before sleeping between
// polls (write_lat, on one processor: see toolkit.OneProc).
const spinPolls = toolkit.LatencySpin

// errDeadline ends a wait when a -D run's time is up.
var errDeadline = errors.New("duration over")

// spinWait spins (yielding) until cond holds, checking ctx and the
// deadline (zero: none) now and then.
func spinWait(ctx context.Context, deadline time.Time, watch *peerWatch, cond func() bool) error {
	for n := 1; !cond(); n++ {
		if n&1023 == 0 {
			if ctx.Err() != nil {
				return errors.New("interrupted")
			}
			if err := watch.check(); err != nil {
				return err
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				return errDeadline
			}
		}
		if n > spinPolls {
			// The peer's write arrives through this process's receive
			// goroutine: sleeping lets it run instead of competing with a
			// spinning poller for the processors.
			time.Sleep(time.Microsecond)
			continue
		}
		runtime.Gosched()
	}
	return nil
}

// waitOne waits for one completion on cq (until the deadline, if set).
func waitOne(w *toolkit.CQWaiter, cq *verbs.CQ, side string, posted, done int, deadline time.Time) (verbs.WC, error) {
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return wc[0], errDeadline
		}
		if err := w.Idle(); err != nil {
			return wc[0], err
		}
	}
	w.Progress()
	if wc[0].Status != verbs.WCSuccess {
		if side == "server" {
			return wc[0], wcError(side, &wc[0], uint64(done), 0)
		}
		return wc[0], wcError(side, &wc[0], uint64(posted), uint64(done))
	}
	return wc[0], nil
}

func (r *resources) side() string {
	if r.c.isServer() {
		return "server"
	}
	return "client"
}

// latRun is the outcome of a ping-pong latency run: the successive-post
// deltas (iterations mode) or the average per iteration (-D).
type latRun struct {
	deltas []time.Duration
	avg    time.Duration
	iters  uint64
	period time.Duration // -D: the measured period the iterations took
}

// latLoop drives the ping-pong of write_lat and send_lat, as perftest's
// run_iter_lat_write/run_iter_lat_send: wait for the peer's message, post
// ours, wait for our send's completion. The side that sends first skips its
// first wait: the server in write_lat, the client in send_lat (perftest's
// send_lat server polls its receive queue first). With -D both sides stop
// when their time is up.
func (r *resources) latLoop(ctx context.Context, prog *progress, serverFirst bool, recv func(n int, deadline time.Time) error,
	send func(n int) error) (latRun, error) {
	c := r.c
	sendsFirst := c.isServer() == serverFirst
	w := r.waiter(ctx, r.scq, r.sch)
	lc, stopProg := r.startLat(prog)
	defer stopProg()
	dur := lc.dur
	var deadline time.Time
	limit := c.iters
	if dur > 0 {
		limit = int(^uint(0) >> 1)
		deadline = lc.start.Add(dur)
	}
	scnt, ccnt, rcnt := 0, 0, 0
	for scnt < limit || ccnt < limit || rcnt < limit {
		if dur > 0 && time.Now().After(deadline) {
			break
		}
		if rcnt < limit && !(scnt < 1 && sendsFirst) {
			rcnt++
			if err := recv(rcnt, deadline); err != nil {
				if errors.Is(err, errDeadline) {
					break
				}
				return latRun{}, err
			}
		}
		if scnt < limit {
			if c.latencyGap > 0 {
				// perftest's --latency_gap: a busy wait before each post.
				for until := time.Now().Add(time.Duration(c.latencyGap) * time.Microsecond); time.Now().Before(until); {
				}
			}
			lc.posted()
			scnt++
			if err := send(scnt); err != nil {
				return latRun{}, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if ccnt < limit {
			if _, err := waitOne(w, r.scq, r.side(), scnt, ccnt, deadline); err != nil {
				if errors.Is(err, errDeadline) {
					break
				}
				return latRun{}, err
			}
			ccnt++
			lc.completed(ccnt)
		}
	}
	return lc.result(ccnt)
}

// latWrite: each side writes the peer's buffer and polls its own for the
// peer's write (the message's last byte carries the count).
func (r *resources) latWrite(ctx context.Context, size int, prog *progress) (latRun, error) {
	wr := [1]verbs.SendWR{r.sendWR(0, size)}
	wr[0].Flags |= verbs.SendSignaled
	sendBuf := r.buf[r.sendOff(0):]
	recvAt := r.recvOff(0) + size - 1
	return r.latLoop(ctx, prog, true, func(n int, deadline time.Time) error {
		want := byte(n)
		return spinWait(ctx, deadline, r.watch, func() bool { return loadByte(r.buf, recvAt) == want })
	}, func(n int) error {
		sendBuf[size-1] = byte(n)
		_, err := r.qps[0].PostSend(wr[:])
		return err
	})
}

// latSend: a SEND ping-pong; each receive is reposted as it completes.
func (r *resources) latSend(ctx context.Context, size int, prog *progress) (latRun, error) {
	wr := [1]verbs.SendWR{r.sendWR(0, size)}
	wr[0].Flags |= verbs.SendSignaled
	rwr := r.recvWR(0)
	rw := r.waiter(ctx, r.rcq, r.rch)
	return r.latLoop(ctx, prog, false, func(n int, deadline time.Time) error {
		if _, err := waitOne(rw, r.rcq, r.side(), n, n-1, deadline); err != nil {
			return err
		}
		return r.postRecv(0, rwr[:])
	}, func(int) error {
		_, err := r.qps[0].PostSend(wr[:])
		return err
	})
}

// latOne is run_iter_lat for READ and atomics: post, wait, repeat.
func (r *resources) latOne(ctx context.Context, size int, prog *progress) (latRun, error) {
	c := r.c
	wr := [1]verbs.SendWR{r.sendWR(0, size)}
	wr[0].Flags |= verbs.SendSignaled
	w := r.waiter(ctx, r.scq, r.sch)
	lc, stopProg := r.startLat(prog)
	defer stopProg()
	n := 0
	for {
		if lc.dur == 0 && n >= c.iters || lc.dur > 0 && time.Since(lc.start) >= lc.dur {
			break
		}
		lc.posted()
		if _, err := r.qps[0].PostSend(wr[:]); err != nil {
			return latRun{}, fmt.Errorf("Couldn't post send: scnt=%d: %w", n, err)
		}
		if _, err := waitOne(w, r.scq, "client", n+1, n, time.Time{}); err != nil {
			return latRun{}, err
		}
		n++
		lc.completed(n)
	}
	return lc.result(n)
}

// latClock is a latency run's bookkeeping: the time of each post (with
// -n: the latencies are their intervals), the count the progress line
// shows, and -D's margin sampler.
type latClock struct {
	dur time.Duration
	// tposted holds, with -n, each post's time in ns since start, as
	// perftest's cycles_t array: 8 bytes an iteration and no pointers.
	// A []time.Time (24 bytes, with its *Location) of -n 100000000 was
	// 2.4 GB the collector had to scan: the cycle its allocation started
	// took 16 s of CPU on one processor, and the exit (OneProc's
	// GOMAXPROCS, which stops the world) waited for it, so a side whose
	// peer was killed still ran 30 s later on a loaded machine.
	tposted []int64
	cnt     atomic.Uint64
	start   time.Time
	smp     *marginSampler
}

// startLat starts a latency run's clock, and its progress line until stop.
func (r *resources) startLat(prog *progress) (lc *latClock, stop func()) {
	c := r.c
	lc = &latClock{dur: time.Duration(c.duration) * time.Second}
	if lc.dur == 0 {
		lc.tposted = make([]int64, 0, c.iters)
	}
	stop = prog.run(lc.cnt.Load)
	lc.start = time.Now()
	lc.smp = c.sampler(lc.start)
	r.cpu = c.cpuSampler(lc.start)
	return lc, stop
}

// posted notes the time of a post (with -n).
func (lc *latClock) posted() {
	if lc.dur == 0 {
		lc.tposted = append(lc.tposted, int64(time.Since(lc.start)))
	}
}

// completed notes the n-th completed iteration.
func (lc *latClock) completed(n int) {
	lc.cnt.Store(uint64(n))
	if lc.smp != nil {
		lc.smp.add(time.Now(), 1)
	}
}

// result is the run of n iterations.
func (lc *latClock) result(n int) (latRun, error) {
	if lc.dur > 0 {
		return durationLat(lc.smp, lc.start, uint64(n))
	}
	return latRun{deltas: intervals(lc.tposted), iters: uint64(n)}, nil
}

// intervals returns the deltas between successive times (ns since a
// start).
func intervals(t []int64) []time.Duration {
	if len(t) < 2 {
		return nil
	}
	d := make([]time.Duration, len(t)-1)
	for i := range d {
		d[i] = time.Duration(t[i+1] - t[i])
	}
	return d
}
