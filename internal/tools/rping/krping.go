package rping

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/verbs"
)

func init() {
	registerCmd(&cli.Command{Name: "krping", Summary: "the kernel krping test (ping, wlat, rlat, bw) as a user-space tool over rdma_cm", Run: runKrping})
}

func krpingUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: softroce krping [--pcap FILE] server|client,addr=IP[,port=N][,count=N][,size=N][,validate][,verbose]")
	fmt.Fprintln(w, "                      [,wlat|,rlat|,bw][,duplex][,txdepth=N][,poll]")
	fmt.Fprintln(w, "  the option string written to /proc/krping, e.g. \"client,addr=192.168.11.22,port=9999,count=1\"")
	fmt.Fprintln(w, "  ping (default): client advertises, server RDMA READs and WRITEs back (validate checks every ping)")
	fmt.Fprintln(w, "  wlat: RDMA WRITE ping-pong latency; rlat: RDMA READ latency; bw: RDMA WRITE bandwidth")
	fmt.Fprintln(w, "  (duplex: both sides write); txdepth: WRITEs in flight (default 16); poll: rlat polls the CQ")
	fmt.Fprintln(w, "  timings are reported in krping's format, with nanoseconds where krping counts CPU cycles")
}

func runKrping(args []string, stdout, stderr io.Writer) int {
	// softroce's own options (--pcap) use the shared grammar; the operand
	// is krping's option string, as written to /proc/krping.
	g := cli.Getopt{Prog: "softroce krping"}
	var pcap string
	g.Str(0, "pcap", &pcap)
	ops, code, ok := g.ParseArgs(args, stdout, stderr, krpingUsage)
	if !ok {
		return code
	}
	if len(ops) != 1 {
		return cli.UsageErr(stderr, g.Prog, "want one option string, like client,addr=192.168.11.22,port=9999,count=1")
	}
	o, err := parseKrpingOpts(ops[0])
	if err != nil {
		return cli.UsageErr(stderr, g.Prog, "%v", err)
	}
	o.pcap = pcap
	if cli.ArgsOnly {
		return cli.ExitOK
	}
	return execKrping(o, stdout, stderr)
}

// krpingSwitches are krping's names of the options without a value that
// rping has too, with rping's letters (options.setSwitch).
var krpingSwitches = map[string]byte{"server": 's', "client": 'c', "verbose": 'v', "validate": 'V', "debug": 'd'}

// parseKrpingOpts parses krping's comma-separated option string.
func parseKrpingOpts(s string) (*options, error) {
	o := &options{server: -1, size: 64, txdepth: sqDepth, prefix: "krping: "}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if err := o.setKrping(f); err != nil {
			return nil, err
		}
	}
	switch {
	case o.size < 1 || o.size > bufSize:
		return nil, fmt.Errorf("Invalid size %d (valid range is 1 to %d)", o.size, bufSize)
	case o.server == -1:
		return nil, fmt.Errorf("must be either client or server")
	case b2i(o.wlat)+b2i(o.rlat)+b2i(o.bw) > 1:
		return nil, fmt.Errorf("Pick only one test: bw, rlat, wlat")
	case !o.addr.IsValid():
		return nil, fmt.Errorf("addr= is required (krping binds and connects to an IP address)")
	case o.port == 0:
		return nil, fmt.Errorf("port= is required")
	}
	if o.count == 0 && (o.wlat || o.rlat || o.bw) {
		o.count = 1000
	}
	return o, nil
}

// setKrping sets one krping option, "name" or "name=value".
func (o *options) setKrping(f string) error {
	name, val, hasVal := strings.Cut(f, "=")
	if c, ok := krpingSwitches[name]; ok {
		o.setSwitch(c)
		return nil
	}
	if p := o.krpingMode(name); p != nil {
		*p = true
		return nil
	}
	num := func() (int, error) {
		if !hasVal {
			return 0, fmt.Errorf("option %s needs a value (%s=N)", name, name)
		}
		v, err := strconv.ParseInt(val, 0, 32)
		if err != nil {
			return 0, fmt.Errorf("option %s: %q is not a number", name, val)
		}
		return int(v), nil
	}
	var err error
	switch name {
	case "addr", "addr6":
		if !hasVal || val == "" {
			return fmt.Errorf("option %s needs a value", name)
		}
		o.addr, err = lookupAddr(val)
	case "port":
		o.port, err = num()
		if err == nil && (o.port < 1 || o.port > 65535) {
			err = fmt.Errorf("port %d out of range (1..65535)", o.port)
		}
	case "count":
		var n int
		if n, err = num(); err == nil {
			err = o.setCount(n)
		}
	case "size":
		o.size, err = num()
	case "txdepth":
		o.txdepth, err = num()
		if err == nil && (o.txdepth < 1 || o.txdepth > 16384) {
			err = fmt.Errorf("txdepth %d out of range (1..16384)", o.txdepth)
		}
	case "tos", "server_inv", "local_dma_lkey", "read_inv", "mem_mode":
		// accepted for compatibility; no effect in softroce
	default:
		err = fmt.Errorf("unknown opt %s", f)
	}
	return err
}

