package layering

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/softroce/softroce"

// forbidden lists, per package prefix, the project packages it must not import
// (directly or indirectly).
var forbidden = map[string][]string{
	"wire":            {"link", "internal/engine", "verbs", "cm", "mem", "dada", "capture", "pipeline", "tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"link":            {"internal/engine", "verbs", "cm", "mem", "dada", "capture", "pipeline", "tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"mem":             {"link", "internal/engine", "verbs", "cm", "dada", "capture", "pipeline", "tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"dada":            {"wire", "link", "internal/engine", "verbs", "cm", "mem", "capture", "pipeline", "tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"internal/sysv":   {"wire", "link", "internal/engine", "verbs", "cm", "mem", "dada", "capture", "pipeline", "tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"internal/engine": {"verbs", "cm", "dada", "pipeline", "tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"verbs":           {"cm", "dada", "pipeline", "tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"cm":              {"dada", "pipeline", "tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"capture":         {"internal/engine", "verbs", "cm", "dada", "pipeline", "tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"pipeline":        {"tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	// The tool families (tools/...) and their shared internals sit between the
	// libraries and the command table; the grammar (internal/cli) is stdlib only.
	"internal/toolkit":  {"tools", "internal/tooltest", "cmd"},
	"internal/tooltest": {"tools", "cmd"},
	"tools":             {"internal/tooltest", "cmd"},
	"cmd":               {"internal/tooltest"},
}

// stdlibOnly packages may import nothing outside the standard library.
var stdlibOnly = []string{"wire", "internal/cli"}

func TestImportDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-deps", "-json=ImportPath,Deps,Standard", mod+"/...").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
			Standard   bool
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel, ok := strings.CutPrefix(p.ImportPath, mod+"/")
		if !ok {
			continue
		}
		for prefix, bad := range forbidden {
			if rel != prefix && !strings.HasPrefix(rel, prefix+"/") {
				continue
			}
			for _, d := range p.Deps {
				drel, ok := strings.CutPrefix(d, mod+"/")
				if !ok {
					continue
				}
				for _, b := range bad {
					if drel == b || strings.HasPrefix(drel, b+"/") {
						t.Errorf("%s imports %s (layering: %s must not depend on %s)", rel, drel, prefix, b)
					}
				}
			}
		}
		for _, s := range stdlibOnly {
			if rel != s {
				continue
			}
			for _, d := range p.Deps {
				if strings.Contains(strings.SplitN(d, "/", 2)[0], ".") {
					t.Errorf("%s must use only the standard library, imports %s", rel, d)
				}
			}
		}
	}
}

// TestEngineBehindVerbs checks that verbs is the API: only verbs (and the
// engine's own packages) import internal/engine directly, in code or in
// tests; everything above reaches the transport through verbs' types.
func TestEngineBehindVerbs(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports", mod+"/...").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	const engine = mod + "/internal/engine"
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.ImportPath == mod+"/verbs" || p.ImportPath == engine || strings.HasPrefix(p.ImportPath, engine+"/") {
			continue
		}
		for _, imps := range [][]string{p.Imports, p.TestImports, p.XTestImports} {
			for _, d := range imps {
				if d == engine || strings.HasPrefix(d, engine+"/") {
					t.Errorf("%s imports %s directly; use package verbs", strings.TrimPrefix(p.ImportPath, mod+"/"), strings.TrimPrefix(d, mod+"/"))
				}
			}
		}
	}
}
