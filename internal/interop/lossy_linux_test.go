package interop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/wire"
)

// The bulk transfers under impairment: perftest's minimum of 5 iterations
// of one 4 MiB message, at the guests' path MTU of 1024 bytes.
const (
	bulkSize  = 4 << 20
	bulkIters = 5
	bulkMTU   = 1024
	// bulkNeeded is the number of data packets (WRITE requests or READ
	// responses) the transfer needs when nothing is lost.
	bulkNeeded = bulkIters * bulkSize / bulkMTU
	// maxRatio bounds softroce's packets against two kernels' under the same
	// conditions.
	maxRatio = 2.0
	// ackFloor is the ACK/NAK side's ratio below which it is not compared.
	ackFloor = 0.25
)

// impairment is a netem setting applied in the peer guest to both
// directions: egress on eth0, ingress through ifb0.
type impairment struct{ name, netem string }

var impairments = []impairment{
	{"loss2pct", "loss 2%"},
	{"reorder", "delay 1ms reorder 5% 50%"},
}

// bulkOps are the perftest programs moving the data, and which side sends
// the data packets.
var bulkOps = []struct {
	name       string
	serverData bool // the server (responder of READ) sends the data
}{
	{"write_bw", false},
	{"read_bw", true},
}

// TestBulkImpaired moves 4 MiB messages by RDMA WRITE and READ under 2% loss
// and under reordering, softroce against the kernel in both roles, and
// checks completion, exit status and the packets each side sent: at most
// maxRatio times what the same role sent between two kernels under the
// same conditions (measured once per run).
func TestBulkImpaired(t *testing.T) {
	for _, imp := range impairments {
		t.Run(imp.name, func(t *testing.T) {
			for _, op := range bulkOps {
				t.Run(op.name, func(t *testing.T) {
					bothRoles(t, func(t *testing.T, softroceServer bool) {
						need(t, false)
						bulkCase(t, imp, op.name, op.serverData, softroceServer)
					})
				})
			}
		})
	}
}

// sideCount is what one side sent and received in a run.
type sideCount struct{ sent, rcvd, naks int }

// bulkRun is one measured run.
type bulkRun struct {
	server, client sideCount
	elapsed        time.Duration
}

func (c sideCount) ratio() float64 { return float64(c.sent) / bulkNeeded }

func bulkArgs(tool string) string {
	return fmt.Sprintf("%s -F -s %d -n %d", tool, bulkSize, bulkIters)
}

func bulkCase(t *testing.T, imp impairment, tool string, serverData, softroceServer bool) {
	base := baseline(t, imp, tool)
	if base == nil {
		t.Log("no rxe<->rxe baseline (two kernels failed this transfer twice): checking completion only")
	}
	g := bootGuest(t, 0)
	setNetem(t, g, imp.netem)

	pcap := filepath.Join(t.TempDir(), "softroce.pcap")
	host := endpoint{cmd: fmt.Sprintf("%s %s --pcap %s", bulkArgs(tool), perftestDev[1], pcap)}
	kern := endpoint{guest: g, cmd: "ib_" + bulkArgs(tool) + " " + perftestDev[0]}
	var srv, cli endpoint
	if softroceServer {
		kern.cmd += " " + hostIP
		srv, cli = host, kern
	} else {
		host.cmd += " " + g.ip
		srv, cli = kern, host
	}
	limit := 600 * time.Second
	if base != nil {
		limit = min(3*base.elapsed+120*time.Second, limit)
	}
	before := rxeStats(t, g)
	run := runPair(t, srv, cli, listenTCP, limit)
	after := rxeStats(t, g)
	checkPerftest(bulkSize, bulkIters)(t, run)

	kc := sideCount{sent: after["sent_pkts"] - before["sent_pkts"], rcvd: after["rcvd_pkts"] - before["rcvd_pkts"]}
	sc, err := countPcap(pcap, hostIP)
	if err != nil {
		t.Fatalf("counting softroce's packets: %v", err)
	}
	diff := statDiff(before, after)
	var cur bulkRun
	if softroceServer {
		cur = bulkRun{server: sc, client: kc, elapsed: run.elapsed}
	} else {
		cur = bulkRun{server: kc, client: sc, elapsed: run.elapsed}
	}
	t.Logf("needed %d data packets; %s", bulkNeeded, diff)
	t.Logf("this run  : server sent %6d (%.2f/needed) rcvd %6d, client sent %6d (%.2f/needed) rcvd %6d, softroce NAKs %d, %v",
		cur.server.sent, cur.server.ratio(), cur.server.rcvd, cur.client.sent, cur.client.ratio(), cur.client.rcvd,
		sc.naks, cur.elapsed.Round(100*time.Millisecond))
	dataSide, data := "client", cur.client
	if serverData {
		dataSide, data = "server", cur.server
	}
	if data.sent < bulkNeeded {
		t.Errorf("the %s sent %d packets, fewer than the %d data packets the transfer needs: counting is wrong",
			dataSide, data.sent, bulkNeeded)
	}
	if base == nil {
		return
	}
	t.Logf("rxe<->rxe : server sent %6d (%.2f/needed), client sent %6d (%.2f/needed), %v",
		base.server.sent, base.server.ratio(), base.client.sent, base.client.ratio(), base.elapsed.Round(100*time.Millisecond))

	// Each side against the same role between two kernels. The data side
	// (WRITE requester, READ responder) and the total are held to maxRatio
	// exactly. The other side sends ACKs and NAKs, one per AckReq and one
	// per duplicate received, a few hundred either way with timing: its
	// ratio is compared with the kernels' but at least with ackFloor (a
	// NAK storm, one NAK per reordered packet, is far above either).
	for _, s := range []struct {
		role      string
		cur, base sideCount
		data      bool
	}{{"server", cur.server, base.server, serverData}, {"client", cur.client, base.client, !serverData}} {
		who := "kernel"
		if (s.role == "server") == softroceServer {
			who = "softroce"
		}
		base := s.base.ratio()
		if !s.data {
			base = max(base, ackFloor)
		}
		limit := maxRatio * base
		if s.cur.ratio() > limit {
			t.Errorf("%s (%s) sent %d packets = %.2f x needed; two kernels' %s sent %.2f x needed: over the bound %.2f",
				s.role, who, s.cur.sent, s.cur.ratio(), s.role, s.base.ratio(), limit)
		}
	}
	tot, btot := cur.server.sent+cur.client.sent, base.server.sent+base.client.sent
	if float64(tot) > maxRatio*float64(btot) {
		t.Errorf("both sides sent %d packets = %.2f x needed; two kernels sent %.2f x needed: over %.0fx",
			tot, float64(tot)/bulkNeeded, float64(btot)/bulkNeeded, maxRatio)
	}
}

