package dada

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests in this file run psrdada's own programs (dada_db, dada_diskdb,
// dada_dbdisk, dada_junkdb, dada_dbmonitor) against this package. psrdada is
// never vendored or built here: point PSRDADA_PREFIX at a psrdada 1.1
// install (its bin/ and lib/), or put the tools on PATH and libpsrdada on
// LD_LIBRARY_PATH. Without either they skip.

// ctools runs the psrdada programs.
type ctools struct {
	bin string   // directory of the programs ("" = PATH)
	env []string // environment for them
}

var ctoolNames = []string{"dada_db", "dada_diskdb", "dada_dbdisk", "dada_junkdb", "dada_dbmonitor", "dada_header"}

const ctoolsSkip = "psrdada's tools are not available: set PSRDADA_PREFIX to a psrdada 1.1 install prefix (bin/ and lib/), " +
	"or put dada_db, dada_diskdb, dada_dbdisk, dada_junkdb, dada_dbmonitor and dada_header on PATH and libpsrdada on LD_LIBRARY_PATH"

func findCTools(t *testing.T) *ctools {
	t.Helper()
	needIPC(t)
	c := &ctools{env: os.Environ()}
	// Asked for (PSRDADA_PREFIX set) or found on PATH, broken tools fail
	// the test; only tools that are nowhere skip it.
	prefix := os.Getenv("PSRDADA_PREFIX")
	if p := prefix; p != "" {
		c.bin = filepath.Join(p, "bin")
		ld := filepath.Join(p, "lib")
		if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
			ld += ":" + old
		}
		c.env = append(c.env, "LD_LIBRARY_PATH="+ld)
	}
	for _, n := range ctoolNames {
		if _, err := exec.LookPath(c.path(n)); err != nil {
			if prefix != "" {
				t.Fatalf("PSRDADA_PREFIX=%s: %s: %v", prefix, n, err)
			}
			t.Skipf("%s (%s: %v)", ctoolsSkip, n, err)
		}
	}
	// the library must load: dada_db -h prints its usage and exits 0
	if out, err := c.cmd(context.Background(), "dada_db", "-h").CombinedOutput(); err != nil {
		t.Fatalf("psrdada's tools do not run (PSRDADA_PREFIX=%q): dada_db -h: %v: %s", prefix, err, bytes.TrimSpace(out))
	}
	return c
}

func (c *ctools) path(name string) string {
	if c.bin == "" {
		return name
	}
	return filepath.Join(c.bin, name)
}

func (c *ctools) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.path(name), args...)
	cmd.Env = c.env
	cmd.WaitDelay = time.Second
	return cmd
}

// run runs a program to its end and fails the test if it fails.
func (c *ctools) run(t *testing.T, ctx context.Context, name string, args ...string) {
	t.Helper()
	out, err := c.cmd(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// counters are the monitor's W and R columns: the header block's (reader 0)
// and the data block's of every reader.
type counters struct {
	HdrW, HdrR uint64
	DataW      uint64
	DataR      []uint64
}

func (c counters) String() string {
	return fmt.Sprintf("header W %d R %d, data W %d R %v", c.HdrW, c.HdrR, c.DataW, c.DataR)
}

// monitor takes the first line of dada_dbmonitor's table.
func (c *ctools) monitor(t *testing.T, ctx context.Context, k Key) counters {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := c.cmd(ctx, "dada_dbmonitor", "-k", k.Short())
	errp, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(errp)
	table := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "FRE FUL CLR") {
			table = true
			continue
		}
		if !table {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 10 || len(f)%5 != 0 {
			t.Fatalf("dada_dbmonitor line %q", line)
		}
		n := make([]uint64, len(f))
		for i, s := range f {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("dada_dbmonitor line %q: %v", line, err)
			}
			n[i] = uint64(v)
		}
		cs := counters{HdrW: n[3], HdrR: n[4], DataW: n[8]}
		for i := 5; i < len(n); i += 5 {
			cs.DataR = append(cs.DataR, n[i+4])
		}
		return cs
	}
	t.Fatalf("no table from dada_dbmonitor (%v)", sc.Err())
	return counters{}
}

