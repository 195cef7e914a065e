package perftest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/internal/tooltest"
	"github.com/softroce/softroce/verbs"
)

const versionsLine = "Current implementation is not compatible with versions older than 5.70\n" // perftest's check_version_compatibility

// TestNewOptions: --out_json, --out_json_file, --tclass and
// --dont_xchg_versions parse as perftest's, with its message for a traffic
// class that is not a number; --tclass wins over -T for the GRH.
func TestNewOptions(t *testing.T) {
	for _, tc := range []struct {
		tool   string
		args   []string
		refuse string
		json   bool
		file   string
		tc     uint8 // the QPs' GRH traffic class
		noXchg bool
	}{
		{"write_bw", nil, "", false, "perftest_out.json", 0, false},
		{"write_bw", []string{"--out_json"}, "", true, "perftest_out.json", 0, false},
		{"send_lat", []string{"--out_json", "--out_json_file=r.json"}, "", true, "r.json", 0, false},
		{"read_bw", []string{"--out_json_file", "dir/x.json"}, "", false, "dir/x.json", 0, false}, // the name alone writes nothing, as perftest
		{"write_bw", []string{"--out_json", "--out_json_file="}, "--out_json_file needs a file name", false, "", 0, false},
		{"write_bw", []string{"--out_json_file="}, "", false, "", 0, false}, // no file to write
		{"write_bw", []string{"--out_json=1"}, "doesn't allow an argument", false, "", 0, false},
		{"write_bw", []string{"--tclass=0x20"}, "", false, "perftest_out.json", 32, false},
		{"send_bw", []string{"--tclass", "255", "-c", "UD"}, "", false, "perftest_out.json", 255, false},
		{"write_bw", []string{"-T", "7"}, "", false, "perftest_out.json", 7, false},
		{"write_bw", []string{"-T", "7", "--tclass=9"}, "", false, "perftest_out.json", 9, false},
		{"write_bw", []string{"--tclass=0", "-T", "7"}, "", false, "perftest_out.json", 0, false},
		{"write_bw", []string{"--tclass=abc"}, " traffic class argument abc should be uint16_t\n", false, "", 0, false},
		{"write_bw", []string{"--tclass=12x"}, " traffic class argument 12x should be uint16_t\n", false, "", 0, false},
		{"write_bw", []string{"--tclass="}, " traffic class argument  should be uint16_t\n", false, "", 0, false},
		{"write_bw", []string{"--tclass=256"}, " traffic class 256 is out of range: the GRH's traffic class is 8 bits, 0..255\n", false, "", 0, false},
		{"write_bw", []string{"--tclass=-1"}, "0..255", false, "", 0, false},
		{"atomic_lat", []string{"--dont_xchg_versions"}, "", false, "perftest_out.json", 0, true},
		{"write_bw", []string{"--dont_xchg_versions=1"}, "doesn't allow an argument", false, "", 0, false},
	} {
		c := parseWant(t, tc.tool, tc.args, tc.refuse)
		if c == nil {
			continue
		}
		if c.outJSON != tc.json || c.jsonFile != tc.file || c.trafficClass() != tc.tc || c.dontXchg != tc.noXchg {
			t.Errorf("%s %q: out_json %v file %q traffic class %d dont_xchg %v; want %v %q %d %v", tc.tool, tc.args,
				c.outJSON, c.jsonFile, c.trafficClass(), c.dontXchg, tc.json, tc.file, tc.tc, tc.noXchg)
		}
		err := c.checkVersions()
		if tc.noXchg != (err != nil) || err != nil && err.Error()+"\n" != versionsLine {
			t.Errorf("%s %q: version check %v", tc.tool, tc.args, err)
		}
	}
}

// jsonCase parses a command line for the JSON tests (the client's when
// it ends with a host).
func jsonCase(t *testing.T, cmdline string) *config {
	t.Helper()
	f := strings.Fields(cmdline)
	c := parseWant(t, f[0], f[1:], "")
	if c == nil {
		t.Fatalf("%q refused", cmdline)
	}
	return c
}

// jsonInfo is a test_info block as perftest's write_test_info_to_file
// writes it for a client of write_bw (the lines between test and Mtu, and
// after it, are the arguments).
func jsonInfo(test, upper, mtu, lower string) string {
	ro := "ON"
	if test == "RDMA_Write_Latency_Test" {
		ro = "OFF"
	}
	return "test_info: {\ntest: " + test + ",\n" + upper +
		"PCIe_relax_order: " + ro + ",\nibv_wr_API: OFF,\n" + mtu + "Link_type: Ethernet,\n" + lower + "},\n"
}