// baselines caches the rxe<->rxe measurements of this run.
var baselines struct {
	sync.Mutex
	m map[string]*bulkRun // nil: the kernels failed the transfer
}

// baseline measures (once per run) tool between two kernels, the server in
// guest 0 under imp, the client in guest 1. Two kernels do not always
// finish 4 MiB READs under loss either (retries exhausted): after two failed
// attempts it returns nil, and the caller has nothing to compare with.
func baseline(t *testing.T, imp impairment, tool string) *bulkRun {
	t.Helper()
	key := imp.name + "/" + tool
	baselines.Lock()
	defer baselines.Unlock()
	if b, ok := baselines.m[key]; ok {
		return b
	}
	if baselines.m == nil {
		baselines.m = map[string]*bulkRun{}
	}
	a, b := bootGuest(t, 0), bootGuest(t, 1)
	setNetem(t, a, imp.netem)
	srv := endpoint{guest: a, cmd: "ib_" + bulkArgs(tool) + " " + perftestDev[0]}
	cli := endpoint{guest: b, cmd: "ib_" + bulkArgs(tool) + " " + perftestDev[0] + " " + a.ip}
	for attempt := 1; attempt <= 2; attempt++ {
		sa, sb := rxeStats(t, a), rxeStats(t, b)
		t.Logf("rxe<->rxe baseline for %s (attempt %d)", key, attempt)
		run := runPairQuiet(t, srv, cli, listenTCP, 600*time.Second)
		ea, eb := rxeStats(t, a), rxeStats(t, b)
		if run.server.code != 0 || run.client.code != 0 || resultLine.FindString(run.client.out) == "" {
			t.Logf("rxe<->rxe baseline %s failed (the kernels, not softroce): %s\nserver %v\nclient %v",
				key, statDiff(sb, eb), run.server, run.client)
			continue
		}
		br := &bulkRun{
			server:  sideCount{sent: ea["sent_pkts"] - sa["sent_pkts"], rcvd: ea["rcvd_pkts"] - sa["rcvd_pkts"]},
			client:  sideCount{sent: eb["sent_pkts"] - sb["sent_pkts"], rcvd: eb["rcvd_pkts"] - sb["rcvd_pkts"]},
			elapsed: run.elapsed,
		}
		t.Logf("baseline %s: server %s; client %s", key, statDiff(sa, ea), statDiff(sb, eb))
		baselines.m[key] = br
		return br
	}
	baselines.m[key] = nil
	return nil
}

// setNetem applies spec to both directions of g's eth0 and removes it when
// t ends.
func setNetem(t *testing.T, g *guest, spec string) {
	t.Helper()
	const clear = "tc qdisc del dev eth0 root 2>/dev/null; tc qdisc del dev eth0 handle ffff: ingress 2>/dev/null; " +
		"tc qdisc del dev ifb0 root 2>/dev/null; true"
	g.must(t, clear+"; modprobe ifb 2>/dev/null; ip link show ifb0 >/dev/null 2>&1 || ip link add ifb0 type ifb; "+
		"ip link set ifb0 up && "+
		"tc qdisc replace dev eth0 root netem limit 10000 "+spec+" && "+
		"tc qdisc add dev eth0 handle ffff: ingress && "+
		"tc filter add dev eth0 parent ffff: matchall action mirred egress redirect dev ifb0 && "+
		"tc qdisc replace dev ifb0 root netem limit 10000 "+spec)
	t.Cleanup(func() { g.exec(context.Background(), 60*time.Second, clear) })
}

