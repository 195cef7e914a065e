package perftest

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/internal/tooltest"
	"github.com/softroce/softroce/verbs"
)

// perftestOptions is perftest 4.5's option table (the long_options of
// its parser, every conditional entry included, and its short letters):
// long name, short letter (0: none), whether it takes an argument.
var perftestOptions = []struct {
	long   string
	short  byte
	hasArg bool
}{
	{"port", 'p', true}, {"ib-dev", 'd', true}, {"ib-port", 'i', true}, {"mtu", 'm', true},
	{"size", 's', true}, {"iters", 'n', true}, {"tx-depth", 't', true}, {"qp-timeout", 'u', true},
	{"sl", 'S', true}, {"gid-index", 'x', true}, {"all", 'a', false}, {"CPU-freq", 'F', false},
	{"connection", 'c', true}, {"qp", 'q', true}, {"events", 'e', false}, {"vector", 'X', true},
	{"inline_size", 'I', true}, {"outs", 'o', true}, {"mcg", 'g', false}, {"comm_rdma_cm", 'z', false},
	{"rdma_cm", 'R', false}, {"tos", 'T', true}, {"hop_limit", 'L', true}, {"help", 'h', false},
	{"MGID", 'M', true}, {"rx-depth", 'r', true}, {"bidirectional", 'b', false}, {"cq-mod", 'Q', true},
	{"noPeak", 'N', false}, {"version", 'V', false}, {"report-cycles", 'C', false},
	{"report-histogrm", 'H', false}, {"report-unsorted", 'U', false}, {"atomic_type", 'A', true},
	{"dualport", 'O', false}, {"post_list", 'l', true}, {"duration", 'D', true}, {"margin", 'f', true},
	{"source_mac", 'B', true}, {"dest_mac", 'E', true}, {"dest_ip", 'J', true}, {"source_ip", 'j', true},
	{"dest_port", 'K', true}, {"source_port", 'k', true}, {"ethertype", 'Y', true}, {"limit_bw", 'w', true},
	{"limit_msgrate", 'y', true}, {"server", 'Z', false}, {"client", 'P', false}, {"mac_fwd", 'v', false},
	{"use_rss", 'G', false}, {"report-counters", 'W', true},
	{"force-link", 0, true}, {"remote_mac", 0, true}, {"local_mac", 0, true}, {"remote_ip", 0, true},
	{"local_ip", 0, true}, {"remote_port", 0, true}, {"local_port", 0, true}, {"run_infinitely", 0, false},
	{"report_gbits", 0, false}, {"use-srq", 0, false}, {"report-both", 0, false}, {"reversed", 0, false},
	{"pkey_index", 0, true}, {"inline_recv", 0, true}, {"tcp", 0, false}, {"burst_size", 0, true},
	{"typical_pkt_size", 0, true}, {"rate_limit", 0, true}, {"rate_limit_type", 0, true},
	{"rate_units", 0, true}, {"output", 0, true}, {"cpu_util", 0, false}, {"out_json", 0, false},
	{"out_json_file", 0, true}, {"latency_gap", 0, true}, {"flow_label", 0, true}, {"retry_count", 0, true},
	{"dont_xchg_versions", 0, false}, {"use_cuda", 0, true}, {"use_cuda_bus_id", 0, true},
	{"use_rocm", 0, true}, {"mmap", 0, true}, {"mmap-offset", 0, true}, {"ipv6", 0, false},
	{"raw_ipv6", 0, false}, {"report-per-port", 0, false}, {"odp", 0, false}, {"use_hugepages", 0, false},
	{"use_old_post_send", 0, false}, {"promiscuous", 0, false}, {"sniffer", 0, false},
	{"raw_mcast", 0, false}, {"mr_per_qp", 0, false}, {"dlid", 0, true}, {"tclass", 0, true},
	{"wait_destroy", 0, true}, {"flows", 0, true}, {"flows_burst", 0, true}, {"reply_every", 0, true},
	{"perform_warm_up", 0, false}, {"vlan_en", 0, false}, {"vlan_pcp", 0, true},
	{"recv_post_list", 0, true}, {"aes_xts", 0, false}, {"encrypt_on_tx", 0, false},
	{"sig_before", 0, false}, {"aes_block_size", 0, true}, {"kek_path", 0, true},
	{"credentials_path", 0, true}, {"data_enc_keys_number", 0, true}, {"data_enc_key_app_path", 0, true},
	{"log_dci_streams", 0, true}, {"log_active_dci_streams", 0, true}, {"disable_pcie_relaxed", 0, false},
	{"use_ooo", 0, false},
}

