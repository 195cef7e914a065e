package dadatool

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/dada"
)

func TestDadaTools(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the dada tools create system-wide SysV shared memory; run as root (CI does)")
	}
	var k dada.Key
	for {
		k = dada.Key(int32(rand.Uint32N(0x3000)+0x1000)<<16 | int32(rand.Uint32N(0xfff0)+1))
		if _, err := dada.Connect(k, dada.AttachOptions{}); errors.Is(err, dada.ErrNotFound) {
			break
		}
	}
	ks := k.Short()
	runOK := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := run(append([]string{"dada"}, args...), &out, &errb); rc != 0 {
			t.Fatalf("softroce dada %v: exit %d\n%s%s", args, rc, out.String(), errb.String())
		}
		return out.String()
	}
	runOK("db", "-k", ks, "-n", "4", "-b", "65536", "-r", "1")
	defer dada.Destroy(k)
	var eb bytes.Buffer
	if rc := run([]string{"dada", "db", "-k", ks}, &bytes.Buffer{}, &eb); rc != 1 || !strings.Contains(eb.String(), "exists") {
		t.Fatalf("creating twice: exit %d, %s", rc, eb.String())
	}
	mon := runOK("monitor", "-k", ks, "-n", "2", "-i", "10ms")
	if !strings.Contains(mon, "FRE FUL CLR  W  R    FRE FUL CLR     W     R") || !strings.Contains(mon, "Number of buffers: 4") {
		t.Fatalf("monitor output:\n%s", mon)
	}
	dir := t.TempDir()
	hf := filepath.Join(dir, "h.txt")
	if err := os.WriteFile(hf, []byte("HDR_SIZE 4096\nSOURCE test\nNBIT 8\nUTC_START 2026-01-01-00:00:00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	for _, extra := range [][]string{nil, {"-z"}, {"-z", "-c", "Q"}, {"-c", "Q"}} {
		done := make(chan string, 1)
		go func() {
			var o, e bytes.Buffer
			rc := run([]string{"dada", "read", "-k", ks, "-s", "-o", out}, &o, &e)
			done <- strings.TrimSpace(o.String()+e.String()) + map[bool]string{true: "", false: " (failed)"}[rc == 0]
		}()
		args := append([]string{"write", "-k", ks, "-r", "0", "-b", "300000"}, extra...)
		w := runOK(append(args, hf)...)
		if !strings.Contains(w, "300000 bytes transferred") {
			t.Fatalf("write output: %s", w)
		}
		if r := <-done; !strings.Contains(r, "300000 bytes") || strings.Contains(r, "(failed)") {
			t.Fatalf("read output: %s", r)
		}
		files, _ := filepath.Glob(filepath.Join(out, "*.dada"))
		if len(files) != 1 {
			t.Fatalf("files %v", files)
		}
		fi, _ := os.Stat(files[0])
		if fi.Size() != 4096+300000 {
			t.Fatalf("%s is %d bytes", files[0], fi.Size())
		}
		if slices.Contains(extra, "-c") {
			// -c Q: every data byte is the fill character, in place (-z) or not.
			data, _ := os.ReadFile(files[0])
			if i := bytes.IndexFunc(data[4096:], func(r rune) bool { return r != 'Q' }); i >= 0 {
				t.Fatalf("write %v: data byte %d is %q, want 'Q'", extra, i, data[4096+i])
			}
		}
		os.Remove(files[0])
	}
	runOK("db", "-d", "-k", ks)
	if rc := run([]string{"dada", "db", "-d", "-k", ks}, &bytes.Buffer{}, &bytes.Buffer{}); rc != 1 {
		t.Fatalf("destroying twice: exit %d", rc)
	}
	shm, _ := os.ReadFile("/proc/sysvipc/shm")
	sem, _ := os.ReadFile("/proc/sysvipc/sem")
	for _, line := range strings.Split(string(shm)+string(sem), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == itoaKey(k) || f[0] == itoaKey(k+1)) {
			t.Fatalf("left behind: %s", line)
		}
	}
}