// krpingMode returns the flag krping's option name sets (the test and its
// variants), or nil.
func (o *options) krpingMode(name string) *bool {
	switch name {
	case "wlat":
		return &o.wlat
	case "rlat":
		return &o.rlat
	case "bw":
		return &o.bw
	case "duplex":
		return &o.duplex
	case "poll":
		return &o.poll
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func execKrping(o *options, stdout, stderr io.Writer) int {
	return withRCB("krping", o, stdout, stderr, func(cb *rcb) int {
		if o.server == 1 {
			return cb.krpingServer()
		}
		return cb.krpingClient()
	})
}

// perfMode reports a latency/bandwidth test: no CQ thread, the test
// polls the CQ itself (krping leaves the CQ unarmed in these modes).
func (o *options) perfMode() bool { return o.wlat || o.rlat || o.bw }

func (cb *rcb) krpingServer() int {
	if ret := cb.awaitConnect(); ret != 0 {
		return ret
	}
	if !cb.o.perfMode() {
		return cb.serveConn(cb.testServer)
	}
	cb.polling = true
	return cb.serveConn(func() int {
		// Spin waiting for the client's Start STAG/TO/Len.
		for cb.getState() < stReadAdv {
			if !cb.spinRecv() {
				return -1
			}
		}
		if !cb.sendStart() {
			return -1
		}
		ok := true
		switch {
		case cb.o.wlat:
			ok = cb.wlatTest()
		case cb.o.bw && cb.o.duplex:
			ok = cb.bwTest()
		}
		// Wait for the client to disconnect.
		for cb.getState() != stDisconnected && cb.getState() != stError {
			cb.wait()
		}
		cb.mu.Lock()
		peerDone := cb.peerDone
		cb.mu.Unlock()
		// duplex: the client finishing first and disconnecting cuts the
		// server's last WRITEs short; that is krping's protocol, not a failure.
		if (!ok && !peerDone) || cb.getState() == stError {
			return -1
		}
		return 0
	})
}

func (cb *rcb) krpingClient() int {
	if !cb.o.perfMode() {
		return cb.clientSession(cb.testClient)
	}
	cb.polling = true
	return cb.clientSession(func() int {
		cb.setState(stReadAdv)
		if !cb.sendStart() {
			return -1
		}
		// Spin waiting for the server's Start STAG/TO/Len.
		for cb.getState() < stWriteAdv {
			if !cb.spinRecv() {
				return -1
			}
		}
		// A failed completion or a test that ended without its result
		// line is a failure (krping's tests return nothing: the module
		// load succeeds whatever happened).
		ok := false
		switch {
		case cb.o.wlat:
			ok = cb.wlatTest()
		case cb.o.rlat:
			ok = cb.rlatTest()
		case cb.o.bw:
			ok = cb.bwTest()
		}
		if !ok {
			return -1
		}
		return 0
	})
}

// sendStart sends this side's start buffer advertisement (STAG/TO/Len)
// and waits for its completion, polling.
func (cb *rcb) sendStart() bool {
	cb.formatSend(cb.startMR)
	if err := cb.postSendInfo(); err != nil {
		cb.errf("post send error %v\n", err)
		return false
	}
	return cb.spinSendCompletion()
}

// spinRecv polls for one completion, handling a receive as krping's CQ
// handler does; it fails when the connection breaks.
func (cb *rcb) spinRecv() bool {
	var wc [1]verbs.WC
	since := time.Now()
	for cb.pollCQ(wc[:]) == 0 || cb.isProbe(&wc[0]) {
		if s := cb.getState(); s == stError || s == stDisconnected {
			cb.errf("state %d waiting for the peer's advertisement\n", s)
			return false
		}
		cb.maybeProbe(&since)
		time.Sleep(10 * time.Microsecond)
	}
	if wc[0].Status != verbs.WCSuccess {
		cb.errf("cq completion failed status %d\n", wc[0].Status)
		return false
	}
	if wc[0].Opcode == verbs.WCRecv {
		cb.onRecv()
		cb.postRecv()
	}
	return true
}

func (cb *rcb) spinSendCompletion() bool {
	var wc [1]verbs.WC
	for {
		for cb.pollCQ(wc[:]) == 0 || cb.isProbe(&wc[0]) {
			if s := cb.getState(); s == stError || s == stDisconnected {
				return false
			}
			time.Sleep(10 * time.Microsecond)
		}
		if wc[0].Status != verbs.WCSuccess {
			cb.errf("send completion error %d\n", wc[0].Status)
			return false
		}
		if wc[0].Opcode == verbs.WCRecv { // the peer's advertisement came first
			cb.onRecv()
			cb.postRecv()
			continue
		}
		return true
	}
}

// pause backs off a busy-wait loop after its n-th turn: krping spins in
// the kernel, but a spinning user process would starve the thread that
// receives the packets it waits for, so after a short spin it sleeps.
func pause(n int) {
	if n < 64 {
		runtime.Gosched()
		return
	}
	time.Sleep(time.Microsecond)
}

// pollOne busy-polls one completion (krping's do { ib_poll_cq } while (ne == 0)).
func (cb *rcb) pollOne(wc *[1]verbs.WC) bool {
	for n := 0; cb.pollCQ(wc[:]) == 0 || cb.isProbe(&wc[0]); n++ {
		if n&255 == 255 {
			if s := cb.getState(); s == stError || s == stDisconnected {
				cb.errf("state = ERROR, bailing\n")
				return false
			}
		}
		pause(n)
	}
	return true
}

func (cb *rcb) wcError(wc *verbs.WC) bool {
	if wc.Status == verbs.WCSuccess {
		return false
	}
	if wc.Status == verbs.WCWRFlushErr && cb.o.duplex {
		// The CM moves the QP to ERR, which flushes it, before the
		// DISCONNECTED event reaches this goroutine: give the event a moment
		// so a peer that simply finished first is not reported as an error.
		for i := 0; i < 1000 && cb.getState() != stDisconnected; i++ {
			time.Sleep(time.Millisecond)
		}
	}
	if wc.Status == verbs.WCWRFlushErr && cb.getState() == stDisconnected {
		// duplex: the peer finished first and disconnected
		cb.errf("peer disconnected before the test ended (work request %d flushed)\n", int(wc.WRID))
		cb.mu.Lock()
		cb.peerDone = true
		cb.mu.Unlock()
		return true
	}
	cb.setCQErr()
	cb.setState(stError)
	if wc.Status == verbs.WCRetryExcErr {
		cb.errf("%sconnection lost: the peer stopped answering (a work request got no ACK after the transport's retries: status %d, %v)\n",
			cb.whoPrefix(), int(wc.Status), wc.Status)
	}
	cb.errf("Completion wth error at %s:\n", cb.role())
	cb.errf("Failed status %d: wr_id %d\n", wc.Status, int(wc.WRID))
	return true
}

// firstByte reads the first byte of b, which the peer's RDMA WRITEs change
// (krping spins on it through a volatile pointer); an atomic load keeps the
// compiler from caching it.
func firstByte(b []byte) byte {
	w := atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[0])))
	return (*[4]byte)(unsafe.Pointer(&w))[0] // byte 0 is the first in memory on any endianness
}

