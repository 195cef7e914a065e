package dadatool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/internal/cli"
)

func init() {
	registerCmd(&cli.Command{
		Name:    "dada",
		Summary: "PSRDADA ring buffers: db (create/destroy), monitor, write, read, send, recv",
		Run:     runDada,
		Subs:    []string{"db", "monitor", "write", "read", "send", "recv"},
	})
}

var subcommands = map[string]struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}{
	"db":      {"create or destroy a ring, like dada_db", runDB},
	"monitor": {"show a ring's buffers once a second, like dada_dbmonitor", runMonitor},
	"write":   {"write transfers of generated data, like dada_junkdb", runWrite},
	"read":    {"read transfers and discard or save them, like dada_dbnull/dada_dbdisk", runRead},
}

func runDada(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := stdout
		if len(args) == 0 {
			w = stderr
		}
		fmt.Fprintln(w, "Usage: softroce dada SUBCOMMAND [options]\n\nSubcommands:")
		names := make([]string, 0, len(subcommands))
		for n := range subcommands {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "  %-8s %s\n", n, subcommands[n].summary)
		}
		fmt.Fprintln(w, "\nKeys are hexadecimal as in psrdada (default dada); the header block is key+1.")
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	s, ok := subcommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "softroce dada: unknown subcommand %q (want db, monitor, write, read, send or recv)\n", args[0])
		return 2
	}
	return s.run(args[1:], stdout, stderr)
}

// keyFlag is a flag.Value holding a hex key.
type keyFlag struct{ k dada.Key }

func (f *keyFlag) String() string { return f.k.Short() }
func (f *keyFlag) Set(s string) error {
	k, err := dada.ParseKey(s)
	if err != nil {
		return err
	}
	f.k = k
	return nil
}

func newDadaFlags(name string, stderr io.Writer, usage string) (*cli.Getopt, *keyFlag) {
	fs := cli.NewFlagSet("softroce dada " + name)
	fs.SetOutput(stderr)
	k := &keyFlag{k: dada.DefaultKey}
	fs.Var(k, "k", "hexadecimal shared memory key")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: softroce dada %s %s\n\nOptions:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs, k
}

// parseFlags parses a dada subcommand's arguments with the shared grammar:
// -h prints the usage (exit 0), a bad option one line (exit 2).
func parseFlags(fs *cli.Getopt, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, cli.ErrGetoptHelp) {
			fs.Help(fs.Output(), func(io.Writer) { fs.Usage() })
			return cli.ExitOK, false
		}
		return cli.UsageErr(fs.Output(), fs.Prog, "%v", err), false
	}
	if cli.ArgsOnly {
		return cli.ExitOK, false
	}
	return 0, true
}

