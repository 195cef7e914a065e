package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// hostIP is softroce's address: the bridge's address in the harness's
// namespace. Guest N is 10.77.0.(10+N).
const hostIP = "10.77.0.1"

// cfg is the run's configuration, read once by TestMain.
var cfg struct {
	mode    string // "smoke" or "all"; "" skips everything
	skip    string // why nothing can run (set when mode != "" but a prerequisite is missing)
	harness string // directory holding peer.sh
	ns      string // network namespace (ORACLE_NS)
	guests  [2]int // guest numbers: [0] is the peer, [1] the second kernel for rxe<->rxe baselines
	bin     string // the softroce binary built for this run
	pcapDir string // SOFTROCE_INTEROP_PCAP: softroce sides write their traffic here
	capiLib string // the C library for TestCLibrary ("" if it could not be built: capiErr)
	capiErr error
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	var tmp string
	configure()
	if cfg.mode != "" && cfg.skip == "" {
		var err error
		tmp, err = os.MkdirTemp("", "softroce-interop-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "interop:", err)
			return 1
		}
		defer os.RemoveAll(tmp)
		cfg.bin = filepath.Join(tmp, "softroce")
		if err := buildSoftroce(cfg.bin); err != nil {
			fmt.Fprintln(os.Stderr, "interop: building cmd/softroce:", err)
			return 1
		}
		buildCLibrary(tmp)
	}
	defer stopGuests()
	return m.Run()
}

// configure reads the environment and checks the prerequisites.
func configure() {
	switch v := os.Getenv("SOFTROCE_INTEROP"); v {
	case "", "0", "off":
		return
	case "smoke", "all":
		cfg.mode = v
	case "1", "on":
		cfg.mode = "all"
	default:
		cfg.skip = fmt.Sprintf("SOFTROCE_INTEROP=%q: want smoke or all", v)
		return
	}
	cfg.ns = envOr("ORACLE_NS", "rxepeer")
	cfg.guests = [2]int{1, 2}
	if v := os.Getenv("SOFTROCE_INTEROP_GUESTS"); v != "" {
		a, b, ok := strings.Cut(v, ",")
		x, err1 := strconv.Atoi(strings.TrimSpace(a))
		y, err2 := strconv.Atoi(strings.TrimSpace(b))
		if !ok || err1 != nil || err2 != nil || x < 1 || x > 9 || y < 1 || y > 9 || x == y {
			cfg.skip = fmt.Sprintf("SOFTROCE_INTEROP_GUESTS=%q: want two different guest numbers 1..9, like 1,2", v)
			return
		}
		cfg.guests = [2]int{x, y}
	}
	if cfg.pcapDir = os.Getenv("SOFTROCE_INTEROP_PCAP"); cfg.pcapDir != "" {
		if err := os.MkdirAll(cfg.pcapDir, 0o755); err != nil {
			cfg.skip = fmt.Sprintf("SOFTROCE_INTEROP_PCAP=%s: %v (name a directory the tests may write to)", cfg.pcapDir, err)
			return
		}
	}
	if os.Geteuid() != 0 {
		cfg.skip = "not root (the harness boots qemu guests on a bridge in a network namespace)"
		return
	}
	dir, err := findHarness()
	if err != nil {
		cfg.skip = err.Error()
		return
	}
	cfg.harness = dir
	for _, tool := range []string{"qemu-system-x86_64", "ip", "ss"} {
		if _, err := exec.LookPath(tool); err != nil {
			cfg.skip = fmt.Sprintf("%s not found (the harness's build-guest.sh installs qemu-system-x86)", tool)
			return
		}
	}
	cache := os.Getenv("ORACLE_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			base = filepath.Join(os.Getenv("HOME"), ".cache")
		}
		cache = filepath.Join(base, "softroce-rxe-peer")
	}
	for _, f := range []string{"kver", "vmlinuz", "initrd.cpio"} {
		if _, err := os.Stat(filepath.Join(cache, "image", f)); err != nil {
			cfg.skip = fmt.Sprintf("no guest image in %s (run %s once)", filepath.Join(cache, "image"),
				filepath.Join(dir, "build-guest.sh"))
			return
		}
	}
}

