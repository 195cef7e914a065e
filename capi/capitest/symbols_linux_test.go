package capitest

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// symver is a dynamic symbol and its version node.
type symver struct{ name, version string }

// exports returns the default-version symbols a library defines.
func exports(t *testing.T, path string) map[symver]bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	out := map[symver]bool{}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || elf.ST_BIND(s.Info) == elf.STB_LOCAL || (s.HasVersion && s.VersionIndex.IsHidden()) {
			continue
		}
		if s.Name == s.Version { // the version node's own symbol
			continue
		}
		out[symver{s.Name, s.Version}] = true
	}
	return out
}

// imports returns what binary path imports from libibverbs and librdmacm.
func imports(t *testing.T, path string) []symver {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var out []symver
	for _, s := range syms {
		if strings.HasPrefix(s.Library, "libibverbs.so") || strings.HasPrefix(s.Library, "librdmacm.so") ||
			strings.HasPrefix(s.Version, "IBVERBS_") || strings.HasPrefix(s.Version, "RDMACM_") {
			out = append(out, symver{s.Name, s.Version})
		}
	}
	return out
}

// systemLib finds a library the dynamic linker would load (the real one).
func systemLib(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"} {
		p := filepath.Join(dir, name)
		if _, err := elf.Open(p); err == nil {
			return p
		}
	}
	return ""
}

// TestSymbols: every (symbol, version) the stock binaries and the vendor
// providers import from libibverbs/librdmacm is exported, and everything
// the real libraries export is too, so nothing fails to load (Debian's
// binaries bind every import at load time).
func TestSymbols(t *testing.T) {
	needLib(t, "ibv_devinfo", "rping", "ib_write_bw")
	ours := exports(t, filepath.Join(libDir, "libibverbs.so.1"))
	if len(ours) < 200 {
		t.Fatalf("only %d versioned exports", len(ours))
	}
	var users []string
	for _, p := range []string{"ibv_devices", "ibv_devinfo", "ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong",
		"ibv_srq_pingpong", "ibv_xsrq_pingpong", "rping", "ucmatose", "udaddy", "mckey", "rdma_server", "rdma_client",
		"rdma_xserver", "rdma_xclient", "cmtime", "rstream", "riostream", "rcopy", "ib_write_bw", "ib_read_bw",
		"ib_send_bw", "ib_atomic_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat"} {
		if path, err := exec.LookPath(p); err == nil {
			users = append(users, path)
		}
	}
	for _, l := range []string{"libmlx5.so.1", "libefa.so.1"} {
		if p := systemLib(t, l); p != "" {
			users = append(users, p)
		} else {
			missing(t, l+" (apt-get install ibverbs-providers)")
		}
	}
	var lack []string
	checked := 0
	for _, u := range users {
		for _, s := range imports(t, u) {
			checked++
			if !ours[s] {
				lack = append(lack, filepath.Base(u)+": "+s.name+"@"+s.version)
			}
		}
	}
	for _, l := range []string{"libibverbs.so.1", "librdmacm.so.1"} {
		p := systemLib(t, l)
		if p == "" {
			missing(t, l+" (apt-get install libibverbs1 librdmacm1)")
		}
		for s := range exports(t, p) {
			checked++
			if !ours[s] {
				lack = append(lack, l+" exports "+s.name+"@"+s.version)
			}
		}
	}
	// The newest upstream nodes too (rdma-core 60's IBVERBS_1.15 to 1.18
	// and RDMACM_1.4, 1.5), so that newer programs load.
	nodes := map[string]bool{}
	for s := range ours {
		nodes[s.version] = true
	}
	for _, n := range []string{"IBVERBS_1.0", "IBVERBS_1.1", "IBVERBS_1.5", "IBVERBS_1.6", "IBVERBS_1.7", "IBVERBS_1.8",
		"IBVERBS_1.9", "IBVERBS_1.10", "IBVERBS_1.11", "IBVERBS_1.12", "IBVERBS_1.13", "IBVERBS_1.14", "IBVERBS_1.15",
		"IBVERBS_1.16", "IBVERBS_1.17", "IBVERBS_1.18", "IBVERBS_PRIVATE_34", "RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2",
		"RDMACM_1.3", "RDMACM_1.4", "RDMACM_1.5"} {
		if !nodes[n] {
			lack = append(lack, "no symbol at version node "+n)
		}
	}
	sort.Strings(lack)
	if len(lack) > 0 {
		t.Errorf("%d of %d (symbol, version) pairs are not exported:\n%s", len(lack), checked, strings.Join(lack, "\n"))
	}
	t.Logf("%d pairs checked in %d users and the two real libraries", checked, len(users))
}