func signalCtx() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runDB(args []string, stdout, stderr io.Writer) int {
	fs, key := newDadaFlags("db", stderr, "[-k key] [-n nbufs] [-b bufsz] [-r nread] [-a hdrsz] [-l] [-p] [-w] [-d]")
	nbufs := fs.Int("n", dada.DefaultNBufs, "number of data buffers")
	bufsz := fs.Uint64("b", dada.DefaultBufSize, "bytes per data buffer")
	nread := fs.Int("r", 1, "number of readers (1..8; psrdada's dada_db allows 1..5)")
	hdrsz := fs.Uint64("a", dada.DefaultHeaderSize, "bytes per header buffer (at least the page size)")
	lock := fs.Bool("l", false, "lock the ring in memory (needs CAP_IPC_LOCK or ulimit -l)")
	page := fs.Bool("p", false, "zero every buffer so its pages are allocated now")
	persist := fs.Bool("w", false, "persist: wait for SIGINT/SIGTERM, then destroy the ring")
	destroy := fs.Bool("d", false, "destroy the ring at -k instead of creating it")
	fs.Int("c", -1, "NUMA node (accepted for compatibility; not used)")
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	if *destroy {
		if err := dada.Destroy(key.k); err != nil {
			return failLine(stderr, "db", key.k, err)
		}
		fmt.Fprintf(stdout, "destroyed ring %s (data block %s, header block %s)\n", key.k.Short(), key.k, key.k.HeaderKey())
		return 0
	}
	if *nread < 1 || *nread > dada.MaxReaders {
		return cli.UsageErr(stderr, "softroce dada db", "-r %d: the number of readers must be 1..%d", *nread, dada.MaxReaders)
	}
	if *nbufs < 1 || *bufsz < 1 {
		return cli.UsageErr(stderr, "softroce dada db", "-n and -b must be at least 1")
	}
	h, err := dada.Create(dada.Config{Key: key.k, NBufs: *nbufs, BufSize: *bufsz, NReaders: *nread,
		HeaderSize: *hdrsz, Lock: *lock, Page: *page})
	if err != nil {
		return failLine(stderr, "db", key.k, err)
	}
	fmt.Fprintf(stdout, "created ring %s: data block %s, %d × %d bytes (%s) for %d reader(s); header block %s, %d × %d bytes\n",
		key.k.Short(), key.k, *nbufs, *bufsz, dada.FormatBytes(uint64(*nbufs)**bufsz), *nread, key.k.HeaderKey(), h.Header.NBufs(), h.Header.BufSize())
	if !*persist {
		h.Detach()
		return 0
	}
	ctx, stop := signalCtx()
	defer stop()
	fmt.Fprintln(stdout, "waiting for SIGINT to destroy it")
	<-ctx.Done()
	if err := h.Destroy(); err != nil {
		fmt.Fprintf(stderr, "softroce dada db: destroy: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "destroyed ring %s\n", key.k.Short())
	return 0
}

func runMonitor(args []string, stdout, stderr io.Writer) int {
	fs, key := newDadaFlags("monitor", stderr, "[-k key] [-i interval] [-n count]")
	interval := fs.Duration("i", time.Second, "time between lines")
	count := fs.Int("n", 0, "stop after this many lines (0: until interrupted)")
	fs.Bool("v", false, "verbose (accepted for compatibility)")
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	if err := checkMonitorFlags(*interval, *count); err != nil {
		return cli.UsageErr(stderr, "softroce dada monitor", "%v", err)
	}
	h, err := dada.Connect(key.k, dada.AttachOptions{})
	if err != nil {
		return failLine(stderr, "monitor", key.k, err)
	}
	defer h.Detach()
	ctx, stop := signalCtx()
	defer stop()
	hb, db := h.Header, h.Data
	fmt.Fprintf(stdout, "HEADER BLOCK:\nNumber of buffers: %d\nBuffer size: %d\nTotal buffer memory: %d KB\n",
		hb.NBufs(), hb.BufSize(), hb.NBufs()*hb.BufSize()/1024)
	fmt.Fprintf(stdout, "DATA BLOCK:\nNumber of readers: %d\nNumber of buffers: %d\nBuffer size: %d\nTotal buffer memory: %d MB\n\n",
		db.NReaders(), db.NBufs(), db.BufSize(), db.NBufs()*db.BufSize()/(1024*1024))
	fmt.Fprint(stdout, "HEADER               ")
	if db.NReaders() == 1 {
		fmt.Fprintln(stdout, "DATA")
	} else {
		for i := 0; i < db.NReaders(); i++ {
			fmt.Fprintf(stdout, "DATA%d                      ", i)
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprint(stdout, "FRE FUL CLR  W  R")
	for i := 0; i < db.NReaders(); i++ {
		fmt.Fprint(stdout, "    FRE FUL CLR     W     R")
	}
	fmt.Fprintln(stdout)
	t := time.NewTicker(*interval)
	defer t.Stop()
	for n := 0; *count == 0 || n < *count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return 0
			case <-t.C:
			}
		}
		hs, ds := hb.Stats(), db.Stats()
		// as dada_dbmonitor: the header columns are those of reader 0
		r0 := hs.Readers[0]
		fmt.Fprintf(stdout, "%3d %3d %3d %2d %2d", int(hs.NBufs)-r0.Full, r0.Full, r0.Clear, hs.WBufCurr, r0.RBuf)
		for _, r := range ds.Readers {
			fmt.Fprintf(stdout, "    %3d %3d %3d %5d %5d", int(ds.NBufs)-r.Full, r.Full, r.Clear, ds.WBufCurr, r.RBuf)
		}
		fmt.Fprintln(stdout)
	}
	return 0
}

func runWrite(args []string, stdout, stderr io.Writer) int {
	fs, key := newDadaFlags("write", stderr, "[-k key] [-r MiB/s | -R MB/s] [-t secs] [-b bytes] [-c char] [-z] [-recover] header_file")
	rate := fs.Float64("r", 64, "data rate in MiB/s (0: as fast as possible)")
	rateSI := fs.Float64("R", 0, "data rate in MB/s (10^6 bytes/s; overrides -r)")
	secs := fs.Uint("t", 10, "length of time to write, seconds (transfer size = rate × time)")
	total := fs.Int64("b", -1, "total number of bytes to write (overrides -t)")
	fill := fs.String("c", "", "fill the data with this character (default: a byte pattern)")
	zero := fs.Bool("z", false, "zero copy: fill the ring's blocks in place")
	recov := fs.Bool("recover", false, "take over a ring whose previous writer died mid-transfer, ending that transfer")
	verbose := fs.Bool("v", false, "verbose")
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	set := map[string]bool{}
	fs.Visit(func(f *cli.OptFlag) { set[f.Name] = true })
	if err := checkWriteFlags(*rate, *rateSI, *total, set["b"], *fill); err != nil {
		return cli.UsageErr(stderr, "softroce dada write", "%v", err)
	}
	if fs.NArg() != 1 {
		return cli.UsageErr(stderr, "softroce dada write", "a header file must be specified (ASCII 'KEY value' lines with HDR_SIZE)")
	}
	text, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "softroce dada write: %v\n", err)
		return 1
	}
	hdr := dada.ParseHeader(text)
	if _, err := hdr.Size(); err != nil {
		fmt.Fprintf(stderr, "softroce dada write: %s: %v\n", fs.Arg(0), err)
		return 1
	}
	bps := *rate * (1 << 20)
	if *rateSI > 0 {
		bps = *rateSI * 1e6
	}
	size := uint64(bps) * uint64(*secs)
	if *total >= 0 {
		size = uint64(*total)
	}
	if bps <= 0 && *total < 0 {
		return cli.UsageErr(stderr, "softroce dada write", "with -r 0 give the size with -b")
	}
	if _, ok := hdr.Get("UTC_START"); !ok {
		hdr.Set("UTC_START", time.Now().UTC().Format("2006-01-02-15:04:05"))
	}
	hdr.SetUint("FILE_SIZE", size)

	h, err := dada.Connect(key.k, dada.AttachOptions{})
	if err != nil {
		return failLine(stderr, "write", key.k, err)
	}
	defer h.Detach()
	ctx, stop := signalCtx()
	defer stop()
	w, err := h.OpenWriter(ctx, dada.WriterOptions{Recover: *recov})
	if err != nil {
		return failLine(stderr, "write", key.k, err)
	}
	if err := w.WriteHeader(hdr); err != nil {
		w.Close()
		fmt.Fprintf(stderr, "softroce dada write: %v\n", err)
		return 1
	}
	start := time.Now()
	var progress atomic.Uint64 // bytes written, for the watcher
	stopWatch := watchWriter(stderr, h, key.k, &progress)
	pw := pacedWrite{w: w, bufsz: uint64(h.Data.BufSize()), src: writeSource(size, *fill), bps: bps, zero: *zero}
	done, werr := pw.run(ctx, start, size, &progress)
	stopWatch()
	if werr != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "softroce dada write: %v\n", werr)
	}
	cerr := w.Close()
	el := time.Since(start).Seconds()
	fmt.Fprintf(stdout, "%d bytes transferred in %.3fs (%.1f MB/s)\n", done, el, float64(done)/(1<<20)/max(el, 1e-9))
	if *verbose && !errors.Is(werr, dada.ErrDestroyed) {
		st := h.Data.Stats()
		fmt.Fprintf(stdout, "data block: w_buf_curr=%d w_xfer=%d\n", st.WBufCurr, st.WXfer)
	}
	if cerr != nil && werr == nil {
		fmt.Fprintf(stderr, "softroce dada write: closing the transfer: %v\n", cerr)
		return 1
	}
	if done < size {
		return 1
	}
	return 0
}

