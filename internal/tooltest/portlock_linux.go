package tooltest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// lockPort reserves TCP port p among this repository's test processes on
// the machine (go test runs packages side by side, each choosing ports
// alone): an exclusive flock on a file named after the port, held until
// the test ends. It reports false when another test holds the port. A
// port taken by one process's listener on one address looked free to the
// other's check, which found it listening before its own server did (a
// stock ibv_uc_pingpong client was refused).
func lockPort(t testing.TB, p int) bool {
	dir := filepath.Join(os.TempDir(), "softroce-test-ports")
	os.Mkdir(dir, 0o700)
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("tcp-%d.lock", p)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return true // no lock files here: the in-process check alone
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close()
		return false
	}
	t.Cleanup(func() { f.Close() })
	return true
}