// goCounters reads the same columns with this package (softroce dada
// monitor prints them).
func goCounters(h *HDU) counters {
	hs, ds := h.Header.Stats(), h.Data.Stats()
	cs := counters{HdrW: hs.WBufCurr, HdrR: hs.Readers[0].RBuf, DataW: ds.WBufCurr}
	for _, r := range ds.Readers {
		cs.DataR = append(cs.DataR, r.RBuf)
	}
	return cs
}

// checkCounters compares both monitors and, after every transfer was read by
// every reader, R with W.
func (c *ctools) checkCounters(t *testing.T, ctx context.Context, h *HDU, when string) {
	t.Helper()
	cm, gm := c.monitor(t, ctx, h.Key()), goCounters(h)
	if cm.String() != gm.String() {
		t.Errorf("%s: dada_dbmonitor says %v, softroce says %v", when, cm, gm)
	}
	bad := cm.HdrR != cm.HdrW
	for _, r := range cm.DataR {
		bad = bad || r != cm.DataW
	}
	if bad {
		t.Errorf("%s: %v: a reader that read every transfer must have R = W (psrdada 1.1.0)", when, cm)
	}
}

// checkHeaderWaits runs psrdada's dada_header (a viewer of the header
// block) after every header was read: it must wait for the next header, not
// print the one already read.
func (c *ctools) checkHeaderWaits(t *testing.T, ctx context.Context, k Key) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	out, _ := c.cmd(ctx, "dada_header", "-k", k.Short()).Output()
	if len(out) > 0 {
		t.Errorf("dada_header printed a header that was already read instead of waiting for the next one:\n%s", out)
	}
}

// xfer is one transfer of a test: its header and data.
type xfer struct {
	src  string
	data []byte
}

func (x xfer) header(i int) *Header {
	h := NewHeader(4096)
	h.Set("SOURCE", x.src)
	h.Set("NBIT", "8")
	h.Set("UTC_START", fmt.Sprintf("2026-01-01-00:00:%02d", i%60))
	h.SetInt("FILE_SIZE", int64(len(x.data)))
	h.SetInt("OBS_XFER", int64(i))
	h.SetInt("OBS_OFFSET", 0)
	return h
}

// writeC writes one transfer with dada_diskdb from a .dada file.
func (c *ctools) writeC(t *testing.T, ctx context.Context, k Key, hdr *Header, data []byte) <-chan error {
	t.Helper()
	buf := make([]byte, 4096)
	if err := hdr.Encode(buf); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "in.dada")
	if err := os.WriteFile(f, append(buf, data...), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		out, err := c.cmd(ctx, "dada_diskdb", "-k", k.Short(), "-f", f, "-s").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("dada_diskdb: %w\n%s", err, out)
		}
		done <- err
	}()
	return done
}

// startReaderC starts dada_dbdisk writing into a new directory; single
// makes it exit after one transfer.
func (c *ctools) startReaderC(t *testing.T, ctx context.Context, k Key, single bool) (dir string, cmd *exec.Cmd, done <-chan error) {
	t.Helper()
	dir = t.TempDir()
	args := []string{"-k", k.Short(), "-D", dir, "-W"}
	if single {
		args = append(args, "-s")
	}
	cmd = c.cmd(ctx, "dada_dbdisk", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("dada_dbdisk: %w\n%s", err, out.String())
		}
		ch <- err
		close(exited)
	}()
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGKILL); <-exited })
	return dir, cmd, ch
}

// readDadaFiles returns the header and data of every .dada file dada_dbdisk
// wrote into dir, in name order (one per transfer with FILE_SIZE as set by
// xfer.header).
func readDadaFiles(t *testing.T, dir string) (hdrs []*Header, datas [][]byte) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.dada"))
	sort.Strings(names)
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		h := ParseHeader(b[:min(len(b), 4096)])
		size, err := h.Size()
		if err != nil || size > len(b) {
			t.Fatalf("%s: bad header (HDR_SIZE %d, %v)", n, size, err)
		}
		hdrs = append(hdrs, h)
		datas = append(datas, b[size:])
	}
	return hdrs, datas
}

