package dadatool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"time"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/pipeline"
	"github.com/softroce/softroce/verbs"
)

// "dada send" and "dada recv" stream into a ring over RoCE or plain UDP.
func init() {
	subcommands["send"] = struct {
		summary string
		run     func(args []string, stdout, stderr io.Writer) int
	}{"stream a test pattern to a 'dada recv' over RoCE (RDMA WRITE) or UDP", runSend}
	subcommands["recv"] = struct {
		summary string
		run     func(args []string, stdout, stderr io.Writer) int
	}{"receive a RoCE or UDP stream into a ring, one transfer per observation", runRecv}
}

// ctrlPort is the TCP port of the RoCE control connection.
const ctrlPort = "18520"

// streamPacketFlags are the UDP packet layout flags shared by send and recv.
func streamPacketFlags(fs *cli.Getopt) *pipeline.PacketFormat {
	f := &pipeline.PacketFormat{}
	fs.IntVar(&f.HeaderLen, "hdr-len", 8, "UDP: packet header bytes before the payload")
	fs.IntVar(&f.PayloadSize, "payload", 8192, "UDP: payload bytes per packet")
	fs.IntVar(&f.SeqOffset, "seq-off", 0, "UDP: offset of the sequence number in the packet header")
	fs.IntVar(&f.SeqWidth, "seq-width", 8, "UDP: sequence number width, 4 or 8 bytes")
	fs.BoolVar(&f.LittleEndian, "seq-le", false, "UDP: the sequence number is little-endian (default big-endian)")
	fs.Uint64Var(&f.SeqStep, "seq-step", 1, "UDP: sequence number increment between consecutive packets")
	return f
}

// checkPacketFlags refuses the packet layout values the pipeline would
// silently replace by its defaults (zero fields) or take apart wrongly.
func checkPacketFlags(f *pipeline.PacketFormat) error {
	switch {
	case f.PayloadSize < 1:
		return fmt.Errorf("-payload %d: the payload must be 1 or more bytes per packet", f.PayloadSize)
	case f.HeaderLen == 0:
		return fmt.Errorf("-hdr-len 0: the header must hold the sequence number (-seq-off + -seq-width bytes)")
	case f.SeqWidth != 4 && f.SeqWidth != 8:
		return fmt.Errorf("-seq-width %d: the sequence number width must be 4 or 8 bytes", f.SeqWidth)
	case f.SeqStep == 0:
		return fmt.Errorf("-seq-step 0: the sequence number increment must be 1 or more")
	}
	return nil
}

// checkSendFlags validates dada send's numeric values after parsing
// (set: the options given; the parser refuses NaN, infinities and
// durations not positive): a bad value is named, not taken for a missing
// or default one.
func checkSendFlags(set map[string]bool, total int64, secs, rate, gbps, loss, reorder float64, qps, chunk, buffers int) error {
	switch {
	case set["b"] && total < 0:
		return fmt.Errorf("-b %d: the number of bytes to send must be 0 or more", total)
	case secs < 0:
		return fmt.Errorf("-t %v: the time to send must be 0 or more seconds", secs)
	case rate < 0:
		return fmt.Errorf("-r %v: the data rate must be a positive number of MiB/s, or 0 for as fast as possible", rate)
	case gbps < 0:
		return fmt.Errorf("-g %v: the data rate must be a positive number of Gb/s", gbps)
	case loss < 0 || loss > 1:
		return fmt.Errorf("-loss %v: the probability must be between 0 and 1", loss)
	case reorder < 0 || reorder > 1:
		return fmt.Errorf("-reorder %v: the probability must be between 0 and 1", reorder)
	case qps < 1:
		return fmt.Errorf("-qps %d: give at least one queue pair", qps)
	case chunk < 1:
		return fmt.Errorf("-chunk %d: the bytes per SEND must be 1 or more", chunk)
	case buffers < 0:
		return fmt.Errorf("-buffers %d: give a positive number of source buffers (0: qps+1)", buffers)
	}
	return nil
}

// streamProgress prints a sender's or receiver's counters while it runs: one line
// rewritten in place on a terminal, else (or with verbose) a line per interval.
type streamProgress struct {
	w        io.Writer
	st       *pipeline.Stats
	what     string
	nbufs    int
	interval time.Duration
	tty      bool
	quiet    bool
	stop     chan struct{}
	done     chan struct{}
}

func streamIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func startStreamProgress(w io.Writer, st *pipeline.Stats, what string, nbufs int, interval time.Duration, verbose, quiet bool) *streamProgress {
	p := &streamProgress{w: w, st: st, what: what, nbufs: nbufs, interval: interval, tty: streamIsTerminal(w) && !verbose,
		quiet: quiet, stop: make(chan struct{}), done: make(chan struct{})}
	if p.interval <= 0 {
		p.interval = time.Second
	}
	if p.tty {
		p.interval = min(p.interval, 500*time.Millisecond)
	}
	go p.run()
	return p
}

func (p *streamProgress) run() {
	defer close(p.done)
	if p.quiet {
		<-p.stop
		return
	}
	t := time.NewTicker(p.interval)
	defer t.Stop()
	start, last := time.Now(), time.Now()
	var lastBytes uint64
	for {
		select {
		case <-p.stop:
			if p.tty {
				fmt.Fprint(p.w, "\r\033[K")
			}
			return
		case now := <-t.C:
			b := p.st.Bytes.Load()
			rate := float64(b-lastBytes) * 8 / now.Sub(last).Seconds() / 1e9
			lastBytes, last = b, now
			line := fmt.Sprintf("%s %7.1fs %7.2f Gb/s %10s blocks %6d drops %d",
				p.what, now.Sub(start).Seconds(), rate, dada.FormatBytes(b), p.st.Blocks.Load(), p.st.Lost.Load()+p.st.Late.Load())
			if p.nbufs > 0 {
				line += fmt.Sprintf(" ring %d/%d full", p.st.Full.Load(), p.nbufs)
			}
			if wt := time.Duration(p.st.WaitNanos.Load()); wt > 0 {
				line += fmt.Sprintf(" waited %.2fs", wt.Seconds())
			}
			if p.tty {
				fmt.Fprintf(p.w, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(p.w, line)
			}
		}
	}
}

func (p *streamProgress) finish() { close(p.stop); <-p.done }

// streamOpenDevice opens a softroce device on the address -d names; with
// pcap set (--pcap) it writes the device's traffic there. close closes both.
func streamOpenDevice(name, pcap string) (dev *verbs.Device, close func() error, err error) {
	td, err := toolkit.OpenDevice(name, pcap)
	if err != nil {
		return nil, nil, err
	}
	return td.Dev, td.Close, nil
}

func streamOnOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// streamCPUProfile writes a CPU profile to path until the returned function
// is called (nothing when path is empty).
func streamCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func streamHeaderFile(path string) (*dada.Header, error) {
	if path == "" {
		return dada.NewHeader(dada.DefaultHeaderSize), nil
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	h := dada.ParseHeader(text)
	if _, err := h.Size(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

func runRecv(args []string, stdout, stderr io.Writer) int {
	fs, key := newDadaFlags("recv", stderr, "[-k key] [-udp] [-l addr] [-d dev] [-n obs] [-reg auto|single|per-block] [flags]")
	udp := fs.Bool("udp", false, "receive plain UDP packets with sequence numbers instead of RoCE")
	listen := fs.String("l", "", "listen address: RoCE control TCP (default :"+ctrlPort+"), or UDP data (default :4000)")
	devName := fs.String("d", "", "RoCE: softroce device (link name, netdev or IP[:port]; default 127.0.0.1:4791)")
	pcapPath := fs.String("pcap", "", "RoCE: write the device's RoCEv2 traffic to this pcap file")
	nobs := fs.Int("n", 1, "observations (transfers) to receive, 0: until interrupted")
	regMode := fs.String("reg", "auto", "RoCE: ring registration: auto, single (one MR, blocks remapped contiguously) or per-block")
	credits := fs.Int("credits", 4, "RoCE: ring blocks the sender may fill ahead (at most nbufs-1)")
	pf := streamPacketFlags(fs)
	window := fs.Int("window", 2, "UDP: ring blocks open at once (reordering tolerance)")
	idle := fs.Duration("idle", time.Second, "UDP: end the observation after this long without packets")
	packets := fs.Uint64("packets", 0, "UDP: end the observation after this many packets (0: idle timeout only)")
	hdrFile := fs.String("header", "", "UDP: observation header template (default: HDR_SIZE 4096 only)")
	rcvbuf := fs.Int("rcvbuf", 512<<20, "UDP: socket receive buffer bytes (SO_RCVBUFFORCE as root: it absorbs scheduling stalls)")
	interval := fs.Duration("i", time.Second, "progress interval")
	cpuprof := fs.String("cpuprofile", "", "write a CPU profile to this file")
	verbose := fs.Bool("v", false, "progress lines even on a terminal, and the registration")
	quiet := fs.Bool("q", false, "no progress, only the summary")
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	if err := checkPacketFlags(pf); err != nil {
		return cli.UsageErr(stderr, "softroce dada recv", "%v", err)
	}
	fail := func(err error) int { fmt.Fprintf(stderr, "softroce dada recv: %v\n", err); return 1 }
	if stop, err := streamCPUProfile(*cpuprof); err != nil {
		return fail(err)
	} else {
		defer stop()
	}
	ctx, stop := signalCtx()
	defer stop()
	h, err := dada.Connect(key.k, dada.AttachOptions{Layout: dada.LayoutContiguousTry})
	if err != nil {
		return fail(err)
	}
	defer h.Detach()
	nbufs := h.Data.NBufs()
	if *udp {
		addr := *listen
		if addr == "" {
			addr = ":4000"
		}
		hdr, err := streamHeaderFile(*hdrFile)
		if err != nil {
			return fail(err)
		}
		conn, err := pipeline.ListenUDP(addr, *rcvbuf)
		if err != nil {
			return fail(err)
		}
		defer conn.Close()
		fmt.Fprintf(stdout, "receiving UDP on %s into ring %s (%d × %d bytes, %d packets per block)\n",
			conn.LocalAddr(), key.k.Short(), nbufs, h.Data.BufSize(), h.Data.BufSize()/max(pf.PayloadSize, 1))
		for n := 0; *nobs == 0 || n < *nobs; n++ {
			st := new(pipeline.Stats)
			p := startStreamProgress(stdout, st, "recv", nbufs, *interval, *verbose, *quiet)
			sum, err := pipeline.RecvUDP(ctx, conn, h, pipeline.UDPRecvConfig{Format: *pf, Window: *window, IdleTimeout: *idle,
				Packets: *packets, Header: hdr, Stats: st})
			p.finish()
			if err != nil {
				return fail(err)
			}
			if sum.Header == nil { // interrupted before the first packet
				return 0
			}
			tot := sum.Packets + sum.Lost
			fmt.Fprintf(stdout, "transfer %d: %d bytes in %d blocks, %.3f s, %.2f Gb/s; packets %d received, %d lost (%.4f%%), %d late, %d reordered, %d duplicate, %d bad; first seq %d; GRO %s; waited %.3f s for free blocks\n",
				n, sum.Bytes, sum.Blocks, sum.Elapsed.Seconds(), sum.Gbps(), sum.Packets, sum.Lost, 100*float64(sum.Lost)/float64(max(tot, 1)),
				st.Late.Load(), st.Reordered.Load(), st.Dup.Load(), st.Bad.Load(), sum.StartSeq, streamOnOff(sum.Offload), time.Duration(st.WaitNanos.Load()).Seconds())
			if ctx.Err() != nil {
				return 0
			}
		}
		return 0
	}
	mode, err := pipeline.ParseMode(*regMode)
	if err != nil {
		return fail(err)
	}
	dev, closeDev, err := streamOpenDevice(*devName, *pcapPath)
	if err != nil {
		return fail(err)
	}
	defer closeDev()
	addr := *listen
	if addr == "" {
		addr = ":" + ctrlPort
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fail(err)
	}
	defer ln.Close()
	go func() { <-ctx.Done(); ln.Close() }()
	st := new(pipeline.Stats)
	rr, err := pipeline.NewRoCEReceiver(dev, h, pipeline.RoCERecvConfig{Credits: *credits, Register: pipeline.RegisterOptions{Mode: mode}, Stats: st})
	if err != nil {
		return fail(err)
	}
	defer rr.Close()
	reg := rr.Registration()
	fmt.Fprintf(stdout, "ring %s: %d × %d bytes registered %s (%d MR%s); RoCE device %s, control %s\n", key.k.Short(), nbufs,
		h.Data.BufSize(), reg.Mode, len(reg.MRs()), map[bool]string{true: "s"}[len(reg.MRs()) > 1], dev.LocalAddr(), ln.Addr())
	if *verbose {
		fmt.Fprintln(stdout, reg)
	}
	for n := 0; *nobs == 0 || n < *nobs; n++ {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			return fail(err)
		}
		*st = pipeline.Stats{}
		p := startStreamProgress(stdout, st, "recv", nbufs, *interval, *verbose, *quiet)
		sum, err := rr.Receive(ctx, c)
		p.finish()
		c.Close()
		if err != nil {
			return fail(err)
		}
		src, _ := sum.Header.Get("SOURCE")
		fmt.Fprintf(stdout, "transfer %d (SOURCE %s) from %s: %d bytes in %d blocks, %.3f s, %.2f Gb/s; waited %.3f s for free blocks; %s\n",
			n, src, c.RemoteAddr(), sum.Bytes, sum.Blocks, sum.Elapsed.Seconds(), sum.Gbps(), time.Duration(st.WaitNanos.Load()).Seconds(), sum.Via)
	}
	return 0
}

func runSend(args []string, stdout, stderr io.Writer) int {
	fs, key := newDadaFlags("send", stderr, "[-udp] -c host[:port] [-d dev] [-k key | -b bytes | -t secs] [-r MiB/s | -g Gb/s] [flags] [header_file]")
	fs.Lookup("k").Usage = "RoCE: relay the next transfer of the local ring at this key (header and data) instead of generated data"
	udp := fs.Bool("udp", false, "send plain UDP packets with sequence numbers instead of RoCE")
	to := fs.String("c", "", "receiver: RoCE control address (port "+ctrlPort+" if none), or UDP destination (port 4000 if none)")
	devName := fs.String("d", "", "RoCE: softroce device (link name, netdev or IP[:port]; default 127.0.0.1:4791)")
	pcapPath := fs.String("pcap", "", "RoCE: write the device's RoCEv2 traffic to this pcap file")
	total := fs.Int64("b", -1, "bytes to send (UDP: rounded up to whole packets)")
	secs := fs.Float64("t", 10, "seconds to send at the rate given (when -b is not given)")
	rate := fs.Float64("r", 0, "data rate in MiB/s (0: as fast as possible)")
	gbps := fs.Float64("g", 0, "data rate in Gb/s (overrides -r)")
	useSend := fs.Bool("send", false, "RoCE: SENDs into receives posted on the block's chunks (a classic verbs receive loop) instead of RDMA WRITE WITH IMM")
	chunk := fs.Int("chunk", 1<<20, "RoCE with -send: bytes per SEND (one posted receive each)")
	qps := fs.Int("qps", 4, "RoCE: RC queue pairs; block b goes over QP b mod qps, so several blocks are in flight")
	buffers := fs.Int("buffers", 0, "RoCE: source buffers of one block each, i.e. writes in flight (default qps+1; generated data only)")
	fillOnce := fs.Bool("fill-once", false, "RoCE: generate the pattern once and resend it (benchmarks; data then not checkable)")
	pf := streamPacketFlags(fs)
	start := fs.Uint64("start", 0, "UDP: first sequence number")
	loss := fs.Float64("loss", 0, "UDP: probability of leaving a packet out (testing)")
	reorder := fs.Float64("reorder", 0, "UDP: probability of swapping a packet with the next (testing)")
	wait := fs.Duration("wait", 10*time.Second, "RoCE: keep trying to reach the receiver this long")
	interval := fs.Duration("i", time.Second, "progress interval")
	cpuprof := fs.String("cpuprofile", "", "write a CPU profile to this file")
	verbose := fs.Bool("v", false, "progress lines even on a terminal")
	quiet := fs.Bool("q", false, "no progress, only the summary")
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	set := map[string]bool{}
	fs.Visit(func(f *cli.OptFlag) { set[f.Name] = true })
	err := checkSendFlags(set, *total, *secs, *rate, *gbps, *loss, *reorder, *qps, *chunk, *buffers)
	if err == nil {
		err = checkPacketFlags(pf)
	}
	if err != nil {
		return cli.UsageErr(stderr, "softroce dada send", "%v", err)
	}
	fail := func(err error) int { fmt.Fprintf(stderr, "softroce dada send: %v\n", err); return 1 }
	if stop, err := streamCPUProfile(*cpuprof); err != nil {
		return fail(err)
	} else {
		defer stop()
	}
	if *to == "" {
		fmt.Fprintln(stderr, "softroce dada send: give the receiver with -c host[:port]")
		return 2
	}
	relay := set["k"]
	if relay && *udp {
		fmt.Fprintln(stderr, "softroce dada send: -k (relay a ring) works in RoCE mode only")
		return 2
	}
	bps := *rate * (1 << 20)
	if *gbps > 0 {
		bps = *gbps * 1e9 / 8
	}
	size := uint64(*total)
	if *total < 0 && !relay {
		if bps <= 0 {
			fmt.Fprintln(stderr, "softroce dada send: as fast as possible (-r 0) needs the size with -b")
			return 2
		}
		size = uint64(bps * *secs)
	}
	ctx, stop := signalCtx()
	defer stop()
	st := new(pipeline.Stats)
	if *udp {
		dst := *to
		if _, _, err := net.SplitHostPort(dst); err != nil {
			dst = net.JoinHostPort(dst, "4000")
		}
		ua, err := net.ResolveUDPAddr("udp", dst)
		if err != nil {
			return fail(err)
		}
		conn, err := net.DialUDP("udp", nil, ua)
		if err != nil {
			return fail(err)
		}
		defer conn.Close()
		conn.SetWriteBuffer(8 << 20)
		ps := uint64(max(pf.PayloadSize, 1))
		npk := (size + ps - 1) / ps
		p := startStreamProgress(stdout, st, "send", 0, *interval, *verbose, *quiet)
		t0 := time.Now()
		err = pipeline.SendUDP(ctx, conn, pipeline.UDPSendConfig{Format: *pf, Rate: bps, Packets: npk, StartSeq: *start,
			Loss: *loss, Reorder: *reorder, Seed: uint64(time.Now().UnixNano()), Stats: st})
		p.finish()
		el := time.Since(t0)
		if err != nil && !errors.Is(err, context.Canceled) {
			return fail(err)
		}
		b := st.Bytes.Load()
		fmt.Fprintf(stdout, "sent %d packets (%d bytes) in %.3f s, %.2f Gb/s; %d left out on purpose\n",
			st.Packets.Load(), b, el.Seconds(), float64(b)*8/el.Seconds()/1e9, st.Skipped.Load())
		return 0
	}
	var hdr *dada.Header
	var src *dada.HDU
	if relay {
		h, err := dada.Connect(key.k, dada.AttachOptions{Layout: dada.LayoutContiguousTry})
		if err != nil {
			return fail(err)
		}
		defer h.Detach()
		src = h
		if fs.NArg() > 0 {
			if hdr, err = streamHeaderFile(fs.Arg(0)); err != nil {
				return fail(err)
			}
		}
	} else {
		var err error
		if hdr, err = streamHeaderFile(fs.Arg(0)); err != nil {
			return fail(err)
		}
		if fs.NArg() == 0 {
			hdr.Set("SOURCE", "softroce")
		}
		if _, ok := hdr.Get("UTC_START"); !ok {
			hdr.Set("UTC_START", time.Now().UTC().Format("2006-01-02-15:04:05"))
		}
		hdr.SetUint("TRANSFER_SIZE", size)
	}
	dst := *to
	if _, _, err := net.SplitHostPort(dst); err != nil {
		dst = net.JoinHostPort(dst, ctrlPort)
	}
	dev, closeDev, err := streamOpenDevice(*devName, *pcapPath)
	if err != nil {
		return fail(err)
	}
	defer closeDev()
	var c net.Conn
	deadline := time.Now().Add(*wait)
	for {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", dst)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fail(fmt.Errorf("reaching the receiver: %w", err))
	}
	defer c.Close()
	go func() { <-ctx.Done(); c.Close() }()
	p := startStreamProgress(stdout, st, "send", 0, *interval, *verbose, *quiet)
	sum, err := pipeline.SendRoCE(ctx, c, dev, pipeline.RoCESendConfig{Header: hdr, Bytes: size, Rate: bps, FillOnce: *fillOnce, QPs: *qps, Buffers: *buffers, Source: src, UseSend: *useSend, ChunkSize: *chunk, Stats: st})
	p.finish()
	if err != nil {
		return fail(err)
	}
	ds := dev.Stats()
	fmt.Fprintf(stdout, "sent %d bytes in %d blocks to %s, %.3f s, %.2f Gb/s; waited %.3f s for credits; %d packets, %d retransmits\n",
		sum.Bytes, sum.Blocks, c.RemoteAddr(), sum.Elapsed.Seconds(), sum.Gbps(), time.Duration(st.WaitNanos.Load()).Seconds(),
		ds.TxPackets.Load(), ds.Retransmits.Load())
	return 0
}
