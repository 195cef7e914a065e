package dada

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestAgainstPsrdadaTools runs psrdada's own dada_db, dada_junkdb and
// dada_dbnull against this package's rings, writer and reader. It runs only
// when those programs are on PATH (psrdada is never vendored here).
func TestAgainstPsrdadaTools(t *testing.T) {
	needIPC(t)
	tools := map[string]string{}
	for _, n := range []string{"dada_db", "dada_junkdb", "dada_dbnull"} {
		p, err := exec.LookPath(n)
		if err != nil {
			t.Skipf("psrdada's %s is not on PATH; install psrdada 1.1 to run this compatibility test", n)
		}
		tools[n] = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(name string, args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, tools[name], args...).CombinedOutput()
		t.Logf("%s %v:\n%s", name, args, out)
		return string(out), err
	}
	const bufsz = 1 << 20
	k := randomKey(t)
	noStrays(t, k)
	ks := k.Short()

	// 1. a ring made by dada_db, our writer, dada_dbnull reading
	if _, err := run("dada_db", "-k", ks, "-n", "4", "-b", strconv.Itoa(bufsz)); err != nil {
		t.Fatal(err)
	}
	h, err := Connect(k, AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := run("dada_dbnull", "-k", ks, "-s", "-z"); done <- err }()
	w, err := h.OpenWriter(ctx, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hdr := testHeader(t)
	hdr.SetInt("FILE_SIZE", 3*bufsz+1000)
	w.WriteHeader(hdr)
	w.Write(pattern(3*bufsz+1000, 4))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("dada_dbnull on our transfer: %v", err)
	}

	// 2. dada_junkdb writing, our reader reading
	rh, err := Connect(k, AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := rh.OpenReader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hf := filepath.Join(t.TempDir(), "header.dada")
	if err := os.WriteFile(hf, []byte(testHeader(t).String()), 0o644); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := run("dada_junkdb", "-k", ks, "-b", strconv.Itoa(2*bufsz+77), "-c", "Z", "-r", "64", hf)
		done <- err
	}()
	got, err := r.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := got.Get("SOURCE"); s != "J0437-4715" {
		t.Errorf("header from dada_junkdb: SOURCE %q", s)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("dada_junkdb: %v", err)
	}
	if len(data) != 2*bufsz+77 || !bytes.Equal(data, bytes.Repeat([]byte("Z"), len(data))) {
		t.Fatalf("read %d bytes from dada_junkdb, want %d of 'Z'", len(data), 2*bufsz+77)
	}
	r.Close()
	rh.Detach()
	h.Detach()

	// 3. our ring destroyed by dada_db -d
	if _, err := run("dada_db", "-d", "-k", ks); err != nil {
		t.Fatal(err)
	}
	h2, err := Create(Config{Key: k, NBufs: 2, BufSize: 8192, NReaders: 2})
	if err != nil {
		t.Fatal(err)
	}
	h2.Detach()
	if _, err := run("dada_db", "-d", "-k", ks); err != nil {
		t.Fatalf("dada_db -d on our ring: %v", err)
	}
	if left := ipcWith(t, k); len(left) != 0 {
		t.Fatalf("dada_db -d left %v", left)
	}
}