func (cb *rcb) postWrite(wrid uint64) error {
	_, err := cb.qp.PostSend([]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		RemoteAddr: cb.remoteAddr, RKey: cb.remoteRKey,
		SGList: []verbs.SGE{{Addr: cb.rdmaMR.Addr(), Length: uint32(cb.o.size), LKey: cb.rdmaMR.LKey()}}}})
	return err
}

// postTimed posts RDMA WRITE number *scnt and counts it, adding the time
// the post took to cs for the first cs.n iterations (krping's sum_post).
func (cb *rcb) postTimed(scnt *int, cs *cycleStats) bool {
	t0 := time.Now()
	if err := cb.postWrite(uint64(*scnt)); err != nil {
		cb.errf("Couldn't post send: scnt=%d\n", *scnt)
		return false
	}
	if *scnt < cs.n {
		cs.sumPost += time.Since(t0)
	}
	*scnt++
	return true
}

// completeTimed waits for completion number *ccnt, counts it and checks
// it, adding the wait to cs for the first cs.n iterations (krping's
// sum_poll and sum_last_poll). ok is false when the wait or the completion
// failed; wcErr, when it was the completion (wcError has reported it).
func (cb *rcb) completeTimed(wc *[1]verbs.WC, ccnt *int, cs *cycleStats) (ok, wcErr bool) {
	t0 := time.Now()
	if !cb.pollOne(wc) {
		return false, false
	}
	if *ccnt < cs.n {
		d := time.Since(t0)
		cs.sumPoll += d
		cs.sumLast += d
	}
	*ccnt++
	if cb.wcError(&wc[0]) {
		return false, true
	}
	return true, false
}