// TestEveryPerftestOption: every long and short name of perftest 4.5's
// option table is softroce's too, with an argument where perftest's takes
// one: it works, or it is refused with a reason, never "unrecognized".
func TestEveryPerftestOption(t *testing.T) {
	tool := toolNamed(t, "send_bw")
	try := func(args ...string) {
		var out, errb strings.Builder
		_, code, ok := parseArgs(tool, args, &out, &errb)
		e := errb.String()
		for _, bad := range []string{"unrecognized option", "invalid option", "requires an argument", "doesn't allow an argument"} {
			if strings.Contains(e, bad) {
				t.Errorf("%q: %s", args, strings.TrimSpace(e))
			}
		}
		if !ok && code != cli.ExitOK && strings.Count(e, "\n") != 1 {
			t.Errorf("%q: exit %d with %q, want one line", args, code, e)
		}
	}
	for _, o := range perftestOptions {
		if o.hasArg {
			try("--"+o.long+"=1", "10.0.0.1")
			if o.short != 0 {
				try("-"+string(o.short), "1", "10.0.0.1")
			}
			continue
		}
		try("--"+o.long, "10.0.0.1")
		if o.short != 0 {
			try("-"+string(o.short), "10.0.0.1")
		}
	}
}

// TestRefusalLines: options softroce cannot honour are refused with one
// line saying why.
func TestRefusalLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dlid=3"}, "softroce write_bw: option --dlid is not supported: RoCE addresses the peer by its GID; LIDs are InfiniBand's (see 'softroce write_bw -h')\n"},
		{[]string{"-B", "00:11:22:33:44:55"}, "option -B/--source_mac is not supported: it is an option of perftest's raw Ethernet tests"},
		{[]string{"--tcp"}, "option --tcp is not supported: it is an option of perftest's raw Ethernet tests"},
		{[]string{"-W", "counters/port_xmit_data"}, "option -W/--report-counters is not supported: softroce devices have no hardware performance counters"},
		{[]string{"--report-per-port"}, "dual-port runs (-O)"},
		{[]string{"--aes_xts"}, "AES-XTS"},
	} {
		var out, errb strings.Builder
		_, code, ok := parseArgs(toolNamed(t, "write_bw"), tc.args, &out, &errb)
		if ok || code != cli.ExitUsage || strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: ok %v exit %d stderr %q; want one line with %q", tc.args, ok, code, errb.String(), tc.want)
		}
	}
}

// TestHopLimit: -L is perftest's raw Ethernet hop limit: in range, a
// value other than its default 64 is perftest's line on stdout and exit 1.
func TestHopLimit(t *testing.T) {
	var out, errb strings.Builder
	if code := runPerftest(toolNamed(t, "write_bw"), []string{"-L", "5", "10.0.0.1"}, &out, &errb); code != cli.ExitFailure ||
		out.String() != " Hop limit only valid for RawEth QP \n" || errb.String() != "" {
		t.Errorf("-L 5: exit %d stdout %q stderr %q; want exit 1 and perftest's line on stdout", code, out.String(), errb.String())
	}
	if c := parseWant(t, "send_lat", []string{"--hop_limit=64"}, ""); c == nil || c.checkHopLimit() != nil {
		t.Errorf("-L 64, perftest's default, refused")
	}
	parseWant(t, "send_lat", []string{"-L", "256"}, "-L/--hop_limit: 256 is out of range (0..255)")
}

