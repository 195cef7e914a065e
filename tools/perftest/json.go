package perftest

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/softroce/softroce/verbs"
)

// --out_json: the report file of perftest 4.5 (print_full_bw_report,
// print_report_lat and print_report_lat_duration in perftest_parameters.c
// write it where they print the result line, on whichever side prints
// one). Its text is perftest's own pseudo-JSON (unquoted keys, trailing
// commas), reproduced byte for byte: "{", the test's description
// (write_test_info_to_file, the banner's lines), the result
// (REPORT_FMT_JSON and its kin in perftest_parameters.h), "}".

// jsonDefault is perftest's DEFAULT_JSON_FILE_NAME, in the working
// directory.
const jsonDefault = "perftest_out.json"

// testWord is perftest's testsStr: the test's verb as its banner and
// report name it.
func (c *config) testWord() string {
	return [...]string{verbSend: "Send", verbWrite: "RDMA_Write", verbRead: "RDMA_Read", verbAtomic: "Atomic"}[c.tool.verb]
}

// jsonReport is the --out_json file's text for the result r, on a device
// named dev with the path MTU mtu (the banner's values).
func (c *config) jsonReport(dev string, mtu verbs.MTU, r sizeResult) string {
	var b strings.Builder
	b.WriteString("{\n")
	c.jsonTestInfo(&b, dev, mtu)
	c.jsonResults(&b, r)
	b.WriteString("}\n")
	return b.String()
}

// jsonTestInfo is write_test_info_to_file: the banner's lines, under the
// same conditions (printBanner).
func (c *config) jsonTestInfo(b *strings.Builder, dev string, mtu verbs.MTU) {
	t := c.tool
	b.WriteString("test_info: {\n")
	fmt.Fprintf(b, "test: %s_", c.testWord())
	if t.verb == verbAtomic {
		fmt.Fprintf(b, "%s_", c.atomicType)
	}
	if t.lat {
		b.WriteString("Latency_")
	} else {
		b.WriteString("BW_")
	}
	b.WriteString("Test,\n")
	if c.events {
		fmt.Fprintf(b, "Test with events: Using_%s_comp0,\n", dev)
	}
	fmt.Fprintf(b, "Dual_port: OFF,\nDevice: \"%s\",\n", dev)
	fmt.Fprintf(b, "Number_of_qps: %d,\nTransport_type: IB,\n", c.numQP)
	fmt.Fprintf(b, "Connection_type: %s,\nUsing_SRQ: %s,\n", c.conn, onOff(c.useSRQ))
	// As the banner: kernel perftest 4.5+0.17 (Debian's, built with HAVE_RO)
	// writes "PCIe_relax_order: OFF," for write_lat.
	fmt.Fprintf(b, "PCIe_relax_order: %s,\n", c.relaxOrder())
	b.WriteString("ibv_wr_API: OFF,\n")
	if !c.isServer() {
		fmt.Fprintf(b, "TX_depth : %d,\n", c.txDepth)
	}
	if t.verb == verbSend && c.isServer() {
		fmt.Fprintf(b, "RX_depth: %d,\n", c.rxDepth)
	}
	if !t.lat {
		fmt.Fprintf(b, "CQ_Moderation: %d,\n", c.cqMod)
	}
	fmt.Fprintf(b, "Mtu: %d,\n", mtu.Bytes())
	b.WriteString("Link_type: Ethernet,\n")
	fmt.Fprintf(b, "GID_index: %d,\n", c.gidx)
	if t.verb == verbRead || t.verb == verbAtomic {
		fmt.Fprintf(b, "Outstand_reads: %d,\n", c.outReads)
	} else {
		fmt.Fprintf(b, "Max_inline_data: %d,\n", c.inline)
	}
	fmt.Fprintf(b, "rdma_cm_QPs: %s,\n", onOff(c.rdmaCM))
	fmt.Fprintf(b, "Data_ex_method: %s,\n", c.exchangeMethod())
	if c.rdmaCM && c.tosSet {
		fmt.Fprintf(b, "TOS: %d,\n", c.tos)
	}
	b.WriteString("},\n")
}

// jsonResults is the results block: write_bw_report_to_file,
// write_report_lat_to_file and write_report_lat_duration_to_file, with the
// values printResult prints.
func (c *config) jsonResults(b *strings.Builder, r sizeResult) {
	b.WriteString("results: {\n")
	cpu := true // REPORT_EXT_CPU_UTIL_JSON, with --cpu_util in a -D run
	switch {
	case !c.tool.lat:
		bw := r.bw
		switch {
		case c.output == "bandwidth":
			fmt.Fprintf(b, "bw_avg: %f,\n", bw.BWAvg)
		case c.output == "message_rate":
			fmt.Fprintf(b, "msgRate_avg: %f,\n", bw.MsgRateAvg)
		case c.reportGbits && bw.BWAvg < 0.1: // perftest's inc_accuracy: REPORT_FMT_EXT_JSON
			fmt.Fprintf(b, "MsgSize: %d,\nn_iterations: %d,\nBW_peak: %.6f,\nBW_average: %.6f,\nMsgRate: %.6f,\n",
				bw.Size, bw.Iters, bw.BWPeak, bw.BWAvg, bw.MsgRateAvg)
		default: // REPORT_FMT_JSON
			fmt.Fprintf(b, "MsgSize: %d,\nn_iterations: %d,\nBW_peak: %.2f,\nBW_average: %.2f,\nMsgRate: %.6f,\n",
				bw.Size, bw.Iters, bw.BWPeak, bw.BWAvg, bw.MsgRateAvg)
		}
	case c.duration > 0:
		avg, tps := c.latDuration(r)
		if c.output == "latency" {
			fmt.Fprintf(b, "t_avg: %f\n", avg) // perftest's, without the comma
			cpu = false
			break
		}
		// REPORT_FMT_LAT_DUR_JSON
		fmt.Fprintf(b, "MsgSize: %d,\nn_iterations: %d,\nt_avg: %.2f,\ntps_average: %.2f,\n", r.size, r.latIter, avg, tps)
	default:
		v, _ := c.latStats(r)
		if c.output == "latency" {
			fmt.Fprintf(b, "avg_lat: %f,\n", v[3])
			cpu = false
			break
		}
		// REPORT_FMT_LAT_JSON
		fmt.Fprintf(b, "MsgSize: %d,\nn_iterations: %d,\nt_min: %.2f,\nt_max: %.2f,\nt_typical: %.2f,\nt_avg: %.2f,\n"+
			"t_stdev: %.2f,\npercentile_99: %.2f,\npercentile_99.9: %.2f,\n", r.size, c.iters, v[0], v[1], v[2], v[3], v[4], v[5], v[6])
	}
	if cpu && c.cpuUtil {
		fmt.Fprintf(b, "CPU_util: %.2f,\n", r.cpu)
	}
	b.WriteString("},\n")
}

// writeJSON writes the --out_json file (created, or truncated, with
// perftest's mode 0600). Where perftest says "failed to open" and exits 0,
// the error says which file could not be written and why, and the command
// exits 1 after the run.
func (c *config) writeJSON(text string) error {
	f, err := os.OpenFile(c.jsonFile, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		_, err = f.WriteString(text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("--out_json: could not write the report file %s: %v (the result is on stdout only; give --out_json_file a writable path)", c.jsonFile, err)
	}
	return nil
}
