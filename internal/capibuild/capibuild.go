// Package capibuild builds and locates softroce's C library (package capi):
// one file with SONAME libibverbs.so.1, and the links libibverbs.so,
// librdmacm.so.1 and librdmacm.so to it. `go run ./capi/install` and the
// library's tests use it; `softroce exec` finds the installed library here.
package capibuild

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Lib is the library's file name; Links are the names that point to it.
const Lib = "libibverbs.so.1"

// Links are the other names programs load the library by.
var Links = []string{"libibverbs.so", "librdmacm.so.1", "librdmacm.so"}

// EnvDir overrides where the library is installed and looked for.
const EnvDir = "SOFTROCE_LIB"

// ErrMissing is wrapped by Check's error when a build requirement is absent.
var ErrMissing = errors.New("missing build requirement")

// Dir returns where the library is installed: $SOFTROCE_LIB, else
// ~/.local/lib/softroce.
func Dir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory for the library (set %s): %w", EnvDir, err)
	}
	return filepath.Join(home, ".local", "lib", "softroce"), nil
}

// Installed reports whether dir holds the library.
func Installed(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, Lib))
	return err == nil
}

// Check returns nil when the library can be built here, else one line
// saying what to install.
func Check() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: the C library is built on Linux only", ErrMissing)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(strings.Fields(cc)[0]); err != nil {
		return fmt.Errorf("%w: no C compiler (%s): apt-get install gcc libibverbs-dev librdmacm-dev", ErrMissing, cc)
	}
	for _, h := range []string{"infiniband/verbs.h", "rdma/rdma_cma.h"} {
		cmd := exec.Command(strings.Fields(cc)[0], "-E", "-x", "c", "-")
		cmd.Stdin = strings.NewReader("#include <" + h + ">\n")
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%w: no <%s>: apt-get install libibverbs-dev librdmacm-dev", ErrMissing, h)
		}
	}
	return nil
}

// ModuleRoot returns the softroce module's directory (where go.mod is),
// from the working directory or, failing that, this source file's place.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err == nil {
		if m := strings.TrimSpace(string(out)); m != "" && m != os.DevNull {
			if b, err := os.ReadFile(m); err == nil && strings.Contains(string(b), "module github.com/softroce/softroce\n") {
				return filepath.Dir(m), nil
			}
		}
	}
	_, file, _, ok := runtime.Caller(0)
	if ok {
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if _, err := os.Stat(filepath.Join(root, "capi", "libibverbs.map")); err == nil {
			return filepath.Clean(root), nil
		}
	}
	return "", errors.New("run this inside the softroce source tree (no go.mod of github.com/softroce/softroce here)")
}

// Build compiles the library from the module at root into dir and makes
// its links. Extra arguments go to go build (e.g. -race is not supported;
// -a forces a rebuild).
func Build(root, dir string, extra ...string) error {
	if err := Check(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	script := filepath.Join(root, "capi", "libibverbs.map")
	b, err := os.ReadFile(script)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	// The go command does not track the version script: its hash in the
	// link flags makes an edited script relink.
	ldflags := fmt.Sprintf("-X main.mapVersion=%s -extldflags '-Wl,--version-script=%s -Wl,-soname,%s'",
		hex.EncodeToString(sum[:8]), script, Lib)
	args := append([]string{"build", "-tags", "softroce_capi", "-buildmode=c-shared", "-ldflags", ldflags,
		"-o", filepath.Join(dir, Lib)}, extra...)
	args = append(args, "./capi")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build of the C library failed: %v\n%s", err, out)
	}
	os.Remove(filepath.Join(dir, strings.TrimSuffix(Lib, ".1")+".h"))
	os.Remove(filepath.Join(dir, Lib[:len(Lib)-len(filepath.Ext(Lib))]+".h"))
	for _, l := range Links {
		p := filepath.Join(dir, l)
		os.Remove(p)
		if err := os.Symlink(Lib, p); err != nil {
			return err
		}
	}
	return nil
}