// TestJSONReport: the --out_json file, byte for byte, against texts
// written out from perftest 4.5's format strings (write_test_info_to_file,
// REPORT_FMT_JSON, REPORT_FMT_EXT_JSON, REPORT_FMT_LAT_JSON,
// REPORT_FMT_LAT_DUR_JSON, REPORT_EXT_CPU_UTIL_JSON and the --output
// variants), and the banner lines the file mirrors.
func TestJSONReport(t *testing.T) {
	us := func(n ...int) []time.Duration {
		d := make([]time.Duration, len(n))
		for i, v := range n {
			d[i] = time.Duration(v) * time.Microsecond
		}
		return d
	}
	bw := oob.BWReport{Size: 65536, Iters: 5000, BWPeak: 1234.5678, BWAvg: 1100.126, MsgRateAvg: 0.0176026}
	for _, tc := range []struct {
		name, cmdline string
		dev           string
		mtu           verbs.MTU
		res           sizeResult
		want          string
	}{
		{"bw client", "write_bw -s 65536 -n 5000 10.0.0.1", "rxe0", verbs.MTU1024, sizeResult{bw: bw},
			"{\n" + jsonInfo("RDMA_Write_BW_Test",
				"Dual_port: OFF,\nDevice: \"rxe0\",\nNumber_of_qps: 1,\nTransport_type: IB,\nConnection_type: RC,\nUsing_SRQ: OFF,\n",
				"TX_depth : 128,\nCQ_Moderation: 1,\nMtu: 1024,\n",
				"GID_index: 1,\nMax_inline_data: 0,\nrdma_cm_QPs: OFF,\nData_ex_method: Ethernet,\n") +
				"results: {\nMsgSize: 65536,\nn_iterations: 5000,\nBW_peak: 1234.57,\nBW_average: 1100.13,\nMsgRate: 0.017603,\n},\n}\n"},
		{"bw server, send, SRQ, UD", "send_bw -c UD -q 2 --use-srq -r 600 -s 1024 -n 1000 -I 64 -x 0", "10.1.2.3", verbs.MTU4096,
			sizeResult{bw: oob.BWReport{Size: 1024, Iters: 1998, BWPeak: 0, BWAvg: 97.5, MsgRateAvg: 0.099840}},
			"{\n" + jsonInfo("Send_BW_Test",
				"Dual_port: OFF,\nDevice: \"10.1.2.3\",\nNumber_of_qps: 2,\nTransport_type: IB,\nConnection_type: UD,\nUsing_SRQ: ON,\n",
				"RX_depth: 600,\nCQ_Moderation: 100,\nMtu: 4096,\n",
				"GID_index: 0,\nMax_inline_data: 64,\nrdma_cm_QPs: OFF,\nData_ex_method: Ethernet,\n") +
				"results: {\nMsgSize: 1024,\nn_iterations: 1998,\nBW_peak: 0.00,\nBW_average: 97.50,\nMsgRate: 0.099840,\n},\n}\n"},
		{"bw Gb/s below 0.1, rdma_cm, TOS, atomic", "atomic_bw -R -T 5 --report_gbits -n 100 10.0.0.1", "rxe0", verbs.MTU1024,
			sizeResult{bw: oob.BWReport{Size: 8, Iters: 100, BWPeak: 0.0625, BWAvg: 0.05, MsgRateAvg: 0.78125}},
			"{\n" + jsonInfo("Atomic_FETCH_AND_ADD_BW_Test",
				"Dual_port: OFF,\nDevice: \"rxe0\",\nNumber_of_qps: 1,\nTransport_type: IB,\nConnection_type: RC,\nUsing_SRQ: OFF,\n",
				"TX_depth : 100,\nCQ_Moderation: 100,\nMtu: 1024,\n",
				"GID_index: 1,\nOutstand_reads: 128,\nrdma_cm_QPs: ON,\nData_ex_method: rdma_cm,\nTOS: 5,\n") +
				"results: {\nMsgSize: 8,\nn_iterations: 100,\nBW_peak: 0.062500,\nBW_average: 0.050000,\nMsgRate: 0.781250,\n},\n}\n"},
		{"bw --output=bandwidth --cpu_util", "write_bw -D 2 --cpu_util --output=bandwidth -z 10.0.0.1", "rxe0", verbs.MTU1024,
			sizeResult{bw: bw, cpu: 37.25},
			"{\n" + jsonInfo("RDMA_Write_BW_Test",
				"Dual_port: OFF,\nDevice: \"rxe0\",\nNumber_of_qps: 1,\nTransport_type: IB,\nConnection_type: RC,\nUsing_SRQ: OFF,\n",
				"TX_depth : 128,\nCQ_Moderation: 1,\nMtu: 1024,\n",
				"GID_index: 1,\nMax_inline_data: 0,\nrdma_cm_QPs: OFF,\nData_ex_method: rdma_cm,\n") +
				"results: {\nbw_avg: 1100.126000,\nCPU_util: 37.25,\n},\n}\n"},
		{"bw --output=message_rate", "send_bw --output=message_rate 10.0.0.1", "rxe0", verbs.MTU1024, sizeResult{bw: bw},
			"{\n" + jsonInfo("Send_BW_Test",
				"Dual_port: OFF,\nDevice: \"rxe0\",\nNumber_of_qps: 1,\nTransport_type: IB,\nConnection_type: RC,\nUsing_SRQ: OFF,\n",
				"TX_depth : 128,\nCQ_Moderation: 1,\nMtu: 1024,\n",
				"GID_index: 1,\nMax_inline_data: 0,\nrdma_cm_QPs: OFF,\nData_ex_method: Ethernet,\n") +
				"results: {\nmsgRate_avg: 0.017603,\n},\n}\n"},
		{"lat client, read", "read_lat -s 64 -n 1000 10.0.0.1", "rxe0", verbs.MTU1024, sizeResult{size: 64, lat: us(100, 10, 12, 20, 70, 40)},
			"{\n" + jsonInfo("RDMA_Read_Latency_Test",
				"Dual_port: OFF,\nDevice: \"rxe0\",\nNumber_of_qps: 1,\nTransport_type: IB,\nConnection_type: RC,\nUsing_SRQ: OFF,\n",
				"TX_depth : 1,\nMtu: 1024,\n",
				"GID_index: 1,\nOutstand_reads: 128,\nrdma_cm_QPs: OFF,\nData_ex_method: Ethernet,\n") +
				"results: {\nMsgSize: 64,\nn_iterations: 1000,\nt_min: 10.00,\nt_max: 70.00,\nt_typical: 16.00,\nt_avg: 20.50,\n" +
				"t_stdev: 11.46,\npercentile_99: 70.00,\npercentile_99.9: 70.00,\n},\n}\n"},
		{"lat client, rdma_cm, no TOS", "write_lat -R -n 20 -I 32 10.0.0.1", "rxe0", verbs.MTU2048, sizeResult{size: 2, lat: us(3, 2, 2)},
			"{\n" + jsonInfo("RDMA_Write_Latency_Test",
				"Dual_port: OFF,\nDevice: \"rxe0\",\nNumber_of_qps: 1,\nTransport_type: IB,\nConnection_type: RC,\nUsing_SRQ: OFF,\n",
				"TX_depth : 1,\nMtu: 2048,\n",
				"GID_index: 1,\nMax_inline_data: 32,\nrdma_cm_QPs: ON,\nData_ex_method: rdma_cm,\n") +
				"results: {\nMsgSize: 2,\nn_iterations: 20,\nt_min: 1.00,\nt_max: 1.00,\nt_typical: 1.00,\nt_avg: 1.00,\n" +
				"t_stdev: 0.00,\npercentile_99: 1.00,\npercentile_99.9: 1.00,\n},\n}\n"},
		{"lat server, send, --output=latency", "send_lat -n 20 --output=latency", "rxe0", verbs.MTU1024, sizeResult{size: 2, lat: us(100, 10, 30, 20)},
			"{\n" + jsonInfo("Send_Latency_Test",
				"Dual_port: OFF,\nDevice: \"rxe0\",\nNumber_of_qps: 1,\nTransport_type: IB,\nConnection_type: RC,\nUsing_SRQ: OFF,\n",
				"RX_depth: 20,\nMtu: 1024,\n",
				"GID_index: 1,\nMax_inline_data: 0,\nrdma_cm_QPs: OFF,\nData_ex_method: Ethernet,\n") +
				"results: {\navg_lat: 7.500000,\n},\n}\n"},
		{"lat -D, --cpu_util, events, server", "read_lat -D 2 --cpu_util -e", "rxe0", verbs.MTU4096,
			sizeResult{size: 2, latIter: 100000, latAvg: 20 * time.Microsecond, latPeriod: 2 * time.Second, cpu: 37.25},
			"{\n" + jsonInfo("RDMA_Read_Latency_Test",
				"Test with events: Using_rxe0_comp0,\nDual_port: OFF,\nDevice: \"rxe0\",\nNumber_of_qps: 1,\nTransport_type: IB,\nConnection_type: RC,\nUsing_SRQ: OFF,\n",
				"Mtu: 4096,\n",
				"GID_index: 1,\nOutstand_reads: 128,\nrdma_cm_QPs: OFF,\nData_ex_method: Ethernet,\n") +
				"results: {\nMsgSize: 2,\nn_iterations: 100000,\nt_avg: 20.00,\ntps_average: 50000.00,\nCPU_util: 37.25,\n},\n}\n"},
		{"lat -D, --output=latency", "atomic_lat -D 1 --output=latency -A CMP_AND_SWAP 10.0.0.1", "rxe0", verbs.MTU1024,
			sizeResult{size: 8, latIter: 40000, latAvg: 25 * time.Microsecond, latPeriod: time.Second},
			"{\n" + jsonInfo("Atomic_CMP_AND_SWAP_Latency_Test",
				"Dual_port: OFF,\nDevice: \"rxe0\",\nNumber_of_qps: 1,\nTransport_type: IB,\nConnection_type: RC,\nUsing_SRQ: OFF,\n",
				"TX_depth : 1,\nMtu: 1024,\n",
				"GID_index: 1,\nOutstand_reads: 128,\nrdma_cm_QPs: OFF,\nData_ex_method: Ethernet,\n") +
				"results: {\nt_avg: 25.000000\n},\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := jsonCase(t, tc.cmdline)
			if diff := cmp.Diff(tc.want, c.jsonReport(tc.dev, tc.mtu, tc.res)); diff != "" {
				t.Errorf("%s: report (-want +got):\n%s", tc.cmdline, diff)
			}
			// The file's description mirrors the banner: its test name is the
			// title's words, joined.
			var banner strings.Builder
			c.printBanner(&banner, tc.dev, tc.mtu)
			title := strings.TrimSpace(strings.Split(banner.String(), "\n")[1])
			if name := strings.ReplaceAll(title, " ", "_"); !strings.Contains(tc.want, "test: "+name+",\n") {
				t.Errorf("%s: banner title %q, file's test name differs", tc.cmdline, title)
			}
		})
	}
}

