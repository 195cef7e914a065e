package dadatool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/internal/tooltest"
	"github.com/softroce/softroce/pipeline"
)

// These tests run "softroce dada recv" and "softroce dada send" as two
// processes, as a user would, and check the bytes with the dada reader.

// TestDadaStream runs "softroce dada recv" and "softroce dada send" as two
// processes in each mode.
func TestDadaStream(t *testing.T) {
	streamNeedRoot(t)
	bin := tooltest.Binary(t)
	t.Run("RoCE", func(t *testing.T) { testDadaStreamRoCE(t, bin) })
	t.Run("UDP", func(t *testing.T) { testDadaStreamUDP(t, bin) })
	t.Run("RoCE relay", func(t *testing.T) { testDadaStreamRelay(t, bin) })
}

// dada write → local ring → dada send -k → dada recv → remote ring.
func testDadaStreamRelay(t *testing.T, bin string) {
	src, dst := streamRing(t, 4, 1<<20), streamRing(t, 4, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type rd struct {
		hdr  *dada.Header
		data []byte
		err  error
	}
	rdc := make(chan rd, 1)
	go func() {
		h, d, err := streamReadRing(ctx, dst.Key(), 0)
		rdc <- rd{h, d, err}
	}()
	ctl := strconv.Itoa(streamFreePort(t, "tcp"))
	recv := startStream(ctx, t, bin, "dada", "recv", "-k", dst.Key().Short(), "-d", fmt.Sprintf("127.0.0.1:%d", streamFreePort(t, "udp")), "-l", "127.0.0.1:"+ctl, "-q")
	send := startStream(ctx, t, bin, "dada", "send", "-k", src.Key().Short(), "-c", "127.0.0.1:"+ctl, "-d", fmt.Sprintf("127.0.0.1:%d", streamFreePort(t, "udp")),
		"-q", "-send", "-chunk", "65536")
	hf := filepath.Join(t.TempDir(), "obs.hdr")
	if err := os.WriteFile(hf, []byte("HDR_SIZE 4096\nSOURCE J0835-4510\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const size = 7<<20 + 4321
	if out, err := exec.CommandContext(ctx, bin, "dada", "write", "-k", src.Key().Short(), "-r", "0", "-b", strconv.Itoa(size), hf).CombinedOutput(); err != nil {
		t.Fatalf("dada write: %v\n%s", err, out)
	}
	sout, rout := send.wait(t), recv.wait(t)
	t.Logf("send: %srecv: %s", sout, rout)
	r := <-rdc
	if r.err != nil {
		t.Fatal(r.err)
	}
	if s, _ := r.hdr.Get("SOURCE"); s != "J0835-4510" || len(r.data) != size {
		t.Fatalf("relayed %d bytes with SOURCE %q, want %d", len(r.data), s, size)
	}
	for i, b := range r.data {
		if b != byte(i) {
			t.Fatalf("relayed byte %d is %d, want %d", i, b, byte(i))
		}
	}
	if !strings.Contains(rout, "SEND of 65536-byte chunks over 4 QPs") {
		t.Errorf("recv output:\n%s", rout)
	}
}

func streamNeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creates system-wide System V rings; run as root (CI does)")
	}
}

// streamRing creates a ring at a random free key, destroyed at the end.
func streamRing(t testing.TB, nbufs int, bufsz uint64) *dada.HDU {
	t.Helper()
	streamNeedRoot(t)
	for range 100 {
		k := dada.Key(int32(rand.Uint32N(0x3000)+0x1000)<<16 | int32(rand.Uint32N(0xfff0)+1))
		h, err := dada.Create(dada.Config{Key: k, NBufs: nbufs, BufSize: bufsz})
		if errors.Is(err, dada.ErrExists) || errors.Is(err, dada.ErrKeyCollision) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Destroy() })
		return h
	}
	t.Fatal("no free key")
	return nil
}

func streamFreePort(t testing.TB, network string) int {
	t.Helper()
	switch network {
	case "udp":
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type streamProc struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	waited chan error
}

func startStream(ctx context.Context, t *testing.T, bin string, args ...string) *streamProc {
	t.Helper()
	p := &streamProc{cmd: exec.CommandContext(ctx, bin, args...), waited: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.waited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.waited
		}
	})
	return p
}

func (p *streamProc) wait(t *testing.T) string {
	t.Helper()
	if err := <-p.waited; err != nil {
		t.Fatalf("%v: %v\n%s", p.cmd.Args, err, p.out.String())
	}
	return p.out.String()
}

