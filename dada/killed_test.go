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
	if os.Getenv("DADA_TEST_HELPER") == "killwriter" {
		os.Exit(killWriterHelper())
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