// writeSource is the data dada write sends, repeated: the -c character,
// else a byte pattern.
func writeSource(size uint64, fill string) []byte {
	src := make([]byte, min(uint64(4<<20), max(size, 1)))
	for i := range src {
		src[i] = byte(i)
		if fill != "" {
			src[i] = fill[0]
		}
	}
	return src
}

// pacedWrite is dada write's transfer: src repeated into the ring at bps
// bytes a second (0: as fast as it goes), through Write or, zero copy,
// into the ring's blocks in place.
type pacedWrite struct {
	w     *dada.Writer
	bufsz uint64 // the ring's block size
	src   []byte
	bps   float64
	zero  bool
}

// run writes size bytes from start on, storing the count in progress; it
// stops early when ctx ends or writing fails, and returns what it wrote.
func (p *pacedWrite) run(ctx context.Context, start time.Time, size uint64, progress *atomic.Uint64) (done uint64, err error) {
	for done < size && err == nil {
		if p.bps > 0 {
			// pace: never more than rate × elapsed bytes
			if ahead := float64(done) - p.bps*time.Since(start).Seconds(); ahead > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(ahead / p.bps * float64(time.Second))):
				}
			}
		}
		if ctx.Err() != nil {
			break
		}
		var n uint64
		if n, err = p.writeOne(size - done); err == nil {
			done += n
		}
		progress.Store(done)
	}
	return done, err
}