// findHarness returns the rxe-peer directory: $SOFTROCE_RXE_PEER, or
// shared/rxe-peer in the nearest ancestor of the module root that has one
// (the repository's ../shared/rxe-peer).
func findHarness() (string, error) {
	if d := os.Getenv("SOFTROCE_RXE_PEER"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "peer.sh")); err != nil {
			return "", fmt.Errorf("SOFTROCE_RXE_PEER=%s has no peer.sh", d)
		}
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "shared", "rxe-peer", "peer.sh")); err == nil {
			return filepath.Join(d, "shared", "rxe-peer"), nil
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", errors.New("rxe-peer harness not found (no shared/rxe-peer/peer.sh above the repository; set SOFTROCE_RXE_PEER)")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func buildSoftroce(out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/softroce/softroce/cmd/softroce")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v\n%s", err, b)
	}
	return nil
}

// need skips t unless the run is enabled and, for a case outside the smoke
// subset, SOFTROCE_INTEROP=all.
func need(t *testing.T, smoke bool) {
	t.Helper()
	switch {
	case cfg.mode == "":
		t.Skip("live interop with the kernel's rxe: set SOFTROCE_INTEROP=smoke (CI subset) or all; needs root, qemu and shared/rxe-peer's guest image")
	case cfg.skip != "":
		t.Skip("interop harness unavailable: " + cfg.skip)
	case cfg.mode == "smoke" && !smoke:
		t.Skip("not in the smoke subset (SOFTROCE_INTEROP=all runs it)")
	}
}

// ---------------------------------------------------------------- guests

// guest is one kernel peer kept running across tests (peer.sh -k).
type guest struct {
	n  int
	ip string
}

var guestState struct {
	sync.Mutex
	up   map[int]*guest
	fail map[int]string
}

// bootGuest returns guest idx (0 or 1 of cfg.guests), booting it on first
// use. A guest that cannot boot skips the test: the harness cannot start.
func bootGuest(t *testing.T, idx int) *guest {
	t.Helper()
	n := cfg.guests[idx]
	guestState.Lock()
	defer guestState.Unlock()
	if g := guestState.up[n]; g != nil {
		return g
	}
	if why := guestState.fail[n]; why != "" {
		t.Skip("interop harness cannot start: " + why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := peer(ctx, "-n", strconv.Itoa(n), "-k", "-w", "none", "-t", "60", "--", "true").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("PEER_READY")) {
		// A half-started qemu must not outlive us.
		stopGuest(n)
		if guestState.fail == nil {
			guestState.fail = map[int]string{}
		}
		why := fmt.Sprintf("booting guest %d: %v\n%s", n, err, tail(string(out), 20))
		guestState.fail[n] = why
		t.Skip("interop harness cannot start: " + why)
	}
	g := &guest{n: n, ip: fmt.Sprintf("10.77.0.%d", 10+n)}
	if guestState.up == nil {
		guestState.up = map[int]*guest{}
	}
	guestState.up[n] = g
	t.Logf("guest %d (%s) booted in %v", n, g.ip, time.Since(start).Round(100*time.Millisecond))
	return g
}

func stopGuests() {
	guestState.Lock()
	defer guestState.Unlock()
	for n := range guestState.up {
		stopGuest(n)
	}
	guestState.up = nil
}

func stopGuest(n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = peer(ctx, "--stop", "-n", strconv.Itoa(n)).Run()
}

// peer returns a peer.sh command in the configured namespace.
func peer(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.harness, "peer.sh"), args...)
	cmd.Env = append(os.Environ(), "ORACLE_NS="+cfg.ns)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// result is what one side of a run printed and how it exited.
type result struct {
	out  string
	code int // exit status; -1 if it could not run or was killed
	err  error
}

func (r result) String() string {
	return fmt.Sprintf("exit %d (%v)\n%s", r.code, r.err, r.out)
}

