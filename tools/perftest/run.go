// Package perftest is the perftest-style measurements (ib_send_bw,
// ib_write_lat, ... work-alikes, wire- and output-compatible with
// perftest 4.5) and the TCP baselines. Run runs one side of a measurement on
// any open verbs device. Importing the package also registers its commands
// ("softroce write_bw", ...) with the softroce command table.
package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/verbs"
)

// ErrUsage is wrapped by Run's errors about its test name or arguments.
var ErrUsage = errors.New("perftest: bad arguments")

// Tests returns the names of the tests Run knows ("send_bw", "write_bw",
// "read_bw", "atomic_bw", "send_lat", "write_lat", "read_lat", "atomic_lat").
func Tests() []string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.name
	}
	return names
}

// Run runs one side of the perftest-style measurement test (one of Tests)
// on dev, an open verbs device of the caller's, and writes perftest's
// report to stdout exactly as "softroce TEST" prints it. args are the
// command's options and operand, as on its command line: the server runs
// with no operand and the client names the server's host ("-s", "4096",
// "-n", "1000", "10.0.0.1"). The side channel (TCP, or rdma_cm with -R/-z)
// uses dev's GID at the -x index (default 1) as the local address; -d and
// --pcap do not apply, since the caller opened dev. Run leaves dev open,
// and releases the PD, MRs, CQs and QPs it created on it before returning.
// Errors from the arguments wrap ErrUsage; the rest are the run's failures.
func Run(ctx context.Context, dev *verbs.Device, test string, args []string, stdout io.Writer) error {
	var t *toolSpec
	for i := range tools {
		if tools[i].name == test {
			t = &tools[i]
		}
	}
	if t == nil {
		return fmt.Errorf("%w: unknown test %q (want one of %s)", ErrUsage, test, strings.Join(Tests(), ", "))
	}
	if dev == nil {
		return fmt.Errorf("%w: no device", ErrUsage)
	}
	var msg strings.Builder
	c, _, ok := parseArgs(*t, args, io.Discard, &msg)
	if !ok {
		return fmt.Errorf("%w: %s", ErrUsage, strings.TrimSpace(msg.String()))
	}
	if err := c.checkHopLimit(); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if err := c.checkVersions(); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if c.dev != "" || c.pcap != "" {
		return fmt.Errorf("%w: -d and --pcap name a device to open; Run uses the one it is given", ErrUsage)
	}
	gid, err := dev.QueryGID(1, c.gidx)
	if err == nil && gid == (verbs.GID{}) {
		err = errors.New("empty")
	}
	if err != nil {
		return fmt.Errorf("%w: GID index %d of %s: %v", ErrUsage, c.gidx, dev.Name(), err)
	}
	td := &toolkit.ToolDevice{
		Info: toolkit.Device{Name: dev.Name(), Addr: netip.AddrPortFrom(gid.Addr().Unmap().WithZone(""), 4791)},
		Dev:  dev,
	}
	return runOn(ctx, c, td, stdout, io.Discard)
}
