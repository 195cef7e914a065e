package main

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	os.WriteFile(hf, []byte("HDR_SIZE 4096\nSOURCE test\nNBIT 8\nUTC_START 2026-01-01-00:00:00\n"), 0o644)
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	for _, extra := range [][]string{nil, {"-z"}} {
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