// exec runs a shell command line in the guest and waits at most limit; the
// harness kills the guest command at the limit.
func (g *guest) exec(ctx context.Context, limit time.Duration, cmdline string) result {
	secs := int(limit.Seconds())
	if secs < 1 {
		secs = 1
	}
	ctx, cancel := context.WithTimeout(ctx, limit+30*time.Second)
	defer cancel()
	cmd := peer(ctx, "--exec", "-n", strconv.Itoa(g.n), "-t", strconv.Itoa(secs), "--", cmdline)
	return runCmd(cmd)
}

// must runs a setup command in the guest and fails t if it fails.
func (g *guest) must(t *testing.T, cmdline string) string {
	t.Helper()
	r := g.exec(context.Background(), 60*time.Second, cmdline)
	if r.code != 0 {
		t.Fatalf("guest %d: %s: %v", g.n, cmdline, r)
	}
	return r.out
}

func runCmd(cmd *exec.Cmd) result {
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Exited() {
			code = ee.ExitCode()
		}
	}
	return result{out: buf.String(), code: code, err: err}
}

// hostCmd returns softroce with args, run in the namespace.
func hostCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", cfg.ns, cfg.bin}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// nsListening reports whether a socket in the namespace listens on TCP port
// (tcp) or is bound to UDP port (udp).
func nsListening(proto string, port int) bool {
	flag := "-Hltn"
	if proto == "udp" {
		flag = "-Hlun"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", cfg.ns, "ss", flag,
		fmt.Sprintf("sport = :%d", port)).Output()
	return err == nil && len(bytes.TrimSpace(out)) > 0
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------- pairs

// listenKind says how to tell that a server is ready.
type listenKind int

const (
	listenTCP listenKind = iota // the TCP side channel on 18515 (ibv_*, perftest)
	listenCM                    // an rdma_cm listen (rping, perftest -R)
)

// endpoint is one side of a pair: a guest's shell command line, or (guest
// nil) softroce's arguments in the namespace.
type endpoint struct {
	guest *guest
	cmd   string // guest: shell command line; host: softroce arguments, space separated
}

func (e endpoint) String() string {
	if e.guest != nil {
		return fmt.Sprintf("guest %d: %s", e.guest.n, e.cmd)
	}
	return "softroce " + e.cmd
}

// start runs e in the background; the result arrives on the channel.
func (e endpoint) start(ctx context.Context, limit time.Duration) <-chan result {
	ch := make(chan result, 1)
	if e.guest != nil {
		go func() { ch <- e.guest.exec(ctx, limit, "ulimit -l unlimited; "+e.cmd) }()
		return ch
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	cmd := hostCmd(ctx, strings.Fields(e.cmd)...)
	go func() {
		defer cancel()
		ch <- runCmd(cmd)
	}()
	return ch
}

// withPcap adds --pcap to a softroce command when SOFTROCE_INTEROP_PCAP
// names a directory: the file is named after the test.
func withPcap(t *testing.T, e endpoint) endpoint {
	if cfg.pcapDir == "" || e.guest != nil {
		return e
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	e.cmd += " --pcap " + filepath.Join(cfg.pcapDir, name+".pcap")
	return e
}

// pairRun is the outcome of a server/client run.
type pairRun struct {
	server, client result
	elapsed        time.Duration // from the client's start to both ends
}

// runPair starts srv, waits until it listens, runs cli, and waits for both,
// each bounded by limit. If t fails, both outputs are logged at its end.
func runPair(t *testing.T, srv, cli endpoint, lk listenKind, limit time.Duration) pairRun {
	t.Helper()
	run := runPairQuiet(t, srv, cli, lk, limit)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server %s\nclient %s", run.server, run.client)
		}
	})
	return run
}

// runPairQuiet is runPair without the outputs.
func runPairQuiet(t *testing.T, srv, cli endpoint, lk listenKind, limit time.Duration) pairRun {
	t.Helper()
	for attempt := 1; ; attempt++ {
		run := runPairOnce(t, srv, cli, lk, limit)
		if !guestRaced(srv, lk, run) || attempt == raceAttempts {
			return run
		}
		t.Logf("attempt %d: the client's request beat the guest server's second rdma_listen (REJECTED, reason 8): again", attempt)
	}
}