// writeOne writes the next piece of at most left bytes: a block (zero
// copy), else up to len(src).
func (p *pacedWrite) writeOne(left uint64) (uint64, error) {
	if !p.zero {
		n := min(uint64(len(p.src)), left, max(p.bufsz, 1<<16))
		_, err := p.w.Write(p.src[:n])
		return n, err
	}
	b, err := p.w.OpenBlock()
	if err != nil {
		return 0, err
	}
	n := min(p.bufsz, left)
	for off := uint64(0); off < n; off += uint64(len(p.src)) {
		copy(b.Data[off:n], p.src)
	}
	return n, p.w.MarkFilled(int(n))
}

// watchWriter reports, once per episode, that the writer is waiting for a
// reader: psrdada's writer blocks silently when the ring is full and no
// reader is attached (none started, or the reader died). It returns a func
// that stops the watcher.
func watchWriter(stderr io.Writer, h *dada.HDU, k dada.Key, progress *atomic.Uint64) func() {
	return watch(func(last *uint64, waiting *bool) {
		st := h.Data.Stats()
		p := progress.Load()
		moved := p != *last
		*last = p
		switch {
		case moved || st.Read < st.NReaders:
			if *waiting && st.Read < st.NReaders {
				fmt.Fprintf(stderr, "softroce dada write: a reader attached to ring %s; continuing\n", k.Short())
			}
			*waiting = false
		case !*waiting && ringFull(st):
			*waiting = true
			fmt.Fprintf(stderr, "softroce dada write: waiting for a reader: ring %s is full and no reader is attached "+
				"(start one, e.g. 'softroce dada read -k %s' or psrdada's dada_dbdisk)\n", k.Short(), k.Short())
		}
	})
}

// ringFull reports whether the writer's next buffer is still held by a
// reader slot: the writer waits there.
func ringFull(st dada.Stats) bool {
	for _, r := range st.Readers {
		if r.RBuf <= st.WBufNext && st.WBufNext-r.RBuf >= st.NBufs {
			return true
		}
	}
	return false
}

