package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/verbs"
)

// session is one side of a test on an open device, through its stages:
// setUp (device checks, the side channel, the resources, the MTU
// exchange), connect (the QPs), measure (the per-size loop), finish (the
// closing handshake, -w/-y, --wait_destroy) and release.
type session struct {
	c              *config
	td             *toolkit.ToolDevice
	stdout, stderr io.Writer
	verbose        io.Writer // stdout, or io.Discard with --output

	gid   verbs.GID
	udMax int // UD: the largest message (one packet); 0 otherwise

	pc   sideChannel
	pcm  *cmChannel // -R/-z: the rdma_cm side channel
	conn net.Conn   // the TCP side channel
	r    *resources

	limits  limitsMet // -w/-y over the sizes measured
	jsonErr error     // --out_json's first failure; not tried again after it
}

// runOn runs one side of a test on the open device td.
func runOn(ctx context.Context, c *config, td *toolkit.ToolDevice, stdout, stderr io.Writer) error {
	s := &session{c: c, td: td, stdout: stdout, stderr: stderr, verbose: stdout}
	// With --output, perftest prints the result's value alone: no banner,
	// addresses, headers or separators.
	if c.output != "" {
		s.verbose = io.Discard
	}
	defer s.release()
	if err := s.setUp(ctx); err != nil {
		return err
	}
	if err := s.connect(ctx); err != nil {
		return err
	}
	if err := s.measure(ctx); err != nil {
		return err
	}
	return s.finish(ctx)
}

