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
	"slices"
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
	return startStreamEnv(ctx, t, nil, bin, args...)
}

// startStreamEnv is startStream with the environment env (nil: this
// process's).
func startStreamEnv(ctx context.Context, t *testing.T, env []string, bin string, args ...string) *streamProc {
	t.Helper()
	p := &streamProc{cmd: exec.CommandContext(ctx, bin, args...), waited: make(chan error, 1)}
	p.cmd.Env = env
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
// in place), in RoCE mode over loopback UDP and, in the same round, in UDP
// mode as the baseline. It is not part of the default run: set
// SOFTROCE_DADA_BENCH=1. The reader that drains the ring is psrdada's own
// dada_dbnull (-s -z) when PSRDADA_PREFIX names a psrdada 1.1 install, else
// "softroce dada read -s". It prints each round's rates (the receiver's
// summary) with the 1-minute load average, the medians and the median of
// the per-round RoCE/UDP ratios. Optional:
//
//	SOFTROCE_DADA_BENCH_RUNS     rounds (default 3; the modes' order swaps every round)
//	SOFTROCE_DADA_BENCH_BYTES    bytes per transfer (default 4 GiB)
//	SOFTROCE_DADA_BENCH_GBPS     the UDP mode's send rate (default as fast as possible)
//	SOFTROCE_DADA_BENCH_BIN      a softroce binary built elsewhere (before/after comparisons)
//	SOFTROCE_DADA_BENCH_PROFILE  a directory for CPU profiles of dada send and recv (RoCE)
//	SOFTROCE_DADA_BENCH_SEND     more flags for the RoCE dada send (space-separated, e.g. "-qps 8")
//	SOFTROCE_DADA_BENCH_RECV     more flags for the RoCE dada recv (e.g. "-credits 7")
func TestDadaStreamBenchmark(t *testing.T) {
	if os.Getenv("SOFTROCE_DADA_BENCH") == "" {
		t.Skip("set SOFTROCE_DADA_BENCH=1 to run the 8 × 64 MiB ring benchmark (needs a quiet machine)")
	}
	streamNeedRoot(t)
	size := int64(4 << 30)
	if s := os.Getenv("SOFTROCE_DADA_BENCH_BYTES"); s != "" {
		size, _ = strconv.ParseInt(s, 10, 64)
	}
	runs := 3
	if s := os.Getenv("SOFTROCE_DADA_BENCH_RUNS"); s != "" {
		runs, _ = strconv.Atoi(s)
	}
	bin := os.Getenv("SOFTROCE_DADA_BENCH_BIN")
	if bin == "" {
		bin = tooltest.Binary(t)
	}
	profDir := os.Getenv("SOFTROCE_DADA_BENCH_PROFILE")
	// the drain: stock dada_dbnull, or this project's reader
	drain := func(ks string) []string { return []string{bin, "dada", "read", "-k", ks, "-s"} }
	var drainEnv []string
	if p := os.Getenv("PSRDADA_PREFIX"); p != "" {
		dbnull := filepath.Join(p, "bin", "dada_dbnull")
		if _, err := os.Stat(dbnull); err != nil {
			t.Fatalf("PSRDADA_PREFIX=%s: %v", p, err)
		}
		ld := filepath.Join(p, "lib")
		if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
			ld += ":" + old
		}
		drainEnv = append(os.Environ(), "LD_LIBRARY_PATH="+ld)
		drain = func(ks string) []string { return []string{dbnull, "-k", ks, "-s", "-z"} }
	}
	t.Logf("binary %s; drain %s", bin, strings.Join(drain("KEY"), " "))
	rateRE := regexp.MustCompile(`transfer 0\b.*, ([0-9.]+) Gb/s`)
	bench := func(t *testing.T, round int, mode string, recvArgs, sendArgs []string) (gbps, load float64) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		k := streamRing(t, 1, 4096).Key() // reserve a free key, then make the real ring there
		h, _ := dada.Connect(k, dada.AttachOptions{})
		h.Destroy()
		ks := k.Short()
		if out, err := exec.CommandContext(ctx, bin, "dada", "db", "-k", ks, "-n", "8", "-b", strconv.Itoa(64<<20), "-p").CombinedOutput(); err != nil {
			t.Fatalf("dada db: %v\n%s", err, out)
		}
		t.Cleanup(func() { dada.Destroy(k) })
		dargs := drain(ks)
		rd := startStreamEnv(ctx, t, drainEnv, dargs[0], dargs[1:]...)
		if profDir != "" && mode == "RoCE" {
			recvArgs = append(recvArgs, "-cpuprofile", filepath.Join(profDir, fmt.Sprintf("recv%d.pprof", round)))
			sendArgs = append(sendArgs, "-cpuprofile", filepath.Join(profDir, fmt.Sprintf("send%d.pprof", round)))
		}
		recv := startStream(ctx, t, bin, append([]string{"dada", "recv", "-k", ks, "-q"}, recvArgs...)...)
		time.Sleep(300 * time.Millisecond)
		send := startStream(ctx, t, bin, append([]string{"dada", "send", "-q", "-b", strconv.FormatInt(size, 10)}, sendArgs...)...)
		sout, rout := send.wait(t), recv.wait(t)
		load = streamLoadavg()
		t.Logf("send: %s", sout)
		t.Logf("recv: %s", rout)
		t.Logf("drain: %s", rd.wait(t))
		m := rateRE.FindStringSubmatch(rout)
		if m == nil {
			t.Fatalf("no rate in the recv summary:\n%s", rout)
		}
		gbps, _ = strconv.ParseFloat(m[1], 64)
		return gbps, load
	}
	type result struct{ roce, udp, lroce, ludp float64 }
	var res []result
	for round := range runs {
		var r result
		modes := []string{"RoCE", "UDP"}
		if round%2 == 1 {
			modes[0], modes[1] = modes[1], modes[0]
		}
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%s-%d", mode, round), func(t *testing.T) {
				if mode == "RoCE" {
					ctl := "127.0.0.1:" + strconv.Itoa(streamFreePort(t, "tcp"))
					r.roce, r.lroce = bench(t, round, mode,
						append([]string{"-d", fmt.Sprintf("127.0.0.1:%d", streamFreePort(t, "udp")), "-l", ctl}, strings.Fields(os.Getenv("SOFTROCE_DADA_BENCH_RECV"))...),
						append([]string{"-c", ctl, "-d", fmt.Sprintf("127.0.0.1:%d", streamFreePort(t, "udp"))}, strings.Fields(os.Getenv("SOFTROCE_DADA_BENCH_SEND"))...))
					return
				}
				dst := "127.0.0.1:" + strconv.Itoa(streamFreePort(t, "udp"))
				sargs := []string{"-udp", "-c", dst}
				if g := os.Getenv("SOFTROCE_DADA_BENCH_GBPS"); g != "" {
					sargs = append(sargs, "-g", g)
				}
				r.udp, r.ludp = bench(t, round, mode, []string{"-udp", "-l", dst, "-idle", "500ms"}, sargs)
			})
		}
		res = append(res, r)
	}
	var roce, udp, ratio []float64
	var tab strings.Builder
	fmt.Fprintf(&tab, "round  RoCE Gb/s (load)   UDP Gb/s (load)   RoCE/UDP\n")
	for i, r := range res {
		q := 0.0
		if r.udp > 0 {
			q = r.roce / r.udp
		}
		fmt.Fprintf(&tab, "%5d  %8.2f (%5.2f)  %8.2f (%5.2f)  %7.2f\n", i, r.roce, r.lroce, r.udp, r.ludp, q)
		roce, udp, ratio = append(roce, r.roce), append(udp, r.udp), append(ratio, q)
	}
	fmt.Fprintf(&tab, "median %8.2f          %8.2f          %7.2f", streamMedian(roce), streamMedian(udp), streamMedian(ratio))
	t.Logf("8 × 64 MiB ring, %d bytes per transfer, drained by %s:\n%s", size, filepath.Base(drain("KEY")[0]), tab.String())
}

// streamLoadavg returns the 1-minute load average (0 if unknown).
func streamLoadavg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func streamMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