func checkXfer(t *testing.T, who string, hdr *Header, data []byte, want xfer) {
	t.Helper()
	if s, _ := hdr.Get("SOURCE"); s != want.src || !bytes.Equal(data, want.data) {
		i := 0
		for i < min(len(data), len(want.data)) && data[i] == want.data[i] {
			i++
		}
		t.Fatalf("%s: got SOURCE %q and %d bytes (first difference at byte %d), want SOURCE %q and %d bytes",
			who, s, len(data), i, want.src, len(want.data))
	}
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func waitErr(t *testing.T, ctx context.Context, what string, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-ctx.Done():
		t.Fatalf("%s: timed out", what)
	}
}

const ctBufsz = 64 * 1024

// ctXfers are the transfers of the matrix: a partial last block, an exact
// multiple of the block size (its end of data is an extra empty block) and
// one larger than the ring.
func ctXfers(tag string) []xfer {
	return []xfer{
		{tag + "-a", pattern(3*ctBufsz+1000, 1)},
		{tag + "-b", pattern(2*ctBufsz, 2)},
		{tag + "-c", pattern(9*ctBufsz+17, 3)},
	}
}

// newCRing creates a ring with dada_db (cRing) or Create, returning this
// process's attachment; the other implementation destroys it at the end.
func (c *ctools) newRing(t *testing.T, ctx context.Context, cRing bool, nread int) *HDU {
	t.Helper()
	k := randomKey(t)
	noStrays(t, k)
	if cRing {
		c.run(t, ctx, "dada_db", "-k", k.Short(), "-n", "4", "-b", strconv.Itoa(ctBufsz), "-r", strconv.Itoa(nread))
	} else {
		h, err := Create(Config{Key: k, NBufs: 4, BufSize: ctBufsz, NReaders: nread})
		if err != nil {
			t.Fatal(err)
		}
		h.Detach()
	}
	h, err := Connect(k, AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Detach()
		if cRing {
			if err := Destroy(k); err != nil {
				t.Errorf("destroying dada_db's ring: %v", err)
			}
		} else {
			out, err := c.cmd(context.Background(), "dada_db", "-d", "-k", k.Short()).CombinedOutput()
			if err != nil {
				t.Errorf("dada_db -d on our ring: %v\n%s", err, out)
			}
		}
	})
	return h
}

func implName(c bool) string {
	if c {
		return "C"
	}
	return "Go"
}

// TestCToolsMatrix moves transfers between every pair of writer and reader
// (psrdada's dada_diskdb / dada_dbdisk, this package's Writer / Reader),
// and with two readers of both kinds on one ring. It compares every byte and,
// after each transfer, both monitors' W and R columns.
func TestCToolsMatrix(t *testing.T) {
	c := findCTools(t)
	type pair struct{ cw, cr bool }
	for _, p := range []pair{{true, true}, {true, false}, {false, true}, {false, false}} {
		t.Run(implName(p.cw)+"writer-"+implName(p.cr)+"reader", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			h := c.newRing(t, ctx, p.cw, 1)
			var r *Reader
			if !p.cr {
				var err error
				if r, err = h.OpenReader(ctx); err != nil {
					t.Fatal(err)
				}
				defer r.Close()
			}
			for i, x := range ctXfers(implName(p.cw)) {
				var dir string
				var rdone <-chan error
				if p.cr {
					dir, _, rdone = c.startReaderC(t, ctx, h.Key(), true)
				}
				var wdone <-chan error
				if p.cw {
					wdone = c.writeC(t, ctx, h.Key(), x.header(i), x.data)
				} else {
					wdone = writeAsync(ctx, h.Key(), x.header(i), x.data)
				}
				if p.cr {
					waitErr(t, ctx, "dada_dbdisk", rdone)
					hs, ds := readDadaFiles(t, dir)
					if len(hs) != 1 {
						t.Fatalf("transfer %d: dada_dbdisk wrote %d files", i, len(hs))
					}
					checkXfer(t, fmt.Sprintf("transfer %d by dada_dbdisk", i), hs[0], ds[0], x)
				} else {
					hdr, err := r.ReadHeader()
					if err != nil {
						t.Fatal(err)
					}
					data, err := io.ReadAll(r)
					if err != nil {
						t.Fatal(err)
					}
					checkXfer(t, fmt.Sprintf("transfer %d by Reader", i), hdr, data, x)
				}
				waitErr(t, ctx, "writer", wdone)
				c.checkCounters(t, ctx, h, fmt.Sprintf("after transfer %d", i))
			}
			c.checkHeaderWaits(t, ctx, h.Key())
		})
	}
	t.Run("two-mixed-readers", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		h := c.newRing(t, ctx, true, 2)
		r, err := h.OpenReader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for i, x := range ctXfers("mixed") {
			dir, _, rdone := c.startReaderC(t, ctx, h.Key(), true)
			var wdone <-chan error
			if i%2 == 0 {
				wdone = c.writeC(t, ctx, h.Key(), x.header(i), x.data)
			} else {
				wdone = writeAsync(ctx, h.Key(), x.header(i), x.data)
			}
			hdr, err := r.ReadHeader()
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			checkXfer(t, fmt.Sprintf("transfer %d by Reader", i), hdr, data, x)
			waitErr(t, ctx, "dada_dbdisk", rdone)
			hs, ds := readDadaFiles(t, dir)
			if len(hs) != 1 {
				t.Fatalf("transfer %d: dada_dbdisk wrote %d files", i, len(hs))
			}
			checkXfer(t, fmt.Sprintf("transfer %d by dada_dbdisk", i), hs[0], ds[0], x)
			waitErr(t, ctx, "writer", wdone)
			c.checkCounters(t, ctx, h, fmt.Sprintf("after transfer %d", i))
		}
	})
}