// rxeStats reads the guest's rxe0 port counters.
func rxeStats(t *testing.T, g *guest) map[string]int {
	t.Helper()
	m, err := parseRdmaStat(g.must(t, "rdma statistic show link rxe0/1"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var rdmaStatLine = regexp.MustCompile(`(?m)^link rxe0/1 (.*)$`)

// parseRdmaStat parses `rdma statistic show link rxe0/1`: "link rxe0/1"
// followed by name value pairs.
func parseRdmaStat(out string) (map[string]int, error) {
	m := rdmaStatLine.FindStringSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("no 'link rxe0/1' line in %q", out)
	}
	f := strings.Fields(m[1])
	if len(f)%2 != 0 {
		return nil, fmt.Errorf("odd counter list %q", m[1])
	}
	st := make(map[string]int, len(f)/2)
	for i := 0; i < len(f); i += 2 {
		v, err := strconv.Atoi(f[i+1])
		if err != nil {
			return nil, fmt.Errorf("counter %s: %v", f[i], err)
		}
		st[f[i]] = v
	}
	if _, ok := st["sent_pkts"]; !ok {
		return nil, fmt.Errorf("no sent_pkts in %q", m[1])
	}
	return st, nil
}

// statDiff lists the counters that changed, as name+delta.
func statDiff(before, after map[string]int) string {
	var b strings.Builder
	for _, k := range []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_seq_err",
		"completer_retry_err", "retry_exceeded_err", "rcvd_rnr_err", "send_rnr_err", "retry_rnr_exceeded_err", "send_err"} {
		if d := after[k] - before[k]; d != 0 {
			fmt.Fprintf(&b, " %s+%d", k, d)
		}
	}
	return "kernel:" + b.String()
}

// countPcap counts the RoCEv2 packets of a softroce --pcap file: sent (from
// self), received, and the NAKs sent.
func countPcap(path, self string) (sideCount, error) {
	var c sideCount
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer f.Close()
	r, err := capture.NewReader(f, nil)
	if err != nil {
		return c, err
	}
	var p capture.Packet
	var w wire.Packet
	for {
		err := r.Next(&p)
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return c, err
		}
		if p.Src.Addr().String() != self {
			c.rcvd++
			continue
		}
		c.sent++
		if w.Parse(p.Payload) == nil && w.Mask&wire.HasAETH != 0 && w.AETH.IsNAK() {
			c.naks++
		}
	}
}

// requesterConds are the conditions of TestRequesterImpaired: none, and
// 2 % loss both ways (as TestBulkImpaired's).
var requesterConds = []impairment{
	{"quiet", "delay 0ms"},
	impairments[0],
}

// TestRequesterImpaired: softroce as the requester against the kernel as
// responder, quiet and under 2 % loss both ways: softroce read_bw reading
// from ib_read_bw (the READ requester's gap and tail recovery), softroce
// write_bw writing to ib_write_bw (go-back-N, loss probe, NAKs during a
// retry). Checked: completion, exit statuses and perftest's result row.
// Logged: softroce's MB/s beside two kernels' under the same netem
// (rxe<->rxe, measured once per run), the figure the speed notes keep; a
// rate is not asserted.
func TestRequesterImpaired(t *testing.T) {
	for _, imp := range requesterConds {
		t.Run(imp.name, func(t *testing.T) {
			for _, op := range bulkOps {
				t.Run(op.name, func(t *testing.T) {
					need(t, false)
					requesterCase(t, imp, op.name)
				})
			}
		})
	}
}

func requesterCase(t *testing.T, imp impairment, tool string) {
	base := baseline(t, imp, tool)
	g := bootGuest(t, 0)
	setNetem(t, g, imp.netem)
	srv := endpoint{guest: g, cmd: "ib_" + bulkArgs(tool) + " " + perftestDev[0]}
	cli := endpoint{cmd: fmt.Sprintf("%s %s %s", bulkArgs(tool), perftestDev[1], g.ip)}
	limit := 600 * time.Second
	if base != nil {
		limit = min(3*base.elapsed+120*time.Second, limit)
	}
	before := rxeStats(t, g)
	run := runPair(t, srv, cli, listenTCP, limit)
	after := rxeStats(t, g)
	checkPerftest(bulkSize, bulkIters)(t, run)
	mbs := func(d time.Duration) float64 { return float64(bulkIters*bulkSize) / d.Seconds() / 1e6 }
	t.Logf("softroce %s client, kernel server, %s: %.2f MB/s (%v); %s", tool, imp.netem,
		mbs(run.elapsed), run.elapsed.Round(100*time.Millisecond), statDiff(before, after))
	if base != nil {
		t.Logf("rxe<->rxe under the same netem: %.2f MB/s (%v): softroce %.2fx", mbs(base.elapsed),
			base.elapsed.Round(100*time.Millisecond), base.elapsed.Seconds()/run.elapsed.Seconds())
	}
}