// TestRelaxOrderOption: --disable_pcie_relaxed turns the banner's and the
// report file's PCIe relax order OFF.
func TestRelaxOrderOption(t *testing.T) {
	for _, tc := range []struct{ cmdline, ro string }{
		{"write_bw 10.0.0.1", "ON"},
		{"write_bw --disable_pcie_relaxed 10.0.0.1", "OFF"},
		{"send_lat --disable_pcie_relaxed 10.0.0.1", "OFF"},
		{"write_lat 10.0.0.1", "OFF"},
		{"read_bw --use_old_post_send 10.0.0.1", "ON"},
	} {
		c := jsonCase(t, tc.cmdline)
		var b strings.Builder
		c.printBanner(&b, "rxe0", verbs.MTU1024)
		if !strings.Contains(b.String(), "\n PCIe relax order: "+tc.ro+"\n ibv_wr* API     : OFF\n") {
			t.Errorf("%s: banner\n%s\nwant PCIe relax order %s", tc.cmdline, b.String(), tc.ro)
		}
		if j := c.jsonReport("rxe0", verbs.MTU1024, sizeResult{}); !strings.Contains(j, "\nPCIe_relax_order: "+tc.ro+",\nibv_wr_API: OFF,\n") {
			t.Errorf("%s: report file\n%s\nwant PCIe_relax_order %s", tc.cmdline, j, tc.ro)
		}
	}
}

// TestParseNewOptions: the checks perftest makes of the new options
// when it parses them.
func TestParseNewOptions(t *testing.T) {
	parseWant(t, "send_bw", []string{"-X", "0"}, " Events must be enabled to select a completion vector\n")
	// perftest's WRITE tests poll: -e and -X are refused there (its parser's words).
	parseWant(t, "write_bw", []string{"-e"}, " Events feature not available on WRITE verb\n")
	parseWant(t, "write_lat", []string{"-X", "0"}, " Events feature not available on WRITE verb\n")
	parseWant(t, "send_bw", []string{"--vector=2049", "-e"}, "out of range")
	if c := parseWant(t, "send_bw", []string{"-e", "-X", "0"}, ""); c == nil || !c.vectorSet {
		t.Errorf("-e -X 0 refused")
	}
	parseWant(t, "write_bw", []string{"--source_ip=foo"}, " Invalid client IP address\n")
	parseWant(t, "write_bw", []string{"-j", "::1"}, " Invalid client IP address\n")
	parseWant(t, "write_bw", []string{"--source_ip", "10.0.0.2", "--flow_label=7", "--inline_recv=64", "--use_old_post_send"}, "")
	parseWant(t, "write_bw", []string{"--flow_label=-1"}, "out of range")
	parseWant(t, "write_lat", []string{"--reversed"}, "latency tests do not take it")
	parseWant(t, "write_bw", []string{"--reversed", "-R"}, "--reversed with -R/-z")
	parseWant(t, "write_bw", []string{"--pkey_index=-1"}, "out of range")
	parseWant(t, "write_bw", []string{"--mmap-offset=-4096", "--mmap=x"}, "out of range")
	if c := parseWant(t, "read_bw", []string{"--comm_rdma_cm"}, ""); c == nil || !c.cmComm {
		t.Errorf("--comm_rdma_cm is not -z")
	}
}

// loopTD opens a device on a loopback address as Run does.
func loopTD(t *testing.T, name, addr string) *toolkit.ToolDevice {
	t.Helper()
	dev := openLoopDevice(t, name, addr)
	return &toolkit.ToolDevice{Info: toolkit.Device{Name: name, Addr: netip.AddrPortFrom(netip.MustParseAddr(addr), 4791)}, Dev: dev}
}