// TestCToolsKilledReaderRejoin kills a reader (SIGKILL) between transfers
// and lets a new reader take its slot, for every pair of killed and joining
// implementation: the new reader must get exactly the next transfer.
func TestCToolsKilledReaderRejoin(t *testing.T) {
	c := findCTools(t)
	for _, p := range []struct{ killedC, joinC bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
		t.Run(implName(p.killedC)+"killed-"+implName(p.joinC)+"joins", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			h := c.newRing(t, ctx, true, 1)
			x1 := xfer{"before-kill", pattern(3*ctBufsz+1000, 5)}
			x2 := xfer{"after-kill", pattern(5*ctBufsz+3, 6)}
			var kill func()
			if p.killedC {
				// Stock 1.1.0 C readers cannot stay attached after a
				// transfer: the header block's end of data stops
				// dada_client_read ("Could not get next header") and
				// they unlock and exit. So dada_dbdisk -s reads transfer
				// 0 and exits, and a second dada_dbdisk takes the slot,
				// waits for the next header and is killed there.
				dir, _, rdone := c.startReaderC(t, ctx, h.Key(), true)
				waitErr(t, ctx, "dada_diskdb", c.writeC(t, ctx, h.Key(), x1.header(0), x1.data))
				waitErr(t, ctx, "dada_dbdisk", rdone)
				hs, ds := readDadaFiles(t, dir)
				if len(hs) != 1 {
					t.Fatalf("dada_dbdisk wrote %d files", len(hs))
				}
				checkXfer(t, "transfer 0 by dada_dbdisk", hs[0], ds[0], x1)
				_, cmd, _ := c.startReaderC(t, ctx, h.Key(), false)
				waitFor(t, ctx, "the second dada_dbdisk to lock the ring", func() bool {
					return h.Data.Stats().Read == 0 && h.Header.Stats().Readers[0].State == StateReader
				})
				kill = func() { cmd.Process.Signal(syscall.SIGKILL) }
			} else {
				var out *bufio.Reader
				out, kill = startHelper(t, ctx, "DADA_TEST_HELPER=killreader", "DADA_TEST_MODE=between",
					"DADA_TEST_KEY="+strconv.Itoa(int(h.Key())))
				waitErr(t, ctx, "dada_diskdb", c.writeC(t, ctx, h.Key(), x1.header(0), x1.data))
				if line, _ := out.ReadString('\n'); line != fmt.Sprintf("read %d\n", len(x1.data)) {
					t.Fatalf("killed reader said %q", line)
				}
			}
			// the first reader has read the whole transfer
			waitFor(t, ctx, "the first reader to finish the transfer", func() bool {
				g := goCounters(h)
				return g.HdrR == g.HdrW && g.DataR[0] == g.DataW
			})
			c.checkCounters(t, ctx, h, "after the first transfer")
			kill()
			waitFor(t, ctx, "the killed reader's slot to be free", func() bool { return h.Data.Stats().Read == 1 })
			if st := h.Data.Stats().Readers[0].State; st == StateDiscon {
				t.Fatalf("the killed reader left its slot %v; it was not killed while locked", st)
			}
			var r *Reader
			var dir string
			var rdone <-chan error
			if p.joinC {
				dir, _, rdone = c.startReaderC(t, ctx, h.Key(), true)
			} else {
				var err error
				if r, err = h.OpenReader(ctx); err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if rj := r.Rejoin(); !rj.Rejoined || rj.Skip {
					t.Fatalf("Rejoin() = %+v, want a rejoin between transfers", rj)
				}
			}
			wdone := writeAsync(ctx, h.Key(), x2.header(1), x2.data)
			if p.joinC {
				waitErr(t, ctx, "the joining dada_dbdisk", rdone)
				hs, ds := readDadaFiles(t, dir)
				if len(hs) != 1 {
					t.Fatalf("joining dada_dbdisk wrote %d files", len(hs))
				}
				checkXfer(t, "transfer 1 by the joining dada_dbdisk", hs[0], ds[0], x2)
			} else {
				hdr, err := r.ReadHeader()
				if err != nil {
					t.Fatal(err)
				}
				data, err := io.ReadAll(r)
				if err != nil {
					t.Fatal(err)
				}
				checkXfer(t, "transfer 1 by the joining Reader", hdr, data, x2)
			}
			waitErr(t, ctx, "writer", wdone)
			c.checkCounters(t, ctx, h, "after the joining reader's transfer")
		})
	}
}