// setUp checks the device, opens the side channel, creates the resources,
// exchanges the MTU and prints the banner.
func (s *session) setUp(ctx context.Context) error {
	c, td := s.c, s.td
	if err := s.checkDevice(); err != nil {
		return err
	}
	if c.isServer() {
		fmt.Fprint(s.verbose, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	}
	watch, err := s.openChannel(ctx)
	if err != nil {
		return err
	}
	if s.r, err = newResources(c, td, s.gid); err != nil {
		var me *mmapError
		if errors.As(err, &me) && me.line != "" {
			fmt.Fprintln(s.stdout, me.line) // perftest's, on stdout
		}
		return err
	}
	r := s.r
	if r.mapped {
		fmt.Fprintf(s.stdout, "allocated mmap buffer of size %d at %#x\n", len(r.buf), r.addr(0)) // perftest's pp_init_mmap
	}
	r.watch = watch
	localMTU := td.Dev.ActiveMTU()
	if c.mtu != 0 {
		localMTU = min(localMTU, toolkit.MTUEnum(c.mtu))
	}
	_, mtu, err := s.pc.Setup(ctx, oob.SysData{CycleBuffer: cycleBuffer, CacheLineSize: cacheLine}, int(localMTU))
	if err != nil {
		return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
	}
	r.mtu = verbs.MTU(mtu)
	c.printBanner(s.verbose, td.Info.Name, r.mtu)
	return nil
}

// checkDevice checks the options against the device as perftest's
// verify_params_with_device_context and check_link do.
func (s *session) checkDevice() error {
	c, td := s.c, s.td
	if c.events && c.vector >= compVectors {
		return fmt.Errorf("Completion vector specified is invalid: Max completion vector = %d (-X %d; softroce devices have one, -X 0)",
			compVectors-1, c.vector)
	}
	if c.pkeyIndex > 0 {
		c.checkPKeyIndex(td, s.stdout, s.stderr)
	}
	if c.ipv6 && !c.gidxSet {
		i, err := c.ipv6GIDIndex(td)
		if err != nil {
			return err
		}
		c.gidx = i
	}
	var err error
	if s.gid, err = td.GID(c.gidx); err != nil {
		return err
	}
	if c.qpType() == verbs.QPTypeUD {
		// As perftest's check_link_and_mtu: UD messages fit in one packet.
		s.udMax = td.Dev.ActiveMTU().Bytes()
		if c.mtu != 0 {
			s.udMax = min(s.udMax, c.mtu)
		}
		if !c.all && c.size > s.udMax {
			fmt.Fprintf(s.stdout, "Max msg size in UD is MTU %d\n Changing to this MTU\n", s.udMax)
			c.size = s.udMax
		}
	}
	return nil
}

// openChannel opens the side channel: rdma_cm with -R/-z, else TCP, and
// returns the TCP channel's liveness watch (nil with -R/-z).
func (s *session) openChannel(ctx context.Context) (*peerWatch, error) {
	c := s.c
	var err error
	if c.cmComm {
		if s.pcm, err = startCM(ctx, c, s.td, s.stderr); err != nil {
			return nil, err
		}
		s.pc = s.pcm.side
		return nil, nil
	}
	if c.listens() {
		s.conn, err = accept(ctx, c.tcpPort)
	} else {
		s.conn, err = toolkit.Dial(ctx, c.server, c.tcpPort, c.connectTO)
	}
	if err != nil {
		return nil, err
	}
	s.pc = oob.NewPerftestConn(s.conn, !c.listens())
	return newPeerWatch(s.conn, c.qpTimeout), nil
}

// connect connects the QPs: through the CM with -R, else by exchanging
// the destinations over the side channel.
func (s *session) connect(ctx context.Context) error {
	c, r := s.c, s.r
	if c.rdmaCM {
		if c.isServer() {
			printCMWaiting(s.verbose)
		}
		if err := s.pcm.connectTraffic(ctx, r, s.gid); err != nil {
			return err
		}
	}
	for i := range r.local {
		c.printDest(s.verbose, "local", &r.local[i])
	}
	remote, err := s.pc.Connect(ctx, r.local, func(rem []oob.PerftestDest) error {
		r.remote = rem
		for i := range rem {
			c.printDest(s.verbose, "remote", &rem[i])
		}
		if c.rdmaCM {
			return nil // the CM connected the QPs
		}
		return r.connect()
	})
	if err != nil {
		return fmt.Errorf("Unable to Connect the HCA's through the link: %w", err)
	}
	r.remote = remote
	fmt.Fprint(s.verbose, resultLine)
	return nil
}

// sizes are the message sizes of the run: -s's, or with -a every power of
// two from 2 to 2^23 (UD: up to the MTU).
func (s *session) sizes() []int {
	if !s.c.all {
		return []int{s.c.size}
	}
	var sizes []int
	for i := 1; i < 24; i++ {
		if s.udMax > 0 && 1<<i > s.udMax {
			break
		}
		sizes = append(sizes, 1<<i)
	}
	return sizes
}

// printsResults reports whether this side prints result lines: all but
// the server of read_lat and atomic_lat.
func (s *session) printsResults() bool {
	c := s.c
	return !(c.tool.lat && c.isServer() && (c.tool.verb == verbRead || c.tool.verb == verbAtomic))
}

// verifies reports whether this side checks -w and -y: the side that
// measured, a bandwidth client, and send_bw's server, which measures its
// own.
func (s *session) verifies() bool {
	return !s.c.tool.lat && !(s.c.isServer() && s.c.tool.test.Plan().Report)
}

// measure runs the traffic of each size and prints its result.
func (s *session) measure(ctx context.Context) error {
	c := s.c
	sizes := s.sizes()
	prog := newProgress(c, s.stderr)
	if s.printsResults() {
		c.printResultHeader(s.verbose)
	}
	for i, size := range sizes {
		if err := s.measureSize(ctx, prog, size, i == 0, i == len(sizes)-1); err != nil {
			return err
		}
	}
	if s.printsResults() {
		fmt.Fprint(s.verbose, resultLine)
	}
	return nil
}

// measureSize runs the traffic of one size (the first and last of the run
// as first and last say) and prints its result.
func (s *session) measureSize(ctx context.Context, prog *progress, size int, first, last bool) error {
	c, r, pc := s.c, s.r, s.pc
	plan := c.tool.test.Plan()
	prog.setSize(size)
	if err := r.ready(size); err != nil {
		return err
	}
	// perftest 4.5 with -a: the send tests post receives and handshake before
	// every size; the others handshake once, and the write/read/atomic BW
	// client sends only its last report, which is all their server prints.
	if first || c.tool.verb == verbSend {
		for range plan.SyncBeforeTraffic {
			if _, err := pc.HandShake(ctx, &r.local[0]); err != nil {
				return fmt.Errorf("Failed to sync between server and client: %w", err)
			}
		}
	}
	res, err := r.traffic(ctx, size, prog)
	if err != nil {
		if !c.tool.lat && errors.Is(err, errWCFailed) {
			// perftest's main after a failed run_iter_bw.
			return fmt.Errorf("%w\n Failed to complete run_iter_bw function successfully", err)
		}
		return err
	}
	prog.clear()
	if s.verifies() {
		s.limits.add(c, res.bw)
	}
	if plan.Report {
		if !last {
			if !c.isServer() {
				s.report(res)
			}
			return nil
		}
		if _, err := pc.HandShake(ctx, &r.local[0]); err != nil {
			return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
		}
		rem, err := pc.ExchangeBWReport(ctx, res.bw)
		if err != nil {
			return fmt.Errorf("Failed to exchange the reports: %w", err)
		}
		if c.isServer() {
			res.bw = rem
		}
	}
	if s.printsResults() {
		if !c.hasResult(res) {
			// A result line without iterations would hide a failed run.
			return c.noResult(size)
		}
		s.report(res)
	}
	return nil
}

// report prints a result line and, with --out_json, writes the report
// file as perftest does with each line it prints: rewritten for every
// size, it holds the last. After a failure it is not tried again.
func (s *session) report(res sizeResult) {
	if s.c.outJSON && s.jsonErr == nil {
		s.jsonErr = s.c.writeJSON(s.c.jsonReport(s.td.Info.Name, s.r.mtu, res))
	}
	s.c.printResult(s.stdout, res)
}

// finish closes the test with the peer, checks -w and -y, and waits
// --wait_destroy seconds (perftest's destroy_ctx, before it releases
// anything).
func (s *session) finish(ctx context.Context) error {
	c := s.c
	if c.tool.test.Plan().Close {
		if err := s.pc.Close(ctx, &s.r.local[0]); err != nil {
			return fmt.Errorf("Failed to close connection between server and client: %w", err)
		}
	}
	var limitErr error
	if s.verifies() {
		limitErr = s.limits.err(c)
	}
	if c.waitDestroy > 0 {
		fmt.Fprintf(s.stdout, " Waiting %d seconds before releasing resources...\n", c.waitDestroy)
		t := time.NewTimer(time.Duration(c.waitDestroy) * time.Second)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return errors.Join(limitErr, s.jsonErr)
}

// release closes the side channel, then the resources: after the CM has
// destroyed its IDs' QPs (-R), the run's resources go, so that a library
// user's device (Run) is left as it was.
func (s *session) release() {
	if s.pcm != nil {
		s.pcm.close()
	}
	if s.conn != nil {
		s.conn.Close()
	}
	if s.r != nil {
		s.r.close()
	}
}