// cycleStats accumulates krping's per-iteration post and poll times (in
// nanoseconds where krping counts cycles) over the first 1000 iterations.
type cycleStats struct {
	n                         int
	sumPost, sumPoll, sumLast time.Duration
}

func (cb *rcb) report(start time.Time, iters int, cs *cycleStats) {
	el := time.Since(start)
	sec, usec := int64(el/time.Second), int64(el%time.Second/time.Microsecond)
	if cs == nil {
		cb.printf(cb.stdout, "krping: delta sec %d delta usec %d iter %d size %d\n", sec, usec, iters, cb.o.size)
		return
	}
	cb.printf(cb.stdout, "krping: delta sec %d delta usec %d iter %d size %d cycle_iters %d sum_post %d sum_poll %d sum_last_poll %d\n",
		sec, usec, iters, cb.o.size, cs.n, cs.sumPost.Nanoseconds(), cs.sumPoll.Nanoseconds(), cs.sumLast.Nanoseconds())
}

// wlatTest is krping's wlat_test: an RDMA WRITE ping-pong; each side spins
// on the first byte of its start buffer, which the peer's WRITE sets to
// the iteration number.
func (cb *rcb) wlatTest() bool {
	iters := cb.o.count
	cs := &cycleStats{n: min(1000, iters)}
	server := cb.o.server == 1
	var scnt, rcnt, ccnt int
	var wc [1]verbs.WC
	start := time.Now()
	for scnt < iters || ccnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && !server) {
			rcnt++
			since := time.Now()
			for n := 0; firstByte(cb.startBuf) != byte(rcnt); n++ {
				if n&255 == 255 {
					if s := cb.getState(); s == stError || s == stDisconnected || cb.reapProbe() {
						cb.errf("state = ERROR, bailing\n")
						return false
					}
					// Our WRITEs are all complete here: a dead peer
					// would leave this loop spinning forever.
					cb.maybeProbe(&since)
				}
				pause(n)
			}
		}
		if scnt < iters {
			cb.rdmaBuf[0] = byte(scnt + 1)
			if !cb.postTimed(&scnt, cs) {
				return false
			}
		}
		if ccnt < iters {
			if ok, wcErr := cb.completeTimed(&wc, &ccnt, cs); !ok {
				if wcErr {
					cb.errf("scnt=%d, rcnt=%d, ccnt=%d\n", scnt, rcnt, ccnt)
				}
				return false
			}
		}
	}
	cb.report(start, scnt, cs)
	return true
}

// rlatTest is krping's rlat_test: count RDMA READs of size bytes, one at a
// time, waiting for each (busy-polling with poll, else on CQ events).
func (cb *rcb) rlatTest() bool {
	var wc [1]verbs.WC
	start := time.Now()
	scnt := 0
	for ; scnt < cb.o.count; scnt++ {
		if err := cb.postRDMA(verbs.WRRDMARead, cb.o.size); err != nil {
			cb.errf("Couldn't post send: ret=%v scnt %d\n", err, scnt)
			return false
		}
		if cb.o.poll {
			if !cb.pollOne(&wc) {
				return false
			}
		} else if !cb.waitOne(&wc) {
			return false
		}
		if cb.wcError(&wc[0]) {
			return false
		}
	}
	cb.report(start, scnt, nil)
	return true
}

// waitOne waits for one completion through the completion channel.
func (cb *rcb) waitOne(wc *[1]verbs.WC) bool {
	for {
		if cb.pollCQ(wc[:]) == 1 {
			return true
		}
		if err := cb.cq.ReqNotify(false); err != nil {
			return false
		}
		if cb.pollCQ(wc[:]) == 1 {
			return true
		}
		select {
		case <-cb.cc.C():
			cb.cq.AckEvents(1)
		case <-time.After(100 * time.Millisecond):
			if s := cb.getState(); s == stError || s == stDisconnected {
				cb.errf("state == ERROR...bailing\n")
				return false
			}
		}
	}
}

// bwTest is krping's bw_test: count RDMA WRITEs of size bytes with up to
// txdepth in flight.
func (cb *rcb) bwTest() bool {
	iters := cb.o.count
	cs := &cycleStats{n: min(1000, iters)}
	var scnt, ccnt int
	var wc [1]verbs.WC
	start := time.Now()
	for scnt < iters || ccnt < iters {
		for scnt < iters && scnt-ccnt < cb.o.txdepth {
			if !cb.postTimed(&scnt, cs) {
				return false
			}
		}
		if ccnt < iters {
			if ok, _ := cb.completeTimed(&wc, &ccnt, cs); !ok {
				return false
			}
		}
	}
	cb.report(start, scnt, cs)
	return true
}