// streamReadRing reads one transfer with the dada reader API.
func streamReadRing(ctx context.Context, key dada.Key, slow time.Duration) (*dada.Header, []byte, error) {
	h, err := dada.Connect(key, dada.AttachOptions{})
	if err != nil {
		return nil, nil, err
	}
	defer h.Detach()
	r, err := h.OpenReader(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	hdr, err := r.ReadHeader()
	if err != nil {
		return nil, nil, err
	}
	var out bytes.Buffer
	for {
		b, err := r.NextBlock()
		if err == io.EOF {
			return hdr, out.Bytes(), nil
		}
		if err != nil {
			return hdr, out.Bytes(), err
		}
		out.Write(b.Data)
		time.Sleep(slow)
		if err := r.MarkCleared(); err != nil {
			return hdr, out.Bytes(), err
		}
	}
}

func testDadaStreamRoCE(t *testing.T, bin string) {
	hdu := streamRing(t, 4, 1<<20)
	ks := hdu.Key().Short()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type rd struct {
		hdr  *dada.Header
		data []byte
		err  error
	}
	rdc := make(chan rd, 1)
	go func() {
		// a slow reader: the sender must wait for it, nothing is overwritten
		h, d, err := streamReadRing(ctx, hdu.Key(), 15*time.Millisecond)
		rdc <- rd{h, d, err}
	}()
	ctl := strconv.Itoa(streamFreePort(t, "tcp"))
	rdev, sdev := streamFreePort(t, "udp"), streamFreePort(t, "udp")
	recv := startStream(ctx, t, bin, "dada", "recv", "-k", ks, "-d", fmt.Sprintf("127.0.0.1:%d", rdev), "-l", "127.0.0.1:"+ctl, "-v", "-i", "50ms")
	hf := filepath.Join(t.TempDir(), "obs.hdr")
	if err := os.WriteFile(hf, []byte("HDR_SIZE 4096\nSOURCE J1939+2134\nFREQ 1400\nNBIT 8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const size = 20<<20 + 12345
	send := startStream(ctx, t, bin, "dada", "send", "-c", "127.0.0.1:"+ctl, "-d", fmt.Sprintf("127.0.0.1:%d", sdev),
		"-b", strconv.Itoa(size), hf)
	sout := send.wait(t)
	rout := recv.wait(t)
	t.Logf("send:\n%s\nrecv:\n%s", sout, rout)
	r := <-rdc
	if r.err != nil {
		t.Fatal(r.err)
	}
	if src, _ := r.hdr.Get("SOURCE"); src != "J1939+2134" {
		t.Errorf("header at the reader:\n%s", r.hdr)
	}
	if ts, _ := r.hdr.GetUint("TRANSFER_SIZE"); ts != size {
		t.Errorf("TRANSFER_SIZE %d", ts)
	}
	if len(r.data) != size {
		t.Fatalf("reader got %d bytes, want %d", len(r.data), size)
	}
	if off := pipeline.CheckPattern(r.data, 0); off >= 0 {
		t.Fatalf("data differ at byte %d", off)
	}
	if !strings.Contains(rout, "registered single (1 MR)") || !strings.Contains(rout, "transfer 0 (SOURCE J1939+2134) from 127.0.0.1:") ||
		!strings.Contains(rout, fmt.Sprintf("%d bytes in 21 blocks", size)) {
		t.Errorf("recv output:\n%s", rout)
	}
	if !regexp.MustCompile(`recv +\d+\.\ds +\d+\.\d+ Gb/s .* ring \d/4 full`).MatchString(rout) {
		t.Errorf("no progress lines in the recv output:\n%s", rout)
	}
	if !regexp.MustCompile(`waited [1-9]\d*\.\d+ s for credits|waited 0\.[0-9]*[1-9][0-9]* s for credits`).MatchString(sout) {
		t.Errorf("the sender did not wait for the slow reader:\n%s", sout)
	}
}

func testDadaStreamUDP(t *testing.T, bin string) {
	hdu := streamRing(t, 4, 1<<20)
	ks := hdu.Key().Short()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type rd struct {
		hdr  *dada.Header
		data []byte
		err  error
	}
	rdc := make(chan rd, 1)
	go func() {
		h, d, err := streamReadRing(ctx, hdu.Key(), 0)
		rdc <- rd{h, d, err}
	}()
	port := strconv.Itoa(streamFreePort(t, "udp"))
	const payload, packets = 4096, 3000
	recv := startStream(ctx, t, bin, "dada", "recv", "-udp", "-k", ks, "-l", "127.0.0.1:"+port, "-payload", strconv.Itoa(payload),
		"-hdr-len", "16", "-seq-off", "4", "-seq-width", "4", "-seq-le", "-packets", strconv.Itoa(packets), "-idle", "300ms", "-v", "-i", "50ms")
	time.Sleep(200 * time.Millisecond) // let it bind
	send := startStream(ctx, t, bin, "dada", "send", "-udp", "-c", "127.0.0.1:"+port, "-payload", strconv.Itoa(payload),
		"-hdr-len", "16", "-seq-off", "4", "-seq-width", "4", "-seq-le", "-b", strconv.Itoa((packets+100)*payload),
		"-r", "100", "-loss", "0.01", "-start", "77")
	sout := send.wait(t)
	rout := recv.wait(t)
	t.Logf("send:\n%s\nrecv:\n%s", sout, rout)
	r := <-rdc
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.data) != packets*payload {
		t.Fatalf("reader got %d bytes, want %d", len(r.data), packets*payload)
	}
	ps, err := r.hdr.GetUint("PKT_START")
	if err != nil {
		t.Fatalf("header without PKT_START:\n%s", r.hdr)
	}
	zero := 0
	for i := 0; i < packets; i++ {
		p := r.data[i*payload : (i+1)*payload]
		if off := pipeline.CheckPattern(p, (ps+uint64(i))*payload); off >= 0 {
			if !bytes.Equal(p, make([]byte, payload)) {
				t.Fatalf("packet %d: wrong byte at %d", i, off)
			}
			zero++
		}
	}
	m := regexp.MustCompile(`packets (\d+) received, (\d+) lost`).FindStringSubmatch(rout)
	if m == nil {
		t.Fatalf("no summary in the recv output:\n%s", rout)
	}
	if lost, _ := strconv.Atoi(m[2]); lost != zero || zero == 0 {
		t.Errorf("%d packets zero-filled, recv reports %s lost (1%% injected)", zero, m[2])
	}
}

// TestDadaStreamBenchmark measures "dada send" → "dada recv" between two
// processes into an 8 × 64 MiB ring (created with -p so that its pages are
// in place), in RoCE mode over loopback UDP and in UDP mode, with
// "dada read" as the reader. It is not part of the default run: set
// SOFTROCE_DADA_BENCH=1 (optionally SOFTROCE_DADA_BENCH_BYTES, default 4 GiB,
// and SOFTROCE_DADA_BENCH_GBPS, the UDP send rate, default as fast as
// possible).
func TestDadaStreamBenchmark(t *testing.T) {
	if os.Getenv("SOFTROCE_DADA_BENCH") == "" {
		t.Skip("set SOFTROCE_DADA_BENCH=1 to run the 8 × 64 MiB ring benchmark (needs a quiet machine)")
	}
	streamNeedRoot(t)
	size := int64(4 << 30)
	if s := os.Getenv("SOFTROCE_DADA_BENCH_BYTES"); s != "" {
		size, _ = strconv.ParseInt(s, 10, 64)
	}
	bin := tooltest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bench := func(t *testing.T, recvArgs, sendArgs []string) {
		k := streamRing(t, 1, 4096).Key() // reserve a free key, then make the real ring there
		h, _ := dada.Connect(k, dada.AttachOptions{})
		h.Destroy()
		ks := k.Short()
		if out, err := exec.CommandContext(ctx, bin, "dada", "db", "-k", ks, "-n", "8", "-b", strconv.Itoa(64<<20), "-p").CombinedOutput(); err != nil {
			t.Fatalf("dada db: %v\n%s", err, out)
		}
		t.Cleanup(func() { dada.Destroy(k) })
		rd := startStream(ctx, t, bin, "dada", "read", "-k", ks, "-s")
		recv := startStream(ctx, t, bin, append([]string{"dada", "recv", "-k", ks, "-q"}, recvArgs...)...)
		time.Sleep(300 * time.Millisecond)
		send := startStream(ctx, t, bin, append([]string{"dada", "send", "-q", "-b", strconv.FormatInt(size, 10)}, sendArgs...)...)
		t.Logf("send: %s", send.wait(t))
		t.Logf("recv: %s", recv.wait(t))
		t.Logf("read: %s", rd.wait(t))
	}
	t.Run("RoCE", func(t *testing.T) {
		ctl := "127.0.0.1:" + strconv.Itoa(streamFreePort(t, "tcp"))
		bench(t, []string{"-d", fmt.Sprintf("127.0.0.1:%d", streamFreePort(t, "udp")), "-l", ctl},
			[]string{"-c", ctl, "-d", fmt.Sprintf("127.0.0.1:%d", streamFreePort(t, "udp"))})
	})
	t.Run("UDP", func(t *testing.T) {
		dst := "127.0.0.1:" + strconv.Itoa(streamFreePort(t, "udp"))
		sargs := []string{"-udp", "-c", dst}
		if g := os.Getenv("SOFTROCE_DADA_BENCH_GBPS"); g != "" {
			sargs = append(sargs, "-g", g)
		}
		bench(t, []string{"-udp", "-l", dst, "-idle", "500ms"}, sargs)
	})
}