// raceAttempts bounds the runs of a pair lost to perftest -R's race
// (guestRaced). The library's client lost it in 18 of 24 runs against the
// guest's server (three runs of the test on each of two trees: 2 to 5 lost runs
// before a won one), so 6 runs failed about one smoke run in six. Since its
// rdma_resolve_addr posts ADDR_RESOLVED within the call (cm.Config.Resolved),
// the client reconnects sooner and loses more: 11, 9, 6, 2 and 11 lost runs
// before a won one (or the end) in five runs of the subtest over two trees,
// so 12 failed about one smoke run in three; 40 leave well under 1%. A lost
// run takes 3-4 s.
const raceAttempts = 40

// guestRaced reports a run lost to a race of the stock perftest -R, not a
// failure: its server listens twice over rdma_cm (the control connection,
// then a new listener for the data QPs), a fast client's data request can
// arrive between the two (REJECTED, reason 8: nothing listening), and
// Debian's perftest 4.5 client then crashes in its retry while the server
// waits for it. runPairOnce has stopped that server.
func guestRaced(srv endpoint, lk listenKind, run pairRun) bool {
	return srv.guest != nil && lk == listenCM && run.client.code != 0 &&
		strings.Contains(run.client.out, "RDMA_CM_EVENT_REJECTED; error: 8")
}

// runPairOnce is one run of runPairQuiet.
func runPairOnce(t *testing.T, srv, cli endpoint, lk listenKind, limit time.Duration) pairRun {
	t.Helper()
	ctx := context.Background()
	t.Logf("server: %s", srv)
	t.Logf("client: %s", cli)
	sch := srv.start(ctx, limit)
	var early *result
	if err := waitListening(srv, lk, sch, &early); err != nil {
		var sr result
		if early != nil {
			sr = *early
		} else {
			sr = <-sch
		}
		t.Fatalf("server not ready: %v\nserver %v", err, sr)
	}
	start := time.Now()
	var run pairRun
	for attempt := 1; ; attempt++ {
		run.client = <-cli.start(ctx, limit)
		// rdma_cm: a softroce server bound its socket a moment before it
		// listens; a REJECT (reason 8, nothing listening) then is a race
		// of the test, not a failure. Retry a few times.
		if run.client.code == 0 || attempt == 3 || srv.guest != nil || lk != listenCM ||
			!strings.Contains(run.client.out, "REJECTED") {
			break
		}
		t.Logf("client rejected (server not listening yet?), retrying:\n%s", tail(run.client.out, 5))
		time.Sleep(time.Second)
	}
	if guestRaced(srv, lk, run) {
		// The server waits for the client that crashed: stop it.
		srv.guest.exec(ctx, 20*time.Second, "pkill -x "+strings.Fields(srv.cmd)[0]+" || true")
	}
	run.server = <-sch
	run.elapsed = time.Since(start)
	return run
}

// waitListening waits (bounded) until srv listens. If srv ends first, its
// result is stored in *early and an error returned.
func waitListening(srv endpoint, lk listenKind, sch <-chan result, early **result) error {
	deadline := time.Now().Add(60 * time.Second)
	if srv.guest != nil {
		probe := "ss -Hltn 'sport = :18515' | grep -q ."
		if lk == listenCM {
			probe = "rdma res show cm_id 2>/dev/null | grep -q LISTEN"
		}
		for time.Now().Before(deadline) {
			select {
			case r := <-sch:
				*early = &r
				return errors.New("server exited before listening")
			default:
			}
			r := srv.guest.exec(context.Background(), 30*time.Second,
				"i=0; while [ $i -lt 100 ]; do "+probe+" && exit 0; sleep 0.2; i=$((i+1)); done; exit 1")
			if r.code == 0 {
				return nil
			}
		}
		return errors.New("guest server not listening after 60s")
	}
	proto, port := "tcp", 18515
	if lk == listenCM {
		proto, port = "udp", 4791
	}
	for time.Now().Before(deadline) {
		select {
		case r := <-sch:
			*early = &r
			return errors.New("server exited before listening")
		default:
		}
		if nsListening(proto, port) {
			if lk == listenCM {
				time.Sleep(time.Second) // socket bound; the listen follows at once
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("softroce server not listening after 60s")
}