// runCancelled runs a server side of tool with args until it waits for
// its client, which it then stops waiting for.
func runCancelled(t *testing.T, td *toolkit.ToolDevice, tool string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	c := parseWant(t, tool, append(args, "-p", strconv.Itoa(tooltest.FreeTCPPort(t))), "")
	if c == nil {
		t.FailNow()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var o, e strings.Builder
	err = runOn(ctx, c, td, &o, &e)
	return o.String(), e.String(), err
}

// TestDeviceChecks: -X against the device's one completion vector, and
// --pkey_index against its max_pkeys, 64 (perftest's ctx_chk_pkey_index:
// beyond, its warning, and index 0), before connecting.
func TestDeviceChecks(t *testing.T) {
	sa, _ := tooltest.LoopPair()
	td := loopTD(t, "chk0", sa)
	if _, _, err := runCancelled(t, td, "send_bw", "-e", "-X", "1"); err == nil ||
		!strings.Contains(err.Error(), "Completion vector specified is invalid: Max completion vector = 0") {
		t.Errorf("-e -X 1: %v; want perftest's invalid completion vector", err)
	}
	if _, _, err := runCancelled(t, td, "send_bw", "-e", "-X", "0"); err == nil || !strings.Contains(err.Error(), "interrupted while waiting") {
		t.Errorf("-e -X 0: %v; want the server waiting for its client", err)
	}
	out, errOut, _ := runCancelled(t, td, "write_bw", "--pkey_index=64")
	if !strings.HasPrefix(out, resultLine) || errOut != " Specified PKey Index, 64, greater than allowed max, 63\n Changing to 0\n" {
		t.Errorf("--pkey_index=64: stdout %q stderr %q; want perftest's warning", out, errOut)
	}
	for _, i := range []string{"0", "1", "63"} { // kernel ib_write_bw --pkey_index=1 on rxe: no warning either
		out, errOut, _ = runCancelled(t, td, "write_bw", "--pkey_index="+i)
		if strings.Contains(out+errOut, "PKey") {
			t.Errorf("--pkey_index=%s: stdout %q stderr %q; want no warning", i, out, errOut)
		}
	}
	if _, _, err := runCancelled(t, td, "write_bw", "--ipv6"); err == nil || !strings.Contains(err.Error(), "--ipv6: chk0 has no IPv6 GID it can send from (its address is "+sa+")") {
		t.Errorf("--ipv6 on an IPv4 device: %v", err)
	}
	if _, _, err := runCancelled(t, td, "write_bw", "--ipv6", "-x", "1"); err == nil || strings.Contains(err.Error(), "ipv6") {
		t.Errorf("--ipv6 -x 1: %v; want -x to win, as perftest", err)
	}
}

// TestIPv6GID: on a device on an IPv6 address, --ipv6 takes that
// address's GID.
func TestIPv6GID(t *testing.T) {
	if _, err := os.Stat("/proc/net/if_inet6"); err != nil {
		t.Skip("no IPv6")
	}
	td := loopTD(t, "v6dev", "::1")
	c := parseWant(t, "write_bw", []string{"--ipv6"}, "")
	i, err := c.ipv6GIDIndex(td)
	if g, _ := td.Dev.QueryGID(1, i); err != nil || g.Addr() != netip.MustParseAddr("::1") {
		t.Errorf("--ipv6: GID %d (%v), want that of ::1", i, err)
	}
}

// runPair runs tool between two loopback devices, each side with its
// arguments, and returns both outputs.
func runPair(t *testing.T, tool string, srvArgs, cliArgs []string) (srv, cli *verbs.Device, so, co string) {
	t.Helper()
	sa, ca := tooltest.LoopPair()
	srv, cli = openLoopDevice(t, "srv0", sa), openLoopDevice(t, "cli0", ca)
	port := strconv.Itoa(tooltest.FreeTCPPort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sb, cb strings.Builder
	done := make(chan error, 1)
	go func() { done <- Run(ctx, srv, tool, append([]string{"-p", port}, srvArgs...), &sb) }()
	cerr := Run(ctx, cli, tool, append([]string{"-p", port}, append(cliArgs, sa)...), &cb)
	if serr := <-done; cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cb.String(), serr, sb.String())
	}
	return srv, cli, sb.String(), cb.String()
}

