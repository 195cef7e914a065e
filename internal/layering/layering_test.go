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
	"clock":         {"wire", "link", "verbs", "cm", "mem", "dada", "capture", "pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"wire":          {"link", "verbs", "cm", "mem", "dada", "capture", "pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"link":          {"verbs", "cm", "mem", "dada", "capture", "pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"mem":           {"link", "verbs", "cm", "dada", "capture", "pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"dada":          {"wire", "link", "verbs", "cm", "mem", "capture", "pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"internal/sysv": {"wire", "link", "verbs", "cm", "mem", "dada", "capture", "pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"verbs":         {"cm", "rsocket", "dada", "pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"cm":            {"rsocket", "dada", "pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"capture":       {"verbs", "cm", "dada", "pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	// rsockets sit beside the pipeline, over cm and verbs.
	"rsocket":  {"pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	"pipeline": {"rsocket", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	// Spoofed MADs for the cm and tool tests: the link and the wire only.
	"internal/spooftest": {"verbs", "cm", "mem", "dada", "capture", "pipeline", "tools", "internal/tools", "internal/toolkit", "internal/tooltest", "internal/cli", "cmd"},
	// The tool families (tools/perftest, a library too, and the command-line
	// only internal/tools/...) and their shared internals sit between the
	// libraries and the command table; the grammar (internal/cli) is stdlib only.
	"internal/toolkit":  {"tools", "internal/tools", "internal/tooltest", "cmd"},
	"internal/tooltest": {"tools", "internal/tools", "cmd"},
	"tools":             {"internal/tools", "internal/tooltest", "cmd"},
	"internal/tools":    {"internal/tooltest", "cmd"},
	"cmd":               {"internal/tooltest"},
}

// stdlibOnly packages may import nothing outside the standard library.
// internal/speedtable measures the built binary from outside.
var stdlibOnly = []string{"clock", "wire", "internal/cli", "internal/speedtable"}

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

// verbsBelow are the only project packages verbs (the API and the
// transport under it) imports: it sits directly above link.
var verbsBelow = []string{"clock", "wire", "link", "mem"}

// TestVerbsAboveLink checks that verbs' code imports no project package
// but wire, link (and its endpoints) and mem, and that no package
// internal/engine (the transport's old home, now verbs' own files) comes
// back.
func TestVerbsAboveLink(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-json=ImportPath,Imports", mod+"/...").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	sawVerbs := false
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel, _ := strings.CutPrefix(p.ImportPath, mod+"/")
		if rel == "internal/engine" || strings.HasPrefix(rel, "internal/engine/") {
			t.Errorf("package %s exists; the transport lives in package verbs", rel)
		}
		if rel != "verbs" {
			continue
		}
		sawVerbs = true
		for _, d := range p.Imports {
			drel, ok := strings.CutPrefix(d, mod+"/")
			if !ok {
				continue
			}
			allowed := false
			for _, b := range verbsBelow {
				if drel == b || strings.HasPrefix(drel, b+"/") {
					allowed = true
				}
			}
			if !allowed {
				t.Errorf("verbs imports %s; it may import only %v", drel, verbsBelow)
			}
		}
	}
	if !sawVerbs {
		t.Error("go list did not list package verbs")
	}
}
