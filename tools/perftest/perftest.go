package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/verbs"
)

// The perftest tools: ib_send_bw, ib_write_bw, ib_read_bw, ib_atomic_bw
// and the *_lat tools of perftest 4.5 (Debian bookworm 4.5+0.17), with the
// flags that matter, the same TCP side channel (cm/oob.PerftestConn) and
// the same banner and result table.

type verbKind int

const (
	verbSend verbKind = iota
	verbWrite
	verbRead
	verbAtomic
)

type toolSpec struct {
	name string
	test oob.PerftestTest
	verb verbKind
	lat  bool
}

var tools = []toolSpec{
	{"send_bw", oob.SendBW, verbSend, false},
	{"write_bw", oob.WriteBW, verbWrite, false},
	{"read_bw", oob.ReadBW, verbRead, false},
	{"atomic_bw", oob.AtomicBW, verbAtomic, false},
	{"send_lat", oob.SendLat, verbSend, true},
	{"write_lat", oob.WriteLat, verbWrite, true},
	{"read_lat", oob.ReadLat, verbRead, true},
	{"atomic_lat", oob.AtomicLat, verbAtomic, true},
}

func init() {
	for _, t := range tools {
		t := t
		kind := "bandwidth"
		if t.lat {
			kind = "latency"
		}
		op := map[verbKind]string{verbSend: "SEND", verbWrite: "RDMA WRITE", verbRead: "RDMA READ", verbAtomic: "atomic"}[t.verb]
		cli.Register(&cli.Command{Name: t.name, Summary: op + " " + kind + " benchmark, like perftest's ib_" + t.name,
			Run: func(args []string, stdout, stderr io.Writer) int { return runPerftest(t, args, stdout, stderr) }})
	}
}

// Perftest defaults and limits (perftest_parameters.h).
const (
	defItersBW  = 5000 // write_bw
	defItersLat = 1000 // every other test
	defSizeBW   = 65536
	defSizeLat  = 2
	atomicSize  = 8
	defTxBW     = 128
	defRx       = 512
	defCQMod    = 100
	// cqModSizeLimit is perftest's MSG_SIZE_CQ_MOD_LIMIT: larger messages
	// are not moderated by default.
	cqModSizeLimit = 8192
	maxMsgSize     = 8388608
	cycleBuffer    = 4096
	cacheLine      = 64
	qKey           = 0x11111111
	defQPTimeout   = 14
	minRNRTimer    = 12
	resultLine     = "---------------------------------------------------------------------------------------\n"
	maxQPs         = 16384 // perftest's MAX_QP_NUM
	defHopLimit    = 64    // perftest's DEF_HOP_LIMIT
	// compVectors is the completion vectors of a softroce device (its
	// ibv_devinfo's num_comp_vectors): one, 0.
	compVectors = 1
)

type config struct {
	tool        toolSpec
	dev         string
	ibPort      int
	tcpPort     int
	size        int
	sizeSet     bool
	iters       int
	itersSet    bool
	duration    int
	margin      int // -f: seconds at each end of a -D run left out of the result; -1: not given
	all         bool
	numQP       int
	mtu         int
	gidx        int
	gidxSet     bool // -x given (--ipv6 chooses the GID otherwise)
	conn        string
	reportGbits bool
	output      string // --output: "" (everything), bandwidth, message_rate or latency (that value alone)
	txDepth     int
	rxDepth     int
	cqMod       int
	cqModWarn   bool // -Q above 1 with messages above cqModSizeLimit: perftest's warning
	inline      int
	atomicType  string
	outReads    int
	sl          int
	qpTimeout   int
	tos         int
	tosSet      bool   // -T given (perftest's banner and report show the TOS of -R runs when given)
	tclassArg   string // --tclass as given
	tclassSet   bool
	tclass      int  // --tclass (tclassSet): the GRH's traffic class, which -T's sets otherwise
	outJSON     bool // --out_json: perftest's report file, written where the result line is printed
	jsonFile    string
	dontXchg    bool // --dont_xchg_versions: perftest's version check then fails at once
	events      bool
	noPeak      bool
	pcap        string
	server      string
	connectTO   time.Duration
	rdmaCM      bool    // -R: connect the QPs through rdma_cm (implies cmComm)
	cmComm      bool    // -z: exchange the side channel's data over an rdma_cm connection
	rateArg     string  // --rate_limit as given
	rateLimit   float64 // --rate_limit: 0, none; in rateUnits
	rateUnits   string  // --rate_units: M (MiB/s), g (Gb/s, the default) or p (messages/s)
	rateType    string  // --rate_limit_type: "" (none), SW, HW or PP
	burstSize   int     // --burst_size: messages per burst of the SW rate limiter (default -t)
	useSRQ      bool    // --use-srq: the receiving QPs share one SRQ of -r entries
	cpuUtil     bool    // --cpu_util: a CPU_Util[%] column (-D runs)
	warmUp      bool    // --perform_warm_up: -t messages per QP before the measured run (write, read, atomic BW)
	hugePages   bool    // --use_hugepages: the buffers in huge pages (hugetlbfs)
	retry       int     // --retry_count: the rdma_cm connections' retry count (retrySet)
	retrySet    bool
	mrPerQP     bool      // --mr_per_qp: an MR for each QP's regions instead of one for all
	latencyGap  int       // --latency_gap: microseconds of busy wait before each post (latency tests)
	limitArgs   [2]string // -w/--limit_bw and -y/--limit_msgrate as given
	limitBW     float64   // -w: the least average bandwidth (report units) that passes; -1: none
	limitRate   float64   // -y: the least message rate (Mpps) that passes; -1: none
	hopLimit    int       // -L: perftest's default 64; another value is for raw Ethernet QPs only
	vector      int       // -X: the completion vector (vectorSet); softroce devices have one, 0
	vectorSet   bool
	pkeyIndex   int    // --pkey_index: checked as perftest checks it; the QPs use the one P_Key
	mmapFile    string // --mmap: the buffers are this file, mapped shared at mmapOffset
	mmapOffset  int
	disablePCIR bool   // --disable_pcie_relaxed: the banner's "PCIe relax order: OFF"
	waitDestroy int    // --wait_destroy: seconds to wait before releasing the resources
	ipv6        bool   // --ipv6: without -x, an IPv6 GID rather than the IPv4-mapped one
	sourceIP    string // -j/--source_ip: checked as perftest does; no effect (below)
	reversed    bool   // --reversed: the traffic roles swapped (the server sends)
}

func (c *config) qpType() verbs.QPType {
	switch c.conn {
	case "UC":
		return verbs.QPTypeUC
	case "UD":
		return verbs.QPTypeUD
	}
	return verbs.QPTypeRC
}

// isServer reports whether this side has perftest's server role in the
// test itself (the passive side of write_bw, the receiver of send_bw):
// the side that waits for the connection, unless --reversed swaps the
// roles, as perftest's parser does with its machine after connecting.
func (c *config) isServer() bool { return c.listens() != c.reversed }