// TestBannerEventsTOS: the banner lines perftest prints with -e and with
// -R -T, which the report file's "Test with events" and "TOS" mirror.
func TestBannerEventsTOS(t *testing.T) {
	for _, tc := range []struct {
		cmdline, want, not string
	}{
		{"read_bw -e 10.0.0.1", "                    RDMA_Read BW Test\n Test with events. Using rxe0_comp0\n Dual-port       : OFF", ""},
		{"write_bw -R -T 5 10.0.0.1", "\n Data ex. method : rdma_cm \tTOS    : 5\n" + resultLine, ""},
		{"write_bw -R 10.0.0.1", "\n Data ex. method : rdma_cm\n" + resultLine, "TOS"},
		{"write_bw -T 5 10.0.0.1", "\n Data ex. method : Ethernet\n" + resultLine, "TOS"}, // no rdma_cm: the GRH's, not shown, as perftest
	} {
		var b strings.Builder
		jsonCase(t, tc.cmdline).printBanner(&b, "rxe0", verbs.MTU1024)
		if !strings.Contains(b.String(), tc.want) || tc.not != "" && strings.Contains(b.String(), tc.not) {
			t.Errorf("%s: banner\n%s\nwant %q (and no %q)", tc.cmdline, b.String(), tc.want, tc.not)
		}
	}
}