func itoaKey(k dada.Key) string {
	var b []byte
	n := int64(k)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// TestDadaFlagValues checks that bad values are refused with a message
// naming the flag (exit 2), before any ring is touched, and that errors
// from the library get the command that fixes them.
func TestDadaFlagValues(t *testing.T) {
	hf := filepath.Join(t.TempDir(), "h.txt")
	if err := os.WriteFile(hf, []byte("HDR_SIZE 4096\nNBIT 8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"write", "-r", "-5", hf}, "-r -5: the data rate must be a positive number of MiB/s, or 0"},
		{[]string{"write", "-R", "-1", hf}, "-R -1: the data rate must be a positive number of MB/s"},
		{[]string{"write", "-b", "-5", hf}, "-b -5: the number of bytes to write must be 0 or more"},
		{[]string{"write", "-c", "xy", hf}, `-c "xy": give one fill character`},
		// the option parser or checkMonitorFlags (NewTicker panicked)
		{[]string{"monitor", "-i", "0"}, "must be positive"},
		{[]string{"monitor", "-i", "-1s"}, "must be positive"},
		{[]string{"monitor", "-n", "-1"}, "-n -1: the number of lines must be 0"},
		{[]string{"send", "-c", "127.0.0.1", "-buffers", "-1"}, "-buffers -1: give a positive number of source buffers"},
		// a bad value is named, not taken for a missing one (-b -5 was
		// "as fast as possible (-r 0) needs the size with -b")
		{[]string{"send", "--udp", "-b", "-5"}, "-b -5: the number of bytes to send must be 0 or more"},
		{[]string{"send", "--udp", "-c", "127.0.0.1", "-b", "-5"}, "-b -5: the number of bytes to send must be 0 or more"},
		{[]string{"send", "-c", "127.0.0.1", "-wait", "1ms", "-r", "100", "-b", "-5"}, "-b -5: the number of bytes to send must be 0 or more"},
		{[]string{"send", "--udp", "-c", "127.0.0.1", "-r", "-5"}, "-r -5: the data rate must be a positive number of MiB/s, or 0"},
		{[]string{"send", "--udp", "-c", "127.0.0.1", "-g", "-1", "-b", "4096"}, "-g -1: the data rate must be a positive number of Gb/s"},
		{[]string{"send", "--udp", "-c", "127.0.0.1", "-r", "1", "-t", "-1"}, "-t -1: the time to send must be 0 or more seconds"},
		{[]string{"send", "--udp", "-c", "127.0.0.1", "-loss", "1.5"}, "-loss 1.5: the probability must be between 0 and 1"},
		{[]string{"send", "--udp", "-c", "127.0.0.1", "-reorder", "-0.1"}, "-reorder -0.1: the probability must be between 0 and 1"},
		{[]string{"send", "-c", "127.0.0.1", "-qps", "0"}, "-qps 0: give at least one queue pair"},
		{[]string{"send", "-c", "127.0.0.1", "-send", "-chunk", "0"}, "-chunk 0: the bytes per SEND must be 1 or more"},
		{[]string{"send", "--udp", "-c", "127.0.0.1", "-payload", "0"}, "-payload 0: the payload must be 1 or more bytes per packet"},
		{[]string{"send", "--udp", "-c", "127.0.0.1", "-hdr-len", "0"}, "-hdr-len 0: the header must hold the sequence number"},
		{[]string{"send", "--udp", "-c", "127.0.0.1", "-seq-width", "0"}, "-seq-width 0: the sequence number width must be 4 or 8 bytes"},
		{[]string{"send", "--udp", "-c", "127.0.0.1", "-seq-step", "0"}, "-seq-step 0: the sequence number increment must be 1 or more"},
		{[]string{"recv", "--udp", "-payload", "0"}, "-payload 0: the payload must be 1 or more bytes per packet"},
	} {
		var out, eb bytes.Buffer
		rc := run(append([]string{"dada"}, tc.args...), &out, &eb)
		if rc != 2 || !strings.Contains(eb.String(), tc.want) || strings.Count(eb.String(), "\n") != 1 {
			t.Errorf("softroce dada %v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, rc, eb.String(), tc.want)
		}
	}
}

// TestDadaErrorHints checks that the CLI, not the library, names the
// command that fixes an error.
func TestDadaErrorHints(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the dada tools create system-wide SysV shared memory; run as root (CI does)")
	}
	var k dada.Key
	for {
		k = dada.Key(int32(rand.Uint32N(0x3000)+0x1000)<<16 | int32(rand.Uint32N(0xfff0)+1))
		if _, err := dada.Connect(k, dada.AttachOptions{}); errors.Is(err, dada.ErrNotFound) {
			break
		}
	}
	ks := k.Short()
	_, err := dada.Connect(k, dada.AttachOptions{})
	if strings.Contains(err.Error(), "softroce") {
		t.Errorf("library error names a command: %v", err)
	}
	var eb bytes.Buffer
	if rc := run([]string{"dada", "read", "-k", ks}, &bytes.Buffer{}, &eb); rc != 1 ||
		!strings.Contains(eb.String(), "create the ring first ('softroce dada db -k "+ks+"'") {
		t.Errorf("read of a missing ring: exit %d, %s", rc, eb.String())
	}
	// a size that overflows is refused before anything is created
	eb.Reset()
	if rc := run([]string{"dada", "db", "-k", ks, "-b", "18446744073709551615"}, &bytes.Buffer{}, &eb); rc != 1 ||
		!strings.Contains(eb.String(), "overflows 64 bits") {
		t.Errorf("db -b 2^64-1: exit %d, %s", rc, eb.String())
	}
	if rc := run([]string{"dada", "db", "-k", ks, "-n", "2", "-b", "4096"}, &bytes.Buffer{}, &bytes.Buffer{}); rc != 0 {
		t.Fatal("dada db failed")
	}
	defer dada.Destroy(k)
	_, err = dada.Create(dada.Config{Key: k, NBufs: 2, BufSize: 4096})
	if err == nil || strings.Contains(err.Error(), "softroce") {
		t.Errorf("library error names a command: %v", err)
	}
	eb.Reset()
	if rc := run([]string{"dada", "db", "-k", ks}, &bytes.Buffer{}, &eb); rc != 1 ||
		!strings.Contains(eb.String(), "destroy it first or choose another key ('softroce dada db -d -k "+ks+"')") || strings.Count(eb.String(), "softroce dada db") != 2 {
		t.Errorf("creating twice: exit %d, %s", rc, eb.String())
	}
}

// TestCheckMonitorFlags checks dada monitor's own check of -i and -n, which
// guards time.NewTicker whatever the option parser lets through.
func TestCheckMonitorFlags(t *testing.T) {
	for _, tc := range []struct {
		i  time.Duration
		n  int
		ok bool
	}{{time.Second, 0, true}, {time.Millisecond, 3, true}, {0, 0, false}, {-time.Second, 0, false}, {time.Second, -1, false}} {
		if err := checkMonitorFlags(tc.i, tc.n); (err == nil) != tc.ok {
			t.Errorf("checkMonitorFlags(%v, %d) = %v", tc.i, tc.n, err)
		}
	}
}