// listens reports whether this side waits for the side channel's
// connection (no server address given): perftest's servername, which
// decides who listens and who speaks first on the side channel whatever
// --reversed says.
func (c *config) listens() bool { return c.server == "" }

func usage(t toolSpec, w io.Writer) {
	fmt.Fprintf(w, `Usage:
  softroce %[1]s            start a server and wait for connection
  softroce %[1]s <host>     connect to server at <host>

Options (those of perftest 4.5 that softroce honours):
  -a, --all                  run sizes from 2 till 2^23
  -c, --connection=<RC/UC/UD> connection type (default RC; UC: send and write; UD: send)
  -d, --ib-dev=<dev>         device: a link, netdev or IP (default: the only link, else loopback)
  -D, --duration=<sec>       run for <sec> seconds instead of a number of iterations
  -f, --margin=<sec>         with -D, leave the first and last <sec> seconds out of the result
                             (default: a quarter of -D, rounded down, as perftest)
  -F, --CPU-freq             accepted: softroce measures with the monotonic clock, not CPU cycles
  -i, --ib-port=<port>       device port (default 1, the only one)
  -m, --mtu=<mtu>            path MTU, 256..4096 (default: the port's active MTU)
  -n, --iters=<iters>        number of exchanges (at least 5; default %[2]d)
  -p, --port=<port>          TCP port of the side channel (default 18515)
  -q, --qp=<num>             number of QPs (bandwidth tests)
  -s, --size=<size>          message size (default %[3]d)
  -t, --tx-depth=<dep>       send queue depth
  -r, --rx-depth=<dep>       receive queue depth (send tests)
  -Q, --cq-mod=<n>           generate a completion every <n> sends (bandwidth tests)
  -I, --inline_size=<size>   largest message sent inline (0..512)
  -o, --outs=<num>           outstanding reads/atomics (read and atomic tests)
  -A, --atomic_type=<type>   CMP_AND_SWAP or FETCH_AND_ADD (atomic tests)
  -x, --gid-index=<index>    GID index (default 1, the IP address)
  -S, --sl=<sl>              service level
  -u, --qp-timeout=<t>       QP timeout exponent (default 14)
  -T, --tos=<tos>            with -R: rdma_cm's type of service (the client's rdma_set_option, carried
                             in the REQ: both sides' GRH traffic class); without -R: the GRH's traffic
                             class (softroce's extension: perftest takes -T only with -R)
      --tclass=<value>       traffic class of the GRH, 0..255 (perftest's option for it): with -T
                             too, --tclass is the one the QPs use; no effect with -R, as perftest
  -e, --events               wait on completion events instead of polling (not write tests, as perftest)
  -N, --noPeak               do not compute the peak bandwidth
      --report_gbits         report bandwidth in Gb/s instead of MB/s
      --output=<what>        print only the result's value, one line per size: bandwidth or
                             message_rate (bandwidth tests), latency (latency tests: t_avg)
      --pcap=<file>          write the device's RoCEv2 traffic to a pcap file
      --out_json             also write the result to a file in perftest's JSON-like format (unquoted
                             keys), on each side that prints a result line; rewritten for each size
      --out_json_file=<file> the file's name (default perftest_out.json in the working directory);
                             one that cannot be written is a line on stderr and exit 1 after the run
                             (perftest says "failed to open" and exits 0)
      --dont_xchg_versions   do not exchange versions with the peer: every perftest 4.5 tool then
                             refuses the peer's empty version, and so does softroce, at once: exit 1
                             ("Current implementation is not compatible with versions older than 5.70")
  -R, --rdma_cm              connect the QPs and exchange the addresses through rdma_cm
                             (the server listens on -p; RC only)
  -z, --com_rdma_cm          exchange the addresses over an rdma_cm connection instead of TCP
      --cpu_util             with -D: a CPU_Util[%%] column, the share of all processors' time
                             in user mode over the measured period (/proc/stat, as perftest)
      --perform_warm_up      write, read and atomic BW tests: each QP sends -t messages, and
                             waits for them, before the measured run
      --use_hugepages        the buffers in huge pages (reserved: sysctl vm.nr_hugepages=N)
      --retry_count=<n>      with -R/-z: the rdma_cm connections' retry count, 0..7 (default 7)
      --mr_per_qp            register an MR for each QP's buffers instead of one for all
      --latency_gap=<usec>   latency tests: wait <usec> (busy) before each post
      --report-both          accepted: it concerns bidirectional runs, which softroce has not
      --use-srq              send tests: the receiving QPs share one SRQ of -r entries,
                             -r / -q receives posted for each QP's buffer
  -V, --version              print the perftest version softroce speaks (perftest's VERSION)
  -L, --hop_limit=<0..255>   raw Ethernet QPs only, as perftest: a value other than 64 exits 1
  -X, --vector=<num>         completion vector, with -e (softroce devices have one: 0)
      --pkey_index=<index>   P_Key index, checked against the device's max_pkeys (64) as perftest
                             (beyond: its warning, and 0); the QPs send with the one P_Key, 0xFFFF
      --ipv6                 without -x, the GID of the device's IPv6 address (perftest: an IPv6 GID)
      --mmap=<file>          the buffers are <file>, mapped shared read/write from --mmap-offset (which
                             must be a multiple of the page size); the file must be large enough,
                             and its bytes there are overwritten with the test's data, as perftest does
      --mmap-offset=<offset> where in the --mmap file the buffers start (default 0)
      --wait_destroy=<sec>   wait <sec> seconds before releasing the resources at the end
      --reversed             bandwidth tests: swap the roles: the server (no address given) sends
      --disable_pcie_relaxed the banner's "PCIe relax order: OFF" (softroce has no PCIe)
      --use_old_post_send    accepted: the banner's "ibv_wr* API : OFF" either way
      --flow_label=<label>   accepted, no effect: perftest uses it for raw Ethernet tests only
      --inline_recv=<size>   accepted, no effect: softroce has no inline receive
  -j, --source_ip=<ipv4>     accepted, no effect: perftest 4.5's getopt takes --source_ip for raw
                             Ethernet's -j, which RC/UC/UD tests check as an IPv4 address and ignore
      --comm_rdma_cm         -z's name in perftest's option table
  -w, --limit_bw=<value>     bandwidth tests: exit 1 ("Error: BW result is below bw limit")
                             when the average is below <value>, in the report's units
  -y, --limit_msgrate=<value> bandwidth tests: the same for the message rate, in Mpps

 Rate Limiter (bandwidth tests but atomic_bw, on the client):
      --rate_limit=<rate>        the most the client sends, in --rate_units (default Gb/s)
      --rate_units=<units>       M (MiB/s), g (Gb/s) or p (messages/s)
      --rate_limit_type=<type>   SW: bursts of --burst_size messages, evenly spaced (HW and PP
                                 are refused: softroce's QPs, as rxe's, have no rate limiter)
      --burst_size=<size>        messages per burst (default: -t)

 Refused, each with its reason: -b -l -O -g -M -H -U -C -W --run_infinitely --odp --use_cuda
 --use_cuda_bus_id --use_rocm --dlid --use_ooo --report-per-port --recv_post_list --force-link
 --typical_pkt_size, the raw Ethernet options (-B -E -J -K -k -Y -Z -P -v -G --tcp --raw_ipv6 ...),
 AES-XTS (--aes_xts ...) and DC (--log_dci_streams ...)
`, t.name, defIters(t), defaultSize(t))
}