// readJSON parses a --out_json file line by line into "block.key" ->
// value, checking its frame: "{", the test_info and results blocks, "}".
func readJSON(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the report file: %v", err)
	}
	defer f.Close()
	var lines []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 6 || lines[0] != "{" || lines[1] != "test_info: {" || lines[len(lines)-2] != "}," || lines[len(lines)-1] != "}" {
		t.Fatalf("%s: not perftest's frame:\n%s", path, strings.Join(lines, "\n"))
	}
	kv, block := map[string]string{}, ""
	for _, l := range lines[1 : len(lines)-1] {
		switch {
		case strings.HasSuffix(l, ": {"):
			block = strings.TrimSuffix(l, ": {")
		case l == "},":
			block = ""
		default:
			k, v, ok := strings.Cut(l, ": ")
			if !ok || block == "" || !strings.HasSuffix(v, ",") {
				t.Fatalf("%s: line %q", path, l)
			}
			kv[block+"."+strings.TrimSpace(k)] = strings.TrimSuffix(v, ",")
		}
	}
	return kv
}

// TestPerftestOutJSON: --out_json on both sides over loopback writes the
// file where perftest does (where a result line is printed: both sides of
// write_bw, read_lat's client only), with the result printed on stdout;
// an unwritable file is one line on stderr and exit 1, the result printed.
func TestPerftestOutJSON(t *testing.T) {
	bin := tooltest.Binary(t)
	bwRow := regexp.MustCompile(`(?m)^ 4096\s+20\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d{6})$`)
	latRow := regexp.MustCompile(`(?m)^ 64\s+20\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s`)
	for _, tc := range []struct {
		tool       string
		serverFile bool // the server writes the file too
	}{
		{"write_bw", true},
		{"read_lat", false},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			sa, ca := tooltest.LoopPair()
			args := []string{"-p", strconv.Itoa(tooltest.FreeTCPPort(t)), "-n", "20", "-s", "4096", "--out_json"}
			if tc.tool == "read_lat" {
				args[5] = "64"
			}
			files := [2]string{filepath.Join(dir, "server.json"), filepath.Join(dir, "client.json")}
			s, c := tooltest.RunPair(t, 60*time.Second,
				append([]string{bin, tc.tool, "-d", sa, "--out_json_file=" + files[0]}, args...),
				append([]string{bin, tc.tool, "-d", ca, "--out_json_file=" + files[1]}, append(args, "127.0.0.1")...))
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", s, c)
			}
			for i, side := range []struct {
				name  string
				r     tooltest.ProcResult
				dev   string
				wants bool
			}{{"server", s, sa, tc.serverFile}, {"client", c, ca, true}} {
				_, err := os.Stat(files[i])
				if !side.wants {
					if err == nil {
						t.Errorf("%s wrote %s: perftest's does not (no result line)", side.name, files[i])
					}
					continue
				}
				kv := readJSON(t, files[i])
				if st, err := os.Stat(files[i]); err != nil || st.Mode().Perm() != 0o600 {
					t.Errorf("%s: file mode %v (%v), want 0600 as perftest's", side.name, st.Mode(), err)
				}
				if kv["test_info.Device"] != `"`+side.dev+`"` {
					t.Errorf("%s: Device %s, want %q", side.name, kv["test_info.Device"], side.dev)
				}
				if tc.tool == "write_bw" {
					m := bwRow.FindStringSubmatch(side.r.Stdout)
					if m == nil {
						t.Fatalf("%s: no result row\n%s", side.name, side.r)
					}
					for k, want := range map[string]string{"MsgSize": "4096", "n_iterations": "20", "BW_peak": m[1], "BW_average": m[2], "MsgRate": m[3]} {
						if got := kv["results."+k]; got != want {
							t.Errorf("%s: %s %q in the file, %q on stdout", side.name, k, got, want)
						}
					}
					continue
				}
				m := latRow.FindStringSubmatch(side.r.Stdout)
				if m == nil {
					t.Fatalf("%s: no result row\n%s", side.name, side.r)
				}
				for k, want := range map[string]string{"MsgSize": "64", "n_iterations": "20", "t_min": m[1], "t_max": m[2], "t_typical": m[3], "t_avg": m[4]} {
					if got := kv["results."+k]; got != want {
						t.Errorf("%s: %s %q in the file, %q on stdout", side.name, k, got, want)
					}
				}
			}
		})
	}
	t.Run("unwritable", func(t *testing.T) {
		t.Parallel()
		bad := filepath.Join(t.TempDir(), "no-such-dir", "r.json")
		s, c := pair(t, 60*time.Second, "write_bw", "-n", "20", "-s", "4096", "--out_json", "--out_json_file="+bad)
		want := fmt.Sprintf(" --out_json: could not write the report file %s: no such file or directory "+
			"(the result is on stdout only; give --out_json_file a writable path)\n", bad)
		for side, r := range map[string]tooltest.ProcResult{"server": s, "client": c} {
			tooltest.MustMatch(t, side, r, `(?m)^ 4096\s+20\s`)
			if r.Code != cli.ExitFailure || r.Stderr != want {
				t.Errorf("%s: exit %d, stderr %q; want exit 1 and %q", side, r.Code, r.Stderr, want)
			}
		}
	})
}