// TestMmap: --mmap makes a file the buffers: the client's RDMA WRITEs
// carry its file's bytes (perftest's random fill) into the server's file,
// at the server's --mmap-offset, whose bytes before the offset stay as
// they were.
func TestMmap(t *testing.T) {
	dir := t.TempDir()
	sf, cf := filepath.Join(dir, "srv"), filepath.Join(dir, "cli")
	const off, size = 4096, 4096 // the buffers: a 4 KiB send region and a 4 KiB receive region
	pattern := bytes.Repeat([]byte{0xa5}, off+2*size)
	for _, f := range []string{sf, cf} {
		if err := os.WriteFile(f, pattern, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, _, so, co := runPair(t, "write_bw", []string{"-n", "20", "-s", "4096", "--mmap=" + sf, "--mmap-offset=4096"},
		[]string{"-n", "20", "-s", "4096", "--mmap", cf})
	re := regexp.MustCompile(`(?m)^allocated mmap buffer of size 8192 at 0x[0-9a-f]+$`)
	if !re.MatchString(so) || !re.MatchString(co) {
		t.Errorf("no allocated mmap buffer line:\nserver:\n%s\nclient:\n%s", so, co)
	}
	s, _ := os.ReadFile(sf)
	c, _ := os.ReadFile(cf)
	sent, got := c[:size], s[off+size:off+2*size]
	if bytes.Equal(sent, pattern[:size]) {
		t.Errorf("the client's file was not filled as perftest fills its buffer")
	}
	if !bytes.Equal(got, sent) {
		t.Errorf("the server's file at its receive region does not hold what the client's file sent")
	}
	if !bytes.Equal(s[:off], pattern[:off]) {
		t.Errorf("the server's file before --mmap-offset changed")
	}
}

// TestMmapErrors: a file that cannot be opened is perftest's line on
// stdout; one too small for the buffers, one line saying how large it
// must be.
func TestMmapErrors(t *testing.T) {
	if !mmapSupported {
		parseWant(t, "write_bw", []string{"--mmap=x"}, "--mmap is implemented on Linux only")
		return
	}
	sa, _ := tooltest.LoopPair()
	td := loopTD(t, "mm0", sa)
	small := filepath.Join(t.TempDir(), "small")
	os.WriteFile(small, make([]byte, 8191), 0o600)
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		args           []string
		stdout, stderr string
	}{
		{[]string{"--mmap", missing}, "Unable to open '" + missing + "': No such file or directory\n", "Couldn't allocate work buf."},
		{[]string{"--mmap", small, "-s", "4096"}, "", "--mmap file " + small + " has 8191 bytes, and the test's buffers need 8192 from offset 0: make it at least 8192 bytes"},
		{[]string{"--mmap", small, "--mmap-offset=100", "-s", "16"}, "", "from offset 100"},
	} {
		c := parseWant(t, "write_bw", tc.args, "")
		var o strings.Builder
		_, err := newResources(c, td, verbs.GID{})
		var me *mmapError
		if err == nil || !strings.Contains(err.Error(), tc.stderr) {
			t.Errorf("%q: %v; want %q", tc.args, err, tc.stderr)
		} else if errorsAs(err, &me) {
			o.WriteString(me.line)
			if me.line != "" {
				o.WriteString("\n")
			}
		}
		if o.String() != tc.stdout {
			t.Errorf("%q: perftest's line %q, want %q", tc.args, o.String(), tc.stdout)
		}
	}
}

// TestWaitDestroy: --wait_destroy prints perftest's line and waits
// before the resources go.
func TestWaitDestroy(t *testing.T) {
	start := time.Now()
	_, _, so, co := runPair(t, "write_bw", []string{"-n", "5", "-s", "64"}, []string{"-n", "5", "-s", "64", "--wait_destroy=1"})
	if el := time.Since(start); el < time.Second {
		t.Errorf("the run took %v, less than the 1 s wait", el)
	}
	if !strings.HasSuffix(co, resultLine+" Waiting 1 seconds before releasing resources...\n") || strings.Contains(so, "Waiting 1") {
		t.Errorf("want the client's wait line last, and no server line:\nclient:\n%s\nserver:\n%s", co, so)
	}
}

// TestReversed: with --reversed the side that listens sends (perftest's
// machine swapped after connecting): its banner has the TX depth, and its
// device sends the data.
func TestReversed(t *testing.T) {
	for _, tool := range []string{"write_bw", "send_bw"} {
		t.Run(tool, func(t *testing.T) {
			args := []string{"-n", "20", "-s", "4096", "--reversed"}
			srv, cli, so, co := runPair(t, tool, args, args)
			if !strings.Contains(so, " TX depth        : 20\n") || strings.Contains(co, " TX depth") {
				t.Errorf("want the TX depth in the listening side's banner alone:\nlistening:\n%s\nconnecting:\n%s", so, co)
			}
			if !regexp.MustCompile(`(?m)^ 4096 +20 +\d`).MatchString(so) {
				t.Errorf("the listening side printed no result:\n%s", so)
			}
			// Bytes, not packets: the receiver may answer each message
			// with an ACK of its own, as many packets as the data's.
			st, ct := srv.Stats().TxBytes.Load(), cli.Stats().TxBytes.Load()
			if st < 20*4096 || ct >= 20*4096 {
				t.Errorf("bytes sent: listening side %d, connecting side %d; want the listening side to send the data (20 x 4096 B)", st, ct)
			}
		})
	}
}

func errorsAs(err error, target **mmapError) bool { return errors.As(err, target) }