// defIters is perftest's default -n: 5000 for write_bw (DEF_ITERS_WB),
// 1000 for every other test (DEF_ITERS). Both sides must agree, so a
// stock peer with the default counts the same messages.
func defIters(t toolSpec) int {
	if t.verb == verbWrite && !t.lat {
		return defItersBW
	}
	return defItersLat
}

func defaultSize(t toolSpec) int {
	switch {
	case t.verb == verbAtomic:
		return atomicSize
	case t.lat:
		return defSizeLat
	}
	return defSizeBW
}

func runPerftest(t toolSpec, args []string, stdout, stderr io.Writer) int {
	c, code, ok := parseArgs(t, args, stdout, stderr)
	if !ok {
		return code
	}
	if cli.ArgsOnly {
		return cli.ExitOK
	}
	if t.lat {
		defer toolkit.OneProc()()
	} else {
		defer toolkit.OneProcBulk()()
	}
	if err := c.checkHopLimit(); err != nil {
		fmt.Fprintf(stdout, " %v \n", err) // perftest's line, on stdout
		return cli.ExitFailure
	}
	if err := c.checkVersions(); err != nil {
		fmt.Fprintln(stderr, err) // perftest's line, as it prints it
		fmt.Fprintln(stderr, " (--dont_xchg_versions leaves the peer's version unknown, which perftest 4.5 refuses: run both sides without it)")
		return cli.ExitFailure
	}
	ctx, cancel := toolkit.SignalContext()
	defer cancel()
	if err := runConfig(ctx, c, stdout, stderr); err != nil {
		// One line for each failure (-w or -y, and --out_json's file).
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			fmt.Fprintf(stderr, " %v\n", e)
		}
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// checkHopLimit is perftest's check of -L in force_dependecies: a hop
// limit other than its default is for raw Ethernet QPs (exit 1).
func (c *config) checkHopLimit() error {
	if c.hopLimit != defHopLimit {
		return errors.New("Hop limit only valid for RawEth QP")
	}
	return nil
}

// checkVersions is perftest's check_version_compatibility after
// exchange_versions: with --dont_xchg_versions the peer's version stays
// empty, which every perftest 4.5 tool refuses as older than 5.70 (it
// exits 1 once the side channel is up; softroce, before connecting).
func (c *config) checkVersions() error {
	if c.dontXchg {
		return errors.New("Current implementation is not compatible with versions older than 5.70")
	}
	return nil
}

// parseArgs parses a command line of tool t. ok is false when the command is
// done: code is cli.ExitOK after -h and cli.ExitUsage after a usage error
// (printed on stderr).
func parseArgs(t toolSpec, args []string, stdout, stderr io.Writer) (c *config, code int, ok bool) {
	c = &config{tool: t, ibPort: 1, tcpPort: oob.DefaultPort, numQP: 1, gidx: 1, conn: "RC",
		atomicType: "FETCH_AND_ADD", qpTimeout: defQPTimeout, margin: -1, txDepth: -1, rxDepth: -1, cqMod: -1, outReads: -1,
		connectTO: 10 * time.Second, jsonFile: jsonDefault, hopLimit: defHopLimit}
	g := cli.Getopt{Prog: "softroce " + t.name}
	g.Flag('a', "all", &c.all)
	g.Str('c', "connection", &c.conn)
	g.Str('d', "ib-dev", &c.dev)
	g.NumIn('D', "duration", &c.duration, 0, math.MaxInt32)
	g.NumIn('f', "margin", &c.margin, 0, math.MaxInt32)
	var cpuFreq bool
	g.Flag('F', "CPU-freq", &cpuFreq)
	g.Num('i', "ib-port", &c.ibPort)
	g.Num('m', "mtu", &c.mtu)
	g.Num('n', "iters", &c.iters).Set = setNum(&c.iters, &c.itersSet)
	g.NumIn('p', "port", &c.tcpPort, 0, 65535)
	g.NumIn('q', "qp", &c.numQP, 1, maxQPs)
	g.Num('s', "size", &c.size).Set = setNum(&c.size, &c.sizeSet)
	// -1 marks "not given" (perftest's defaults depend on the test): the
	// user's values must be in range.
	g.NumIn('t', "tx-depth", &c.txDepth, 1, 16384)
	g.NumIn('r', "rx-depth", &c.rxDepth, 1, 16384)
	g.NumIn('Q', "cq-mod", &c.cqMod, 1, 1024)
	g.NumIn('I', "inline_size", &c.inline, 0, verbs.MaxInline)
	g.NumIn('o', "outs", &c.outReads, 1, 128)
	g.Str('A', "atomic_type", &c.atomicType)
	markSet(g.NumIn('x', "gid-index", &c.gidx, 0, 255), &c.gidxSet)
	g.Num('S', "sl", &c.sl)
	g.Num('u', "qp-timeout", &c.qpTimeout)
	g.Num('T', "tos", &c.tos).Set = setNum(&c.tos, &c.tosSet)
	g.Add(0, "tclass", true, func(s string) error { c.tclassArg, c.tclassSet = s, true; return nil }).Kind = cli.KindNum
	g.Flag(0, "out_json", &c.outJSON)
	g.Str(0, "out_json_file", &c.jsonFile)
	g.Flag(0, "dont_xchg_versions", &c.dontXchg)
	g.Flag('e', "events", &c.events)
	g.Flag('N', "noPeak", &c.noPeak)
	g.Flag(0, "report_gbits", &c.reportGbits)
	g.Str(0, "output", &c.output)
	g.Str(0, "pcap", &c.pcap)
	g.Flag('R', "rdma_cm", &c.rdmaCM)
	g.Flag('z', "com_rdma_cm", &c.cmComm)
	g.Flag(0, "use-srq", &c.useSRQ)
	g.Flag(0, "cpu_util", &c.cpuUtil)
	g.Flag(0, "perform_warm_up", &c.warmUp)
	g.Flag(0, "use_hugepages", &c.hugePages)
	var reportBoth bool // --report-both concerns bidirectional runs (-b, refused): no effect
	g.Flag(0, "report-both", &reportBoth)
	g.Flag(0, "mr_per_qp", &c.mrPerQP)
	g.NumIn(0, "latency_gap", &c.latencyGap, 0, math.MaxInt32)
	g.NumIn(0, "retry_count", &c.retry, 0, math.MaxInt32).Set = setNum(&c.retry, &c.retrySet)
	g.Str('w', "limit_bw", &c.limitArgs[0])
	g.Str('y', "limit_msgrate", &c.limitArgs[1])
	g.Str(0, "rate_limit", &c.rateArg)
	g.Str(0, "rate_units", &c.rateUnits)
	g.Str(0, "rate_limit_type", &c.rateType)
	g.NumIn(0, "burst_size", &c.burstSize, 0, math.MaxInt32)
	g.NumIn('L', "hop_limit", &c.hopLimit, 0, 255)
	// -X: perftest's MIN_EQ_NUM..MAX_EQ_NUM; the device checks it (runOn).
	markSet(g.NumIn('X', "vector", &c.vector, 0, 2048), &c.vectorSet)
	// raw Ethernet's IPv6 flow label, and inline receive: checked, no effect.
	var flowLabel, inlineRecv int
	g.NumIn(0, "flow_label", &flowLabel, 0, math.MaxInt32)
	g.NumIn(0, "inline_recv", &inlineRecv, 0, math.MaxInt32)
	g.NumIn(0, "pkey_index", &c.pkeyIndex, 0, math.MaxInt32)
	g.Str(0, "mmap", &c.mmapFile)
	g.NumIn(0, "mmap-offset", &c.mmapOffset, 0, math.MaxInt)
	var oldPostSend bool // softroce posts with ibv_post_send's semantics: "ibv_wr* API : OFF" either way
	g.Flag(0, "use_old_post_send", &oldPostSend)
	g.Flag(0, "disable_pcie_relaxed", &c.disablePCIR)
	g.NumIn(0, "wait_destroy", &c.waitDestroy, 0, math.MaxInt32)
	g.Flag(0, "ipv6", &c.ipv6)
	// perftest 4.5's table has two options named source_ip: getopt_long
	// takes the first, raw Ethernet's -j, so --source_ip is -j for every
	// test: an IPv4 address, checked, that RC, UC and UD tests do not use.
	g.Str('j', "source_ip", &c.sourceIP)
	g.Flag(0, "reversed", &c.reversed)
	g.Flag(0, "comm_rdma_cm", &c.cmComm) // -z's name in perftest's table (its help says --com_rdma_cm)
	g.Refuse('b', "bidirectional", false, "bidirectional (duplex) runs are not implemented")
	g.Refuse('l', "post_list", true, "posting lists of work requests is not implemented")
	g.Refuse('O', "dualport", false, "softroce devices have one port")
	g.Refuse('g', "mcg", false, "softroce has no multicast")
	g.Refuse(0, "run_infinitely", false, "use -D with a long duration")
	g.Refuse(0, "odp", false, "softroce registers ordinary Go memory; on-demand paging does not apply")
	g.Refuse(0, "use_cuda", true, "softroce has no GPU memory support")
	g.Refuse('H', "report-histogram", false, "histograms are not implemented")
	g.Refuse('U', "report-unsorted", false, "unsorted reports are not implemented")
	g.Refuse('C', "report-cycles", false, "softroce measures time, not CPU cycles")
	g.Refuse(0, "report-histogrm", false, "histograms are not implemented") // -H's name in perftest's table
	g.Refuse('M', "MGID", true, "softroce has no multicast")
	g.Refuse('W', "report-counters", true, "softroce devices have no hardware performance counters to report")
	g.Refuse(0, "use_cuda_bus_id", true, "softroce has no GPU memory support")
	g.Refuse(0, "use_rocm", true, "softroce has no GPU memory support")
	g.Refuse(0, "dlid", true, "RoCE addresses the peer by its GID; LIDs are InfiniBand's")
	g.Refuse(0, "use_ooo", false, "out-of-order data placement is a ConnectX feature softroce's QPs do not have")
	g.Refuse(0, "report-per-port", false, "it reports dual-port runs (-O), and softroce devices have one port")
	g.Refuse(0, "recv_post_list", true, "posting lists of receive work requests is not implemented")
	g.Refuse(0, "force-link", true, "softroce's link layer is always Ethernet (RoCEv2)")
	g.Refuse(0, "typical_pkt_size", true, "it sizes the packets of Packet Pacing (--rate_limit_type=PP), which is for raw Ethernet QPs")
	for _, o := range []struct {
		short  byte
		long   string
		hasArg bool
	}{
		{'B', "source_mac", true}, {'E', "dest_mac", true}, {'J', "dest_ip", true}, {'K', "dest_port", true},
		{'k', "source_port", true}, {'Y', "ethertype", true}, {'Z', "server", false}, {'P', "client", false},
		{'v', "mac_fwd", false}, {'G', "use_rss", false}, {0, "remote_mac", true}, {0, "local_mac", true},
		{0, "remote_ip", true}, {0, "local_ip", true}, {0, "remote_port", true}, {0, "local_port", true},
		{0, "flows", true}, {0, "flows_burst", true}, {0, "promiscuous", false}, {0, "sniffer", false},
		{0, "raw_mcast", false}, {0, "vlan_en", false}, {0, "vlan_pcp", true}, {0, "reply_every", true},
		{0, "tcp", false}, {0, "raw_ipv6", false},
	} {
		g.Refuse(o.short, o.long, o.hasArg, "it is an option of perftest's raw Ethernet tests (raw_ethernet_bw and kin), which softroce does not have")
	}
	for _, o := range []struct {
		long   string
		hasArg bool
	}{
		{"aes_xts", false}, {"encrypt_on_tx", false}, {"sig_before", false}, {"aes_block_size", true},
		{"kek_path", true}, {"credentials_path", true}, {"data_enc_keys_number", true}, {"data_enc_key_app_path", true},
	} {
		g.Refuse(0, o.long, o.hasArg, "AES-XTS encryption is an mlx5 feature softroce does not have")
	}
	g.Refuse(0, "log_dci_streams", true, "DC (dynamically connected) transport is an mlx5 feature softroce does not have")
	g.Refuse(0, "log_active_dci_streams", true, "DC (dynamically connected) transport is an mlx5 feature softroce does not have")
	var version bool
	g.Flag('V', "version", &version)
	ops, code, ok := g.ParseArgs(args, stdout, stderr, func(w io.Writer) { usage(t, w) })
	if !ok {
		return nil, code, false
	}
	if version {
		fmt.Fprintf(stdout, "Version: %s\n", oob.PerftestVersion) // the perftest release softroce speaks
		return nil, cli.ExitOK, false
	}
	if len(ops) > 1 {
		return nil, cli.UsageErr(stderr, g.Prog, "one server address at most, got %q", ops), false
	}
	if len(ops) == 1 {
		c.server = ops[0]
	}
	burstGiven := c.burstSize > 0
	if msg := c.finish(); msg != "" {
		fmt.Fprintf(stderr, " %s\n", msg) // perftest's messages, as perftest prints them
		return nil, cli.ExitUsage, false
	}
	if c.cpuUtil && c.duration == 0 {
		if c.output == "" {
			fmt.Fprint(stdout, resultLine)
		}
		fmt.Fprintln(stderr, " CPU Utilization works only with Duration mode.") // perftest's warning; the run goes on
		c.cpuUtil = false
	}
	if c.cqModWarn {
		fmt.Fprint(stdout, resultLine+"Warning: Large message requested and CQ moderation enabled\n"+
			"Warning: It can lead to inaccurate results\n") // perftest's, on stdout
	}
	if c.rateType == "SW" && !burstGiven {
		fmt.Fprintf(stderr, " Setting burst size to tx depth = %d\n", c.txDepth)
	}
	return c, cli.ExitOK, true
}

// markSet makes option o also record that it was given in *set, after
// its own parsing and range check succeed.
func markSet(o *cli.Gopt, set *bool) {
	parse := o.Set
	o.Set = func(s string) error {
		if err := parse(s); err != nil {
			return err
		}
		*set = true
		return nil
	}
}

func setNum(p *int, set *bool) func(string) error {
	return func(s string) error {
		v, err := cli.ParseNum(s, strconv.IntSize)
		if err != nil {
			return err
		}
		*p, *set = int(v), true
		return nil
	}
}

// finish applies perftest's defaults and checks the parameters; it
// returns a message for the user when they cannot run. The groups run in
// perftest's order, which decides the message when several apply.
func (c *config) finish() string {
	for _, check := range []func() string{
		c.finishConn, c.finishSize, c.checkRun, c.checkQP, c.finishDepths,
		c.checkFeatures, c.finishTClass, c.finishLimits, c.finishRate,
	} {
		if msg := check(); msg != "" {
			return msg
		}
	}
	return ""
}

// finishConn checks -c, the connection type, against the test's verb.
func (c *config) finishConn() string {
	t := c.tool
	c.conn = strings.ToUpper(c.conn)
	switch c.conn {
	case "RC":
	case "UC":
		if t.verb != verbSend && t.verb != verbWrite {
			return "UC connection is supported only by the send and write tests"
		}
	case "UD":
		if t.verb != verbSend {
			return "UD connection is supported only by the send tests"
		}
	case "XRC", "DC", "SRD", "RAW_PACKET":
		return c.conn + " connections are not supported by softroce"
	default:
		return "connection type must be RC, UC or UD"
	}
	return ""
}

// finishSize applies the default iterations and size, the atomic tests'
// one size and -A, and the -f margin of a -D run.
func (c *config) finishSize() string {
	t := c.tool
	if !c.itersSet {
		c.iters = defIters(t)
	}
	if !c.sizeSet {
		c.size = defaultSize(t)
	}
	if t.verb == verbAtomic {
		if c.sizeSet && c.size != atomicSize {
			return "atomic tests use 8-byte messages (-s 8)"
		}
		c.size = atomicSize
		if c.all {
			return "atomic tests have one size: -a does not apply"
		}
	}
	switch strings.ToUpper(c.atomicType) {
	case "CMP_AND_SWAP", "FETCH_AND_ADD":
		c.atomicType = strings.ToUpper(c.atomicType)
	default:
		return "atomic type must be CMP_AND_SWAP or FETCH_AND_ADD"
	}
	c.margin = effectiveMargin(c.duration, c.margin)
	return ""
}

// checkRun checks the run's shape: iterations, size, -D, --output and
// the margin, with perftest's messages.
func (c *config) checkRun() string {
	t := c.tool
	switch {
	case c.iters < 5 || c.iters > 100000000:
		return "Iteration num should be between 5 and 100000000"
	case c.size < 1 || c.size > maxMsgSize:
		return fmt.Sprintf("Message Size should be between 1 and %d", maxMsgSize)
	case c.duration < 0:
		return "duration must be positive"
	case c.duration > 0 && c.all:
		return "-D and -a cannot be combined"
	case c.output != "" && c.output != "bandwidth" && c.output != "message_rate" && c.output != "latency":
		return "Invalid verbosity level output flag. Please use bandwidth, latency, message_rate"
	case c.output != "" && !t.lat && c.output == "latency":
		return "Output verbosity level for BW can be: bandwidth, message_rate"
	case c.output != "" && t.lat && c.output != "latency":
		return "Output verbosity level for LAT can be: latency"
	case !marginFits(c.duration, c.margin):
		return fmt.Sprintf("please check that DURATION > 2*MARGIN (-D %d, -f %d: no time would be left to measure; "+
			"give a longer -D or a shorter -f)", durationOrDefault(c.duration), c.margin)
	}
	return ""
}

// checkQP checks the QPs' and the side channel's parameters.
func (c *config) checkQP() string {
	t := c.tool
	switch {
	case c.numQP < 1 || c.numQP > maxQPs:
		return fmt.Sprintf("number of QPs must be 1..%d", maxQPs)
	case t.lat && c.numQP != 1:
		return "latency tests use one QP"
	case c.ibPort != 1:
		return fmt.Sprintf("port %d: softroce devices have one port, 1", c.ibPort)
	case c.mtu != 0 && toolkit.MTUEnum(c.mtu) == 0:
		return "MTU must be 256, 512, 1024, 2048 or 4096"
	case c.gidx < 0:
		return "a GID index is required over RoCE (-x 1 is the IP address, -x 0 the link-local one)"
	case c.inline < 0 || c.inline > verbs.MaxInline:
		return fmt.Sprintf("inline size must be 0..%d", verbs.MaxInline)
	case c.sl < 0 || c.sl > 15:
		return "SL must be 0..15"
	case c.qpTimeout < 0 || c.qpTimeout > 31:
		return "QP timeout must be 0..31"
	case c.tos < 0 || c.tos > 255:
		return "TOS must be 0..255"
	case c.outJSON && c.jsonFile == "":
		return "--out_json_file needs a file name (default " + jsonDefault + ")"
	case c.tcpPort < 0 || c.tcpPort > 65535:
		return "port must be 0..65535"
	}
	return ""
}

// finishDepths applies perftest's queue depths, CQ moderation and
// outstanding reads, and checks them.
func (c *config) finishDepths() string {
	t := c.tool
	// Queue depths as perftest sets them.
	if c.txDepth < 0 {
		c.txDepth = defTxBW
		if t.lat {
			c.txDepth = 1
		}
		if c.duration == 0 && c.txDepth > c.iters {
			c.txDepth = c.iters
		}
	}
	if c.rxDepth < 0 {
		c.rxDepth = defRx
		if c.duration == 0 && c.rxDepth > c.iters {
			c.rxDepth = c.iters
		}
	}
	cqModGiven := c.cqMod >= 0
	if c.cqMod < 0 {
		c.cqMod = defCQMod
		if c.cqMod > c.txDepth {
			c.cqMod = c.txDepth
		}
	}
	// perftest turns CQ moderation off (every work request signalled) for
	// messages above MSG_SIZE_CQ_MOD_LIMIT, but for UD, -a and events, and
	// warns when -Q asks for it anyway.
	if c.size > cqModSizeLimit && c.conn != "UD" && !c.all && !c.events {
		if !cqModGiven {
			c.cqMod = 1
		} else if c.cqMod > 1 {
			c.cqModWarn = true
		}
	}
	if t.lat {
		c.cqMod = 1
	}
	if c.outReads < 0 {
		c.outReads = 1
		if t.verb == verbRead || t.verb == verbAtomic {
			c.outReads = 128 // the device's max_qp_rd_atom
		}
	}
	switch {
	case c.txDepth < 1 || c.txDepth > 16384:
		return "TX depth must be 1..16384"
	case c.rxDepth < 1 || c.rxDepth > 16384:
		return "RX depth must be 1..16384"
	case c.cqMod < 1 || c.cqMod > 1024:
		return "CQ moderation must be 1..1024"
	case c.outReads < 1 || c.outReads > 128:
		return "outstanding reads must be 1..128"
	}
	if c.cqMod > c.txDepth {
		c.cqMod = c.txDepth
	}
	return ""
}

// checkFeatures checks the optional features against the test and each
// other: -R, --use-srq, --mmap, -e/-X, -j, --reversed, -G, --retry_count.
func (c *config) checkFeatures() string {
	t := c.tool
	if c.rdmaCM {
		c.cmComm = true
		if c.conn != "RC" {
			return "softroce's -R (rdma_cm) supports RC connections only"
		}
	}
	switch {
	case c.useSRQ && t.verb != verbSend:
		return "Using SRQ only avavilible in SEND / SEND_IMM tests." // perftest's words
	case c.useSRQ && c.rxDepth < c.numQP:
		return fmt.Sprintf("with --use-srq, -r %d is the SRQ's size, shared by the %d QPs: give -r at least -q", c.rxDepth, c.numQP)
	}
	if c.mmapFile != "" && !mmapSupported {
		return "--mmap is implemented on Linux only: leave it out to use ordinary memory"
	}
	if (c.events || c.vectorSet) && t.verb == verbWrite {
		// perftest's parser, for -e and -X alike: its WRITE tests poll.
		return "Events feature not available on WRITE verb"
	}
	if c.vectorSet && !c.events {
		return "Events must be enabled to select a completion vector" // perftest's words
	}
	if c.sourceIP != "" {
		if a, err := netip.ParseAddr(c.sourceIP); err != nil || !a.Is4() {
			return "Invalid client IP address" // perftest's words for -j/--source_ip
		}
	}
	if c.reversed {
		switch {
		case t.lat:
			return "--reversed swaps the roles of a bandwidth test (the server sends): latency tests do not take it"
		case c.cmComm:
			return "--reversed with -R/-z: perftest 4.5 then has both sides' rdma_cm roles wrong; use the TCP side channel"
		}
	}
	if c.latencyGap > 0 && !t.lat {
		return "Latency gap feature is only for latency tests" // perftest's words
	}
	if c.retrySet && c.retry > 7 {
		return fmt.Sprintf("retry count %d: the CM carries 3 bits of it, 0..7", c.retry)
	}
	return ""
}

// finishTClass parses --tclass as perftest's CHECK_VALUE does (strtol
// syntax, perftest's message for what is not a number). perftest then
// truncates the value to the GRH's 8 bits; softroce refuses what does not
// fit instead.
func (c *config) finishTClass() string {
	if !c.tclassSet {
		return ""
	}
	v, err := cli.ParseNum(c.tclassArg, 64)
	switch {
	case err != nil:
		return fmt.Sprintf("traffic class argument %s should be uint16_t", c.tclassArg) // perftest's words
	case v < 0 || v > 255:
		return fmt.Sprintf("traffic class %d is out of range: the GRH's traffic class is 8 bits, 0..255", v)
	}
	c.tclass = int(v)
	return ""
}

// trafficClass is the GRH's traffic class of the test QPs (connected
// without rdma_cm): --tclass, perftest's option for it, else -T's value
// (softroce's extension: perftest takes -T for rdma_cm runs only).
func (c *config) trafficClass() uint8 {
	if c.tclassSet {
		return uint8(c.tclass)
	}
	return uint8(c.tos)
}

// cmRetry is the rdma_cm connections' retry count: --retry_count, else
// perftest's DEF_RETRY_COUNT, 7.
func (c *config) cmRetry() uint8 {
	if c.retrySet {
		return uint8(c.retry)
	}
	return 7
}

// finishLimits parses -w and -y, perftest's result verifiers, with its
// messages.
func (c *config) finishLimits() string {
	c.limitBW, c.limitRate = -1, -1
	for i, dst := range []*float64{&c.limitBW, &c.limitRate} {
		a := c.limitArgs[i]
		if a == "" {
			continue
		}
		if c.tool.lat {
			return "-w/--limit_bw and -y/--limit_msgrate check the result of a bandwidth test"
		}
		v, err := strconv.ParseFloat(a, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) {
			return [2]string{"Invalid Minimum BW Limit", "Invalid Minimum msgRate Limit"}[i]
		}
		*dst = v
	}
	return ""
}

// limitsMet is the outcome of -w and -y over a run's sizes: as perftest's,
// a limit is met when one size's result meets it.
type limitsMet struct{ bw, rate bool }

func (l *limitsMet) add(c *config, r oob.BWReport) {
	l.bw = l.bw || r.BWAvg >= c.limitBW
	l.rate = l.rate || r.MsgRateAvg >= c.limitRate
}

// err is perftest's verdict, for the side that measured the results.
func (l *limitsMet) err(c *config) error {
	switch {
	case c.limitBW >= 0 && !l.bw:
		return errors.New("Error: BW result is below bw limit")
	case c.limitRate >= 0 && !l.rate:
		return errors.New("Error: Msg rate  is below msg_rate limit")
	}
	return nil
}

// finishRate checks the rate limiter's options as perftest does, with
// perftest's messages, and applies its defaults.
func (c *config) finishRate() string {
	if c.rateArg != "" {
		v, err := strconv.ParseFloat(c.rateArg, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return "Rate limit must be non-negative floating point number"
		}
		c.rateLimit = v
		if c.rateType == "" {
			c.rateType = "HW" // perftest's default type when a rate is given
		}
	}
	switch c.rateUnits {
	case "":
		c.rateUnits = "g"
	case "M", "g", "p":
	default:
		return "Invalid rate limit units. Please use M,g or p"
	}
	switch c.rateType {
	case "", "SW":
	case "HW":
		return "HW rate limit: softroce's QPs have no rate limiter to set (IBV_QP_RATE_LIMIT; rxe has none either): use --rate_limit_type=SW"
	case "PP":
		return "Packet Pacing is only supported for Raw Ethernet."
	default:
		return "Invalid rate limit type flag. Please use HW, SW or PP."
	}
	switch {
	case c.burstSize > 0 && c.rateType == "":
		return "Can't enable burst mode when rate limiter is off"
	case c.rateType == "SW" && (c.tool.lat || c.tool.verb == verbAtomic):
		return "SW Rate limiter cann't be executed on non-BW, ATOMIC or bidirectional SEND / SEND_IMM tests"
	case c.rateType == "SW" && c.rateLimit == 0:
		return "--rate_limit_type=SW needs a rate: --rate_limit=<rate>"
	}
	if c.rateType == "SW" && c.burstSize == 0 {
		c.burstSize = c.txDepth
	}
	return ""
}

// ratePPS is the SW rate limiter's rate for messages of size bytes, in
// messages per second (0: no limit).
func (c *config) ratePPS(size int) float64 {
	if c.rateType != "SW" {
		return 0
	}
	switch c.rateUnits {
	case "M":
		return c.rateLimit * (1 << 20) / float64(size)
	case "p":
		return c.rateLimit
	}
	return c.rateLimit * 1e9 / (float64(size) * 8)
}

// titleOf is the test title of the banner.
func (c *config) title() string {
	s := c.testWord()
	if c.tool.verb == verbAtomic {
		s += " " + c.atomicType
	}
	if c.tool.lat {
		return s + " Latency Test"
	}
	return s + " BW Test"
}

// exchangeMethod is perftest's "Data ex. method": how the addresses are
// exchanged.
func (c *config) exchangeMethod() string {
	if c.cmComm {
		return "rdma_cm"
	}
	return "Ethernet"
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

// printBanner is ctx_print_test_info.
func (c *config) printBanner(w io.Writer, devName string, mtu verbs.MTU) {
	t := c.tool
	var b strings.Builder
	b.WriteString(resultLine)
	fmt.Fprintf(&b, "                    %s\n", c.title())
	if c.events {
		fmt.Fprintf(&b, " Test with events. Using %s_comp0\n", devName) // perftest's EQ number, 0 without --eq_num
	}
	fmt.Fprintf(&b, " Dual-port       : OFF\t\tDevice         : %s\n", devName)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : IB\n", c.numQP)
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", c.conn, onOff(c.useSRQ))
	fmt.Fprintf(&b, " PCIe relax order: %s\n", c.relaxOrder())
	b.WriteString(" ibv_wr* API     : OFF\n")
	if !c.isServer() {
		fmt.Fprintf(&b, " TX depth        : %d\n", c.txDepth)
	}
	if t.verb == verbSend && c.isServer() {
		fmt.Fprintf(&b, " RX depth        : %d\n", c.rxDepth)
	}
	if !t.lat {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", c.cqMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", mtu.Bytes())
	b.WriteString(" Link type       : Ethernet\n")
	fmt.Fprintf(&b, " GID index       : %d\n", c.gidx)
	if t.verb == verbRead || t.verb == verbAtomic {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", c.outReads)
	} else {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", c.inline)
	}
	fmt.Fprintf(&b, " rdma_cm QPs\t : %s\n", onOff(c.rdmaCM))
	fmt.Fprintf(&b, " Data ex. method : %s", c.exchangeMethod())
	if c.rdmaCM && c.tosSet {
		fmt.Fprintf(&b, " \tTOS    : %d", c.tos)
	}
	b.WriteString("\n" + resultLine)
	io.WriteString(w, b.String())
}

// cHexAlt formats v like printf("%#0*x", width, v): zero-padded to width
// characters including the "0x" prefix, which C omits for 0.
func cHexAlt(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return "0x" + fmt.Sprintf("%0*x", max(width-2, 1), v)
}

// printDest is ctx_print_pingpong_data.
func (c *config) printDest(w io.Writer, side string, d *oob.PerftestDest) {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, cHexAlt(uint64(d.LID), 4), cHexAlt(uint64(d.QPN), 6),
		cHexAlt(uint64(d.PSN), 6))
	// With -R or -z perftest prints with its side channel's verb, SEND: no
	// OUT, RKey or VAddr.
	if c.tool.verb == verbRead && !c.cmComm {
		fmt.Fprintf(&b, " OUT %s", cHexAlt(uint64(d.OutReads), 4))
	}
	if (c.tool.verb == verbRead || c.tool.verb == verbWrite) && !c.cmComm {
		fmt.Fprintf(&b, " RKey %s VAddr %s", cHexAlt(uint64(d.RKey), 8), cHexAlt(d.VAddr, 16))
	}
	b.WriteString("\n GID: ")
	for i, g := range d.GID {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02d", g)
	}
	b.WriteString("\n")
	io.WriteString(w, b.String())
}

// runConfig runs one side of a test.
func runConfig(ctx context.Context, c *config, stdout, stderr io.Writer) error {
	return toolkit.WithDevice(c.dev, c.pcap, func(td *toolkit.ToolDevice) error {
		return runOn(ctx, c, td, stdout, stderr)
	})
}

// checkPKeyIndex is perftest's ctx_chk_pkey_index: an index beyond the
// device's max_pkeys is its warning, and index 0. Below, the index is
// accepted as kernel rxe accepts it, and the QPs keep the one P_Key
// (0xFFFF) a softroce device, as rxe, sends with.
func (c *config) checkPKeyIndex(td *toolkit.ToolDevice, stdout, stderr io.Writer) {
	max := int(td.Dev.QueryDevice().MaxPKeys) - 1
	if c.pkeyIndex <= max {
		return
	}
	fmt.Fprint(stdout, resultLine)
	fmt.Fprintf(stderr, " Specified PKey Index, %d, greater than allowed max, %d\n Changing to 0\n", c.pkeyIndex, max)
	c.pkeyIndex = 0
}

// ipv6GIDIndex is perftest's get_best_gid_index with --ipv6 and no -x: a
// GID that is not IPv4-mapped. perftest takes the first, the link-local
// GID 0; a softroce device sends from its own address only, so the GID
// is that address's, which must be IPv6.
func (c *config) ipv6GIDIndex(td *toolkit.ToolDevice) (int, error) {
	own := td.Info.Addr.Addr().Unmap().WithZone("")
	for i, g := range td.Dev.GIDs() {
		if a := g.Addr(); a.Is6() && a.WithZone("") == own {
			return i, nil
		}
	}
	return 0, fmt.Errorf("--ipv6: %s has no IPv6 GID it can send from (its address is %s): open the device on an IPv6 address (-d), or leave --ipv6 out",
		td.Info.Name, own)
}

func accept(ctx context.Context, port int) (net.Conn, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("Couldn't listen to port %d: %w", port, err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	conn, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while waiting for a client on port %d", port)
		}
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	return conn, nil
}

func (c *config) printResultHeader(w io.Writer) {
	ext := "\n"
	if c.cpuUtil {
		ext = "    CPU_Util[%]\n"
	}
	switch {
	case c.tool.lat && c.duration > 0:
		fmt.Fprint(w, " #bytes        #iterations       t_avg[usec]    tps average"+ext)
	case c.tool.lat:
		fmt.Fprint(w, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "+ext)
	case c.reportGbits:
		fmt.Fprint(w, " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"+ext)
	default:
		fmt.Fprint(w, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"+ext)
	}
}

// cpuExt ends a result line: perftest's CPU_Util[%] value with --cpu_util.
func (c *config) cpuExt(line string, r sizeResult) string {
	if !c.cpuUtil {
		return line
	}
	return strings.TrimSuffix(line, "\n") + fmt.Sprintf("\t    %-3.2f\n", r.cpu)
}

// sizeResult is one size's outcome.
type sizeResult struct {
	bw        oob.BWReport
	lat       []time.Duration // successive-post deltas (iters-1 samples)
	latAvg    time.Duration   // -D: average per iteration
	latIter   uint64
	latPeriod time.Duration // -D: the measured period
	size      int
	cpu       float64 // --cpu_util: CPU_Util[%] over the measured period
}

// hasResult reports whether r holds measured iterations.
func (c *config) hasResult(r sizeResult) bool {
	switch {
	case !c.tool.lat:
		return r.bw.Iters > 0
	case c.duration > 0:
		return r.latIter > 0
	}
	return len(r.lat) > 0
}

// noResult is the error for a size no iteration of which completed (in a
// -D run: in the measured period), with what to change when the QPs'
// completion moderation explains it.
func (c *config) noResult(size int) error {
	msg := fmt.Sprintf("no iteration of %d bytes completed: no result to report", size)
	if c.duration > 0 && !c.tool.lat && c.cqMod > 1 {
		first := float64(c.cqMod) * float64(c.numQP) * float64(size) / (1 << 20)
		msg += fmt.Sprintf(" (each QP signals a completion every -Q %d messages: its first needs %.0f MiB sent over the %d QPs, which take turns; use a smaller -Q or -t, or a longer -D)",
			c.cqMod, first, c.numQP)
	}
	return errors.New(msg)
}

func (c *config) printResult(w io.Writer, r sizeResult) {
	switch {
	case c.output == "bandwidth":
		fmt.Fprintf(w, "%f\n", r.bw.BWAvg) // in the report's units, as perftest's
		return
	case c.output == "message_rate":
		fmt.Fprintf(w, "%f\n", r.bw.MsgRateAvg)
		return
	case !c.tool.lat:
		line := bwLine(r.bw)
		if c.reportGbits && r.bw.BWAvg < 0.1 {
			line = bwLineExt(r.bw) // perftest's inc_accuracy
		}
		io.WriteString(w, c.cpuExt(line, r))
		return
	}
	if c.duration > 0 {
		avg, tps := c.latDuration(r)
		if c.output == "latency" {
			fmt.Fprintf(w, "%f\n", avg)
			return
		}
		io.WriteString(w, c.cpuExt(fmt.Sprintf(" %-7d       %d            %-7.2f        %-7.2f\n", r.size, r.latIter, avg, tps), r))
		return
	}
	v, ok := c.latStats(r)
	switch {
	case !ok:
		fmt.Fprintf(w, " %-7d %d          (no samples)\n", r.size, c.iters)
	case c.output == "latency":
		fmt.Fprintf(w, "%f\n", v[3]) // t_avg, as perftest's
	default:
		io.WriteString(w, latLine(r.size, c.iters, v))
	}
}

// latUS is a latency test's time in perftest's microseconds: half a round
// trip for the ping-pong tests (send, write), the round trip for read and
// atomics.
func (c *config) latUS(d time.Duration) float64 {
	rtt := 2.0
	if c.tool.verb == verbRead || c.tool.verb == verbAtomic {
		rtt = 1
	}
	return float64(d.Nanoseconds()) / 1e3 / rtt
}

// latStats is a latency run's line: t_min, t_max, t_typical (the median),
// t_avg, t_stdev and the 99% and 99.9% percentiles, in microseconds; ok is
// false without samples.
func (c *config) latStats(r sizeResult) (v [7]float64, ok bool) {
	s := slices.Clone(r.lat)
	slices.Sort(s)
	// perftest's print_report_lat: the sorted samples less its
	// LAT_MEASURE_TAIL (the 2 largest) give the median, the average and the
	// standard deviation (each sample's distance from the average truncated
	// to whole units, as its int temp_var); t_max and the percentiles index
	// the sorted samples at m, ceil(0.99 m) and ceil(0.999 m).
	m := len(s) - latTail
	if m < 1 {
		return v, false
	}
	us := c.latUS
	var median float64
	if (m-1)%2 != 0 {
		median = (us(s[m/2]) + us(s[m/2-1])) / 2
	} else {
		median = us(s[m/2])
	}
	var sum float64
	for _, d := range s[:m] {
		sum += us(d)
	}
	avg := sum / float64(m)
	var sq float64
	for _, d := range s[:m] {
		t := int(avg - us(d))
		sq += float64(t * t)
	}
	stdev := math.Sqrt(sq / float64(m))
	i99 := int(math.Ceil(float64(m) * 0.99))
	i999 := int(math.Ceil(float64(m) * 0.999))
	return [7]float64{us(s[0]), us(s[m]), median, avg, stdev, us(s[i99]), us(s[i999])}, true
}

// latTail is perftest's LAT_MEASURE_TAIL: the largest samples its
// latency statistics leave out.
const latTail = 2

// latDuration is a -D latency run's t_avg in microseconds and its
// transactions per second (perftest's tps average: the iterations over the
// measured period).
func (c *config) latDuration(r sizeResult) (avg, tps float64) {
	if r.latPeriod > 0 {
		tps = float64(r.latIter) / r.latPeriod.Seconds()
	}
	return c.latUS(r.latAvg), tps
}

// latLine is perftest's REPORT_FMT_LAT line: t_min, t_max, t_typical,
// t_avg, t_stdev, 99% and 99.9% percentiles in microseconds.
func latLine(size, iters int, v [7]float64) string {
	return fmt.Sprintf(" %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		size, iters, v[0], v[1], v[2], v[3], v[4], v[5], v[6])
}

// bwLine is perftest's REPORT_FMT line.
func bwLine(r oob.BWReport) string {
	return fmt.Sprintf(" %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRateAvg)
}

// bwLineExt is perftest's REPORT_FMT_EXT, its line for averages below 0.1
// Gb/s with --report_gbits: six decimals.
func bwLineExt(r oob.BWReport) string {
	return fmt.Sprintf(" %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRateAvg)
}

// progress shows the progress of long runs on a terminal (stderr), never
// when the output is piped.
type progress struct {
	c    *config
	w    io.Writer
	on   bool
	size int
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newProgress(c *config, w io.Writer) *progress {
	p := &progress{c: c, w: w}
	long := c.duration > 0 || c.all || c.iters >= 100000
	p.on = long && isTerminal(w)
	return p
}

func (p *progress) setSize(n int) { p.size = n }

// run starts updating the line while the traffic of one size runs.
func (p *progress) run(count func() uint64) func() {
	if !p.on {
		return func() {}
	}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				el := time.Since(start).Seconds()
				var s string
				switch {
				case p.c.duration > 0:
					s = fmt.Sprintf(" %d bytes: %.0f of %d s, %d iterations", p.size, el, p.c.duration, count())
				default:
					total := uint64(p.c.iters)
					if !p.c.tool.lat {
						total *= uint64(p.c.numQP)
					}
					s = fmt.Sprintf(" %d bytes: %d of %d iterations (%.0f%%)", p.size, count(), total, 100*float64(count())/float64(total))
				}
				fmt.Fprintf(p.w, "\r%s\033[K", s)
			}
		}
	}()
	return func() { close(done) }
}

func (p *progress) clear() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// relaxOrder is the relaxed-ordering setting perftest reports (built
// with HAVE_RO, as the distributions' packages are): ON but for write_lat
// and with --disable_pcie_relaxed. It has no effect on softroce, which
// has no PCIe.
func (c *config) relaxOrder() string {
	return onOff(!c.disablePCIR && !(c.tool.lat && c.tool.verb == verbWrite))
}