// TestPerftestDontXchgVersions: with --dont_xchg_versions every perftest
// 4.5 tool fails check_version_compatibility: softroce's exit 1 at once
// with perftest's line, on either side, and print nothing else.
func TestPerftestDontXchgVersions(t *testing.T) {
	for _, tool := range tools {
		t.Run(tool.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			s, c := pair(t, 20*time.Second, tool.name, "--dont_xchg_versions", "-n", "20")
			if took := time.Since(began); took > 10*time.Second {
				t.Errorf("took %v: the tools must exit at once", took)
			}
			for side, r := range map[string]tooltest.ProcResult{"server": s, "client": c} {
				if r.Code != cli.ExitFailure || !strings.HasPrefix(r.Stderr, versionsLine) || strings.Count(r.Stderr, "\n") != 2 ||
					!strings.Contains(r.Stderr, "run both sides without it") || r.Stdout != "" {
					t.Errorf("%s: %v\nwant exit 1, nothing on stdout, and on stderr %q and what to do", side, r, versionsLine)
				}
			}
		})
	}
}

// TestTrafficClassQPs: the QPs connected without rdma_cm carry the
// traffic class in their address vector's GRH: --tclass's, which wins over
// -T, else -T's, else 0.
func TestTrafficClassQPs(t *testing.T) {
	sa, _ := tooltest.LoopPair()
	dev := openLoopDevice(t, "tc0", sa)
	gid, err := dev.QueryGID(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	td := &toolkit.ToolDevice{Info: toolkit.Device{Name: "tc0"}, Dev: dev}
	for _, tc := range []struct {
		args string
		want uint8
	}{
		{"write_bw -n 20", 0},
		{"write_bw -n 20 -T 32", 32},
		{"write_bw -n 20 -T 32 --tclass=96", 96},
		{"send_lat -n 20 -c UC --tclass=0x48", 72},
	} {
		c := jsonCase(t, tc.args+" 10.0.0.1")
		r, err := newResources(c, td, gid)
		if err != nil {
			t.Fatal(err)
		}
		r.mtu = verbs.MTU1024
		r.remote = []oob.PerftestDest{{QPN: 0x123, PSN: 1, GID: gid}}
		if err := r.connect(); err != nil {
			r.close()
			t.Fatalf("%s: %v", tc.args, err)
		}
		a, _ := r.qps[0].Query()
		r.close()
		if got := a.AHAttr.GRH.TrafficClass; got != tc.want {
			t.Errorf("%s: the QP's traffic class %d, want %d", tc.args, got, tc.want)
		}
	}
}

// TestJSONKernelFiles: with the values kernel perftest measured, softroce
// writes the --out_json files and the -D latency row that perftest 4.5+0.17
// wrote and printed (testdata/perftest_write_lat_D_*.json, README there).
func TestJSONKernelFiles(t *testing.T) {
	for _, tc := range []struct {
		file, cmdline string
		res           sizeResult
		row           string
	}{
		{"perftest_write_lat_D_client.json", "write_lat -x 1 -D 2 --out_json 127.0.0.1",
			sizeResult{size: 2, latIter: 226, latAvg: 8860540 * time.Nanosecond, latPeriod: 2002481 * time.Microsecond},
			" 2             226            4430.27        112.86 \n"},
		{"perftest_write_lat_D_server.json", "write_lat -x 1 -D 2 --out_json",
			sizeResult{size: 2, latIter: 225, latAvg: 8931000 * time.Nanosecond, latPeriod: 2009467 * time.Microsecond},
			" 2             225            4465.50        111.97 \n"},
	} {
		want, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		c := jsonCase(t, tc.cmdline)
		if diff := cmp.Diff(string(want), c.jsonReport("rxe0", verbs.MTU1024, tc.res)); diff != "" {
			t.Errorf("%s: report (-kernel's +softroce's):\n%s", tc.cmdline, diff)
		}
		var b strings.Builder
		c.printResultHeader(&b)
		c.printResult(&b, tc.res)
		if diff := cmp.Diff(" #bytes        #iterations       t_avg[usec]    tps average\n"+tc.row, b.String()); diff != "" {
			t.Errorf("%s: header and row (-kernel's +softroce's):\n%s", tc.cmdline, diff)
		}
	}
}

// TestCQModLargeMessages: as perftest 4.5 (and as kernel ib_write_bw -D 2
// printed, CQ Moderation 1 at its default 64 KiB), messages above 8 KiB are
// not moderated unless -Q asks, with perftest's warning on stdout then; UD,
// -a and events keep the default.
func TestCQModLargeMessages(t *testing.T) {
	const warn = resultLine + "Warning: Large message requested and CQ moderation enabled\nWarning: It can lead to inaccurate results\n"
	for _, tc := range []struct {
		tool string
		args []string
		cq   int
		warn bool
	}{
		{"write_bw", nil, 1, false}, // 65536 bytes by default
		{"write_bw", []string{"-s", "8192"}, 100, false},
		{"write_bw", []string{"-s", "8193"}, 1, false},
		{"write_bw", []string{"-s", "8192", "-t", "16"}, 16, false},
		{"write_bw", []string{"-s", "65536", "-Q", "10"}, 10, true},
		{"write_bw", []string{"-s", "65536", "-Q", "1"}, 1, false},
		{"write_bw", []string{"-a"}, 100, false},
		{"read_bw", []string{"-e", "-s", "1048576"}, 100, false},
		{"read_bw", []string{"-s", "1048576"}, 1, false},
		{"send_bw", []string{"-c", "UD", "-s", "2048"}, 100, false},
	} {
		var out, errb strings.Builder
		c, _, ok := parseArgs(toolNamed(t, tc.tool), tc.args, &out, &errb)
		if !ok {
			t.Errorf("%s %q: refused: %s", tc.tool, tc.args, errb.String())
			continue
		}
		if c.cqMod != tc.cq || strings.Contains(out.String(), warn) != tc.warn {
			t.Errorf("%s %q: CQ moderation %d, stdout %q; want %d, warning %v", tc.tool, tc.args, c.cqMod, out.String(), tc.cq, tc.warn)
		}
	}
}

func toolNamed(t *testing.T, name string) toolSpec {
	for _, x := range tools {
		if x.name == name {
			return x
		}
	}
	t.Fatalf("no tool %s", name)
	return toolSpec{}
}

// TestBWLineExt: with --report_gbits an average below 0.1 Gb/s prints
// perftest's REPORT_FMT_EXT (six decimals, as its JSON's
// REPORT_FMT_EXT_JSON); from 0.1 on, its REPORT_FMT.
func TestBWLineExt(t *testing.T) {
	for _, tc := range []struct {
		args []string
		rep  oob.BWReport
		want string
	}{
		{[]string{"--report_gbits", "10.0.0.1"}, oob.BWReport{Size: 8, Iters: 100, BWPeak: 0.0625, BWAvg: 0.05, MsgRateAvg: 0.78125},
			" 8          100           0.062500            0.050000            0.781250\n"},
		{[]string{"--report_gbits", "10.0.0.1"}, oob.BWReport{Size: 8, Iters: 100, BWPeak: 0.5, BWAvg: 0.25, MsgRateAvg: 3.90625},
			" 8          100              0.50               0.25   \t\t   3.906250\n"},
		{[]string{"10.0.0.1"}, oob.BWReport{Size: 8, Iters: 100, BWPeak: 0.0625, BWAvg: 0.05, MsgRateAvg: 0.78125},
			" 8          100              0.06               0.05   \t\t   0.781250\n"},
	} {
		c := parseWant(t, "atomic_bw", tc.args, "")
		var b strings.Builder
		c.printResult(&b, sizeResult{bw: tc.rep})
		if diff := cmp.Diff(tc.want, b.String()); diff != "" {
			t.Errorf("%q: result line (-want +got):\n%s", tc.args, diff)
		}
	}
}