// watchReader reports, once per episode, that the reader waits for data
// from a writer that died in the middle of a transfer (psrdada's reader
// waits silently until a new writer ends it).
func watchReader(stderr io.Writer, h *dada.HDU, k dada.Key, slot int) func() {
	return watch(func(last *uint64, waiting *bool) {
		st := h.Data.Stats()
		if slot >= len(st.Readers) {
			return
		}
		p := st.Readers[slot].RBuf + st.WBufCurr<<32
		moved := p != *last
		*last = p
		dead := st.Write == 1 && (st.WState == dada.StateWriting || st.WState == dada.StateWChange && st.WBufNext > st.WBufCurr)
		switch {
		case moved || !dead:
			*waiting = false
		case !*waiting:
			*waiting = true
			fmt.Fprintf(stderr, "softroce dada read: the writer of ring %s exited in the middle of transfer %d; waiting for a new writer to end it "+
				"('softroce dada write -recover -k %s')\n", k.Short(), st.WXfer, k.Short())
		}
	})
}

// watch calls check every watchInterval until the returned func is
// called (which waits for the watcher to stop).
func watch(check func(last *uint64, waiting *bool)) func() {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		var last uint64
		var waiting bool
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				check(&last, &waiting)
			}
		}
	}()
	return func() { close(stop); <-done }
}

// watchInterval is how long a dada command must be stuck before it says
// what it waits for.
var watchInterval = time.Second

// failLine prints err for "softroce dada cmd", adding in parentheses the
// command that does what the library's message asks, and returns exit
// status 1.
func failLine(stderr io.Writer, cmd string, k dada.Key, err error) int {
	ks := k.Short()
	hint := ""
	switch {
	case errors.Is(err, dada.ErrNotFound) && cmd != "db":
		hint = fmt.Sprintf("'softroce dada db -k %s' or psrdada's dada_db", ks)
	case errors.Is(err, dada.ErrExists):
		hint = fmt.Sprintf("'softroce dada db -d -k %s'", ks)
	case errors.Is(err, dada.ErrBadLayout):
		hint = fmt.Sprintf("'softroce dada db -d -k %s'", ks)
	case errors.Is(err, dada.ErrWriterDied):
		hint = fmt.Sprintf("'softroce dada write -recover -k %s' takes over; 'softroce dada db -d -k %s' destroys the ring", ks, ks)
	case errors.Is(err, dada.ErrNoMemory):
		hint = "-n, -b"
	}
	if hint != "" {
		fmt.Fprintf(stderr, "softroce dada %s: %v (%s)\n", cmd, err, hint)
	} else {
		fmt.Fprintf(stderr, "softroce dada %s: %v\n", cmd, err)
	}
	return 1
}

// checkMonitorFlags validates dada monitor's values after parsing.
func checkMonitorFlags(interval time.Duration, count int) error {
	if interval <= 0 {
		return fmt.Errorf("-i %v: the interval between lines must be positive (for example 1s or 100ms)", interval)
	}
	if count < 0 {
		return fmt.Errorf("-n %d: the number of lines must be 0 (until interrupted) or more", count)
	}
	return nil
}

// checkWriteFlags validates dada write's values after parsing; bSet tells
// whether -b was given.
func checkWriteFlags(rate, rateSI float64, total int64, bSet bool, fill string) error {
	switch {
	case rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0):
		return fmt.Errorf("-r %v: the data rate must be a positive number of MiB/s, or 0 for as fast as possible", rate)
	case rateSI < 0 || math.IsNaN(rateSI) || math.IsInf(rateSI, 0):
		return fmt.Errorf("-R %v: the data rate must be a positive number of MB/s", rateSI)
	case bSet && total < 0:
		return fmt.Errorf("-b %d: the number of bytes to write must be 0 or more", total)
	case len(fill) > 1:
		return fmt.Errorf("-c %q: give one fill character", fill)
	}
	return nil
}

