package interop

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/capibuild"
	"github.com/softroce/softroce/internal/toolkit"
)

// TestCLibrary runs Debian's stock ibv_rc_pingpong, ib_write_bw and
// ib_read_bw, unmodified, on softroce's C library (softroce exec) against
// the kernel's tools in the guest, in both roles.
func TestCLibrary(t *testing.T) {
	for _, f := range []family{
		pingpong("rc_pingpong", "-c -s 4096", 100, true),
		perftest("write_bw", "", 65536, 200, true),
		perftest("read_bw", "", 65536, 200, true),
	} {
		t.Run(f.name, func(t *testing.T) {
			bothRoles(t, func(t *testing.T, softroceServer bool) {
				need(t, f.smoke)
				if cfg.capiLib == "" {
					t.Fatalf("the C library could not be built: %v", cfg.capiErr)
				}
				g := bootGuest(t, 0)
				t.Setenv(toolkit.StateEnv, filepath.Join(t.TempDir(), "links.json")) // no links
				// The stock program takes the device's flags but not its
				// name: the library's one device is bound to hostIP.
				f.hostTool = fmt.Sprintf("exec -a %s -L %s -- %s", hostIP, cfg.capiLib, f.guestBin)
				f.hostDev = f.guestDev[len("-d rxe0 "):]
				srv, cli := f.endpoints(g, softroceServer)
				f.check(t, runPair(t, srv, cli, f.listen, 120*time.Second))
			})
		})
	}
}

// buildCLibrary builds the C library for TestCLibrary into dir/lib.
func buildCLibrary(dir string) {
	root, err := capibuild.ModuleRoot()
	if err == nil {
		err = capibuild.Build(root, filepath.Join(dir, "lib"))
	}
	if err != nil {
		cfg.capiErr = err
		return
	}
	cfg.capiLib = filepath.Join(dir, "lib")
}
