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
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The killed-writer helper runs in a child process (the test binary
// re-executed): it takes the writer lock, writes the header and half a
// block, reports "ready" and waits to be killed.
func TestMain(m *testing.M) {
	switch os.Getenv("DADA_TEST_HELPER") {
	case "killwriter":
		os.Exit(killWriterHelper())
	case "killreader":
		os.Exit(killReaderHelper(os.Getenv("DADA_TEST_MODE")))
	}
	os.Exit(m.Run())
}

func killWriterHelper() int {
	k, err := strconv.ParseInt(os.Getenv("DADA_TEST_KEY"), 10, 64)
	if err != nil {
		return 2
	}
	h, err := Connect(Key(k), AttachOptions{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	w, err := h.OpenWriter(context.Background(), WriterOptions{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	hdr := NewHeader(4096)
	hdr.Set("SOURCE", "dead")
	hdr.Set("UTC_START", "2026-01-01-00:00:00")
	if err := w.WriteHeader(hdr); err != nil {
		fmt.Println("error", err)
		return 1
	}
	// one full block (marked filled when the next is opened) and half a block
	bs := h.Data.BufSize()
	if _, err := w.Write(pattern(bs+bs/2, 1)); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready")
	time.Sleep(time.Minute)
	return 0
}

func TestKilledWriter(t *testing.T) {
	const bufsz = 8192
	h := newHDU(t, Config{NBufs: 4, BufSize: bufsz})
	ctx := testCtx(t)
	// a reader attached before the writer dies
	rh, _ := Connect(h.Key(), AttachOptions{})
	defer rh.Detach()
	r, err := rh.OpenReader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "DADA_TEST_HELPER=killwriter", "DADA_TEST_KEY="+strconv.Itoa(int(h.Key())))
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q", line)
	}
	st := h.Data.Stats()
	if st.Write != 0 || st.WState != StateWriting {
		t.Fatalf("while the helper writes: %+v", st)
	}
	pid := cmd.Process.Pid
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	// SEM_UNDO gave the lock back, the shared state still says WRITING
	st = h.Data.Stats()
	if st.Write != 1 || st.WState != StateWriting || st.WBufCurr != 1 || st.WBufNext != 2 {
		t.Fatalf("after the kill: %+v", st)
	}
	// the next writer gets a clear error and leaves the ring as it was
	wh, _ := Connect(h.Key(), AttachOptions{})
	defer wh.Detach()
	_, err = wh.OpenWriter(ctx, WriterOptions{})
	var wd *WriterDiedError
	if !errors.As(err, &wd) || !errors.Is(err, ErrWriterDied) {
		t.Fatalf("OpenWriter after the kill: %v", err)
	}
	t.Log(err)
	if wd.PID != pid || wd.Alive {
		t.Errorf("reported pid %d alive %v, want %d dead", wd.PID, wd.Alive, pid)
	}
	if st2 := h.Data.Stats(); st2.Write != 1 || st2.WState != st.WState {
		t.Fatalf("refusing changed the ring: %+v", st2)
	}
	// with recovery: the dead transfer ends after its one full block, and a
	// new transfer goes through
	w, err := wh.OpenWriter(ctx, WriterOptions{Recover: true})
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := r.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := hdr.Get("SOURCE"); s != "dead" {
		t.Fatalf("first header SOURCE %q", s)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern(bufsz+bufsz/2, 1)[:bufsz]) {
		t.Fatalf("dead transfer: got %d bytes, want the %d of its filled block", len(got), bufsz)
	}
	hdr2 := NewHeader(4096)
	hdr2.Set("SOURCE", "alive")
	if err := w.WriteHeader(hdr2); err != nil {
		t.Fatal(err)
	}
	data := pattern(3*bufsz+5, 2)
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	hdr, got = readOne(t, r)
	if s, _ := hdr.Get("SOURCE"); s != "alive" || !bytes.Equal(got, data) {
		t.Fatalf("transfer after recovery: SOURCE %q, %d bytes", s, len(got))
	}
	if st := h.Data.Stats(); st.WXfer != 2 || st.WState != StateDiscon {
		t.Fatalf("final %+v", st)
	}
}

// killReaderHelper reads as a child process until it is killed. Mode
// "between": it reads one whole transfer, says "read N", and waits for the
// next header. Mode "mid": it reads a header and takes the first data block
// without clearing it, says "ready", and waits. Mode "header": it reads a
// header, says "ready" and waits.
func killReaderHelper(mode string) int {
	k, err := strconv.ParseInt(os.Getenv("DADA_TEST_KEY"), 10, 64)
	if err != nil {
		return 2
	}
	h, err := Connect(Key(k), AttachOptions{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := h.OpenReader(ctx)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if _, err := r.ReadHeader(); err != nil {
		fmt.Println("error", err)
		return 1
	}
	if mode == "header" {
		fmt.Println("ready")
		time.Sleep(time.Minute)
		return 0
	}
	if mode == "mid" {
		if _, err := r.NextBlock(); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("ready")
		time.Sleep(time.Minute)
		return 0
	}
	n, err := r.WriteTo(io.Discard)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("read", n)
	r.ReadHeader() // waits here until killed
	return 0
}

// startKilledReader runs killReaderHelper in mode against ring k, returns
// its first output line and a func that kills it with SIGKILL.
func startHelper(t *testing.T, ctx context.Context, env ...string) (*bufio.Reader, func()) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	t.Cleanup(kill)
	return bufio.NewReader(out), kill
}

// writeAsync writes one transfer on its own attachment in a goroutine.
func writeAsync(ctx context.Context, k Key, hdr *Header, data []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		h, err := Connect(k, AttachOptions{})
		if err != nil {
			done <- err
			return
		}
		defer h.Detach()
		w, err := h.OpenWriter(ctx, WriterOptions{})
		if err != nil {
			done <- err
			return
		}
		if err := w.WriteHeader(hdr); err != nil {
			w.Close()
			done <- err
			return
		}
		_, err = w.Write(data)
		done <- errors.Join(err, w.Close())
	}()
	return done
}

// TestKilledReaderRejoin kills a reader (SIGKILL) between transfers and in
// the middle of one; a new reader takes its slot and must get exactly the
// next transfer, with the ring counters as psrdada 1.1.0 leaves them.
func TestKilledReaderRejoin(t *testing.T) {
	const bufsz = 8192
	for _, tc := range []struct {
		mode string
		skip bool
	}{{"between", false}, {"mid", true}, {"header", true}} {
		t.Run(tc.mode, func(t *testing.T) {
			h := newHDU(t, Config{NBufs: 4, BufSize: bufsz})
			ctx := testCtx(t)
			out, kill := startHelper(t, ctx, "DADA_TEST_HELPER=killreader", "DADA_TEST_MODE="+tc.mode,
				"DADA_TEST_KEY="+strconv.Itoa(int(h.Key())))
			hdr1 := NewHeader(4096)
			hdr1.Set("SOURCE", "first")
			d1 := pattern(3*bufsz+100, 1)
			w1 := writeAsync(ctx, h.Key(), hdr1, d1)
			line, _ := out.ReadString('\n')
			want := "ready\n"
			if tc.mode == "between" {
				want = fmt.Sprintf("read %d\n", len(d1))
			}
			if line != want {
				t.Fatalf("helper said %q, want %q", line, want)
			}
			kill()
			if tc.mode == "between" {
				if err := <-w1; err != nil {
					t.Fatal(err)
				}
				for _, rg := range []*Ring{h.Data, h.Header} {
					st := rg.Stats()
					if r0 := st.Readers[0]; r0.RBuf != st.WBufCurr || r0.RXfer != st.WXfer || r0.State != StateReader && r0.State != StateRStop {
						t.Fatalf("ring %s after the killed reader's transfer: %+v, want R = W", rg.Key().Short(), st)
					}
				}
			}
			rh, err := Connect(h.Key(), AttachOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer rh.Detach()
			r, err := rh.OpenReader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if rj := r.Rejoin(); !rj.Rejoined || rj.Skip != tc.skip || rj.Xfer != 0 && tc.skip {
				t.Fatalf("Rejoin() = %+v, want rejoined with skip %v", rj, tc.skip)
			}
			hdr2 := NewHeader(4096)
			hdr2.Set("SOURCE", "second")
			d2 := pattern(2*bufsz+7, 2)
			w2 := writeAsync(ctx, h.Key(), hdr2, d2)
			got, data := readOne(t, r)
			if s, _ := got.Get("SOURCE"); s != "second" || !bytes.Equal(data, d2) {
				t.Fatalf("after the rejoin: SOURCE %q, %d bytes (equal %v), want second, %d bytes", s, len(data), bytes.Equal(data, d2), len(d2))
			}
			if tc.mode != "between" {
				if err := <-w1; err != nil {
					t.Fatal(err)
				}
			}
			if err := <-w2; err != nil {
				t.Fatal(err)
			}
			for _, rg := range []*Ring{h.Data, h.Header} {
				st := rg.Stats()
				if r0 := st.Readers[0]; r0.RBuf != st.WBufCurr || r0.RXfer != st.WXfer || r0.Full != 0 {
					t.Errorf("ring %s at the end: %+v, want R = W and FULL 0", rg.Key().Short(), st)
				}
			}
		})
	}
}