func runRead(args []string, stdout, stderr io.Writer) int {
	fs, key := newDadaFlags("read", stderr, "[-k key] [-s | -S] [-o dir] [-z] [-c attempts] [-v]")
	single := fs.Bool("s", false, "read one transfer, then exit")
	multi := fs.Bool("S", false, "read transfers until one has OBS_XFER -1, then exit")
	outDir := fs.String("o", "", "write each transfer to a .dada file in this directory, like dada_dbdisk")
	fs.Bool("z", false, "zero copy (always on: blocks are consumed in place)")
	attempts := fs.Int("c", 0, "retry connecting this many times, 1 s apart")
	verbose := fs.Bool("v", false, "print each header")
	quiet := fs.Bool("q", false, "quiet")
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	ctx, stop := signalCtx()
	defer stop()
	var h *dada.HDU
	var err error
	for i := 0; ; i++ {
		h, err = dada.Connect(key.k, dada.AttachOptions{})
		if err == nil || i >= *attempts || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return failLine(stderr, "read", key.k, err)
	}
	defer h.Detach()
	r, err := h.OpenReader(ctx)
	if err != nil {
		return failLine(stderr, "read", key.k, err)
	}
	defer r.Close()
	if rj := r.Rejoin(); rj.Skip {
		fmt.Fprintf(stderr, "softroce dada read: took over reader slot %d of ring %s from a reader that exited during transfer %d; "+
			"skipping the rest of that transfer (its header is gone), then waiting for the next one\n", r.Slot(), key.k.Short(), rj.Xfer)
	} else if rj.Rejoined && *verbose {
		fmt.Fprintf(stderr, "softroce dada read: took over reader slot %d of ring %s from a reader that exited between transfers\n", r.Slot(), key.k.Short())
	}
	defer watchReader(stderr, h, key.k, r.Slot())()
	for n := 0; ; n++ {
		hdr, err := r.ReadHeader()
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			fmt.Fprintf(stderr, "softroce dada read: %v\n", err)
			return 1
		}
		if *verbose {
			fmt.Fprintf(stdout, "header of transfer %d:\n%s\n", n, hdr)
		}
		var sink io.Writer = io.Discard
		var f *os.File
		if *outDir != "" {
			f, err = createDadaFile(*outDir, hdr)
			if err != nil {
				fmt.Fprintf(stderr, "softroce dada read: %v\n", err)
				return 1
			}
			sink = f
		}
		start := time.Now()
		nb, err := r.WriteTo(sink)
		el := time.Since(start).Seconds()
		if f != nil {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			fmt.Fprintf(stderr, "softroce dada read: %v\n", err)
			return 1
		}
		if !*quiet {
			src, _ := hdr.Get("SOURCE")
			name := ""
			if f != nil {
				name = " to " + f.Name()
			}
			fmt.Fprintf(stdout, "transfer %d (SOURCE %s): %d bytes%s in %.3fs (%.1f MB/s)\n", n, src, nb, name, el, float64(nb)/(1<<20)/max(el, 1e-9))
		}
		if *single {
			return 0
		}
		if *multi {
			if x, err := hdr.GetInt("OBS_XFER"); err != nil || x == -1 {
				return 0
			}
		}
	}
}

// createDadaFile creates dir/UTC_START_OBSOFFSET.FILENUMBER.dada as
// dada_dbdisk names its files and writes HDR_SIZE bytes of header.
func createDadaFile(dir string, hdr *dada.Header) (*os.File, error) {
	utc, ok := hdr.Get("UTC_START")
	if !ok {
		utc = time.Now().UTC().Format("2006-01-02-15:04:05")
	}
	off, _ := hdr.GetUint("OBS_OFFSET")
	hdr.SetUint("OBS_OFFSET", off)
	hdr.SetInt("FILE_NUMBER", 0)
	name := filepath.Join(dir, fmt.Sprintf("%s_%016d.%06d.dada", strings.ReplaceAll(utc, "/", "_"), off, 0))
	size, err := hdr.Size()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	if err := hdr.Encode(buf); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(buf); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