// TestCToolsKilledReaderMidTransfer kills dada_dbdisk in the middle of a
// transfer; a Reader taking its slot says it skips the rest of that
// transfer (its header is gone) and gets the next one exactly.
func TestCToolsKilledReaderMidTransfer(t *testing.T) {
	c := findCTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := c.newRing(t, ctx, true, 1)
	x1 := xfer{"interrupted", pattern(7*ctBufsz+5, 9)}
	x2 := xfer{"next", pattern(3*ctBufsz+1, 10)}
	_, cmd, _ := c.startReaderC(t, ctx, h.Key(), false)
	waitFor(t, ctx, "dada_dbdisk to lock the ring", func() bool { return h.Data.Stats().Read == 0 })
	wh, err := Connect(h.Key(), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Detach()
	w, err := wh.OpenWriter(ctx, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.WriteHeader(x1.header(0))
	// two blocks marked filled (the third is open), read by dada_dbdisk
	if _, err := w.Write(x1.data[:2*ctBufsz+1]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "dada_dbdisk to read two blocks", func() bool { return h.Data.Stats().Readers[0].RBuf == 2 })
	cmd.Process.Signal(syscall.SIGKILL)
	waitFor(t, ctx, "the killed reader's slot to be free", func() bool { return h.Data.Stats().Read == 1 })
	r, err := h.OpenReader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if rj := r.Rejoin(); !rj.Rejoined || !rj.Skip || rj.Xfer != 0 {
		t.Fatalf("Rejoin() = %+v, want a rejoin in transfer 0 that skips its rest", rj)
	}
	wdone := make(chan error, 1)
	go func() {
		_, err := w.Write(x1.data[2*ctBufsz+1:])
		err = errors.Join(err, w.Close())
		if err == nil {
			err = <-writeAsync(ctx, h.Key(), x2.header(1), x2.data)
		}
		wdone <- err
	}()
	hdr, err := r.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	checkXfer(t, "the transfer after the interrupted one", hdr, data, x2)
	waitErr(t, ctx, "writer", wdone)
	c.checkCounters(t, ctx, h, "after the next transfer")
}

// TestCToolsKilledWriter kills a writer (SIGKILL) mid-transfer, psrdada's
// dada_junkdb and this package's, with a reader of the other kind attached;
// a writer with Recover ends the dead transfer after its last filled block
// and writes the next, and the surviving reader gets both.
func TestCToolsKilledWriter(t *testing.T) {
	c := findCTools(t)
	t.Run("Ckilled-Goreader", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		h := c.newRing(t, ctx, true, 1)
		r, err := h.OpenReader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		hf := filepath.Join(t.TempDir(), "junk.hdr")
		if err := os.WriteFile(hf, []byte(xfer{src: "junk"}.header(0).String()), 0o644); err != nil {
			t.Fatal(err)
		}
		// 64 MiB/s for 10 s: far more than the ring holds; it blocks when full
		cmd := c.cmd(ctx, "dada_junkdb", "-k", h.Key().Short(), "-c", "J", "-r", "64", "-t", "10", hf)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		hdr, err := r.ReadHeader()
		if err != nil {
			cmd.Process.Kill()
			t.Fatal(err)
		}
		var got []byte
		for len(got) < 2*ctBufsz {
			b, err := r.NextBlock()
			if err != nil {
				cmd.Process.Kill()
				t.Fatal(err)
			}
			got = append(got, b.Data...)
			r.MarkCleared()
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if s, _ := hdr.Get("SOURCE"); s != "junk" {
			t.Fatalf("header SOURCE %q", s)
		}
		// the reader now waits for data that will not come, as in psrdada;
		// a recovering writer ends the transfer after its last filled block
		filled := h.Data.Stats().WBufCurr
		x := xfer{"after-junk", pattern(2*ctBufsz+9, 7)}
		wh, err := Connect(h.Key(), AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer wh.Detach()
		if _, err := wh.OpenWriter(ctx, WriterOptions{}); !errors.Is(err, ErrWriterDied) {
			t.Fatalf("OpenWriter without Recover after dada_junkdb was killed: %v", err)
		}
		// the recovery needs a free buffer for the end of data: recover
		// and write the next transfer while the reader reads
		wdone := make(chan error, 1)
		go func() {
			w, err := wh.OpenWriter(ctx, WriterOptions{Recover: true})
			if err != nil {
				wdone <- err
				return
			}
			w.WriteHeader(x.header(1))
			_, err = w.Write(x.data)
			wdone <- errors.Join(err, w.Close())
		}()
		rest, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rest...)
		if uint64(len(got)) != filled*ctBufsz || !bytes.Equal(got, bytes.Repeat([]byte("J"), len(got))) {
			t.Fatalf("dead transfer: %d bytes, want the %d filled blocks of 'J'", len(got), filled)
		}
		hdr, err = r.ReadHeader()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(r)
		checkXfer(t, "transfer after the recovery", hdr, data, x)
		waitErr(t, ctx, "recovering writer", wdone)
		c.checkCounters(t, ctx, h, "after the recovery")
	})
	t.Run("Gokilled-Creader", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		h := c.newRing(t, ctx, false, 1)
		dir, _, rdone := c.startReaderC(t, ctx, h.Key(), true)
		out, kill := startHelper(t, ctx, "DADA_TEST_HELPER=killwriter", "DADA_TEST_KEY="+strconv.Itoa(int(h.Key())))
		if line, _ := out.ReadString('\n'); line != "ready\n" {
			t.Fatalf("killed writer said %q", line)
		}
		kill()
		wh, err := Connect(h.Key(), AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer wh.Detach()
		w, err := wh.OpenWriter(ctx, WriterOptions{Recover: true})
		if err != nil {
			t.Fatal(err)
		}
		// dada_dbdisk gets the dead transfer: its one filled block
		waitErr(t, ctx, "dada_dbdisk", rdone)
		hs, ds := readDadaFiles(t, dir)
		if len(hs) != 1 {
			t.Fatalf("dada_dbdisk wrote %d files", len(hs))
		}
		checkXfer(t, "the dead transfer by dada_dbdisk", hs[0], ds[0], xfer{"dead", pattern(ctBufsz+ctBufsz/2, 1)[:ctBufsz]})
		// and the next one
		dir, _, rdone = c.startReaderC(t, ctx, h.Key(), true)
		x := xfer{"after-dead", pattern(3*ctBufsz+11, 8)}
		w.WriteHeader(x.header(1))
		w.Write(x.data)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		waitErr(t, ctx, "dada_dbdisk", rdone)
		hs, ds = readDadaFiles(t, dir)
		if len(hs) != 1 {
			t.Fatalf("dada_dbdisk wrote %d files", len(hs))
		}
		checkXfer(t, "transfer after the recovery by dada_dbdisk", hs[0], ds[0], x)
		c.checkCounters(t, ctx, h, "after the recovery")
	})
}
