package verbs

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// api is the public API's shape: each type declared in verbs (a struct or
// a named type, never an alias) with the methods go doc must show for it.
var api = map[string][]string{
	// The objects.
	"Device":      {"ActiveMTU", "AllocPD", "AsyncEvents", "Clock", "Close", "CreateCQ", "CreateCompChannel", "Done", "GIDs", "GetAsyncEvent", "LocalAddr", "MemoryRegistry", "Name", "QueryDevice", "QueryGID", "QueryPKey", "QueryPort", "Stats"},
	"PD":          {"AllocMW", "CreateAH", "CreateGSIQP", "CreateQP", "CreateSRQ", "Dealloc", "Device", "Handle", "RegDmabufMR", "RegMR", "RegMem", "RegRegion"},
	"MR":          {"Access", "Addr", "Bytes", "Deregister", "Invalidate", "LKey", "Len", "PD", "RKey", "Region", "Rereg", "Revalidate", "Valid"},
	"MW":          {"Bound", "Dealloc", "PD", "RKey", "Type"},
	"CQ":          {"AckEvents", "CQE", "Context", "Destroy", "Len", "Poll", "ReqNotify", "Resize"},
	"CompChannel": {"C", "GetCQEvent"},
	"QP":          {"AttachMcast", "BindMW", "Context", "Destroy", "DetachMcast", "Device", "Modify", "PostRecv", "PostSend", "QPN", "Query", "SourcePort", "State", "Type"},
	"SRQ":         {"Destroy", "Modify", "PostRecv", "Query"},
	"AH":          {"Attr", "Destroy"},
	"Error":       {"Error", "Unwrap"},
	// The structs that carry them and the plain data structs.
	"SendWR": nil, "MWBind": nil, "MWBindInfo": nil, "QPInitAttr": nil, "AsyncEvent": nil,
	"Config": nil, "Stats": nil, "WC": nil, "SGE": nil, "RecvWR": nil, "GlobalRoute": nil,
	"AHAttr": nil, "QPCap": nil, "QPAttr": nil, "DeviceAttr": nil, "PortAttr": nil, "SRQAttr": nil,
	// The enumerations and flag sets.
	"MWType": {"String"}, "QPType": {"String"}, "QPState": {"String"}, "Access": nil,
	"WCStatus": {"String"}, "WCOpcode": {"String"}, "WCFlags": nil, "WROpcode": {"String"},
	"SendFlags": nil, "GID": {"Addr", "String"}, "AttrMask": nil, "EventType": {"String"},
	"PortState": nil, "SRQAttrMask": nil,
}

// TestAPIDeclared checks what go doc shows: the objects, the structs and
// the enumerations are declared in verbs (not aliases), each has at least
// the methods of api, and every exported name and method has its own doc
// comment.
func TestAPIDeclared(t *testing.T) {
	fset := token.NewFileSet()
	//lint:ignore SA1019 one directory, no build tags in verbs' non-test files
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	files := make([]*ast.File, 0)
	for _, f := range pkgs["verbs"].Files {
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/softroce/softroce/verbs")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]*doc.Type{}
	for _, ty := range p.Types {
		declared[ty.Name] = ty
		if ty.Doc == "" {
			t.Errorf("type %s has no doc comment", ty.Name)
		}
		for _, f := range append(ty.Methods, ty.Funcs...) {
			if f.Doc == "" {
				t.Errorf("%s.%s has no doc comment", ty.Name, f.Name)
			}
		}
	}
	for _, f := range p.Funcs {
		if f.Doc == "" {
			t.Errorf("func %s has no doc comment", f.Name)
		}
	}
	for name, methods := range api {
		ty := declared[name]
		if ty == nil {
			t.Errorf("type %s is not declared in verbs", name)
			continue
		}
		if ty.Decl.Specs[0].(*ast.TypeSpec).Assign.IsValid() {
			t.Errorf("type %s is an alias; want a type declared in verbs", name)
		}
		var have []string
		for _, m := range ty.Methods {
			have = append(have, m.Name)
		}
		for _, m := range methods {
			if !slices.Contains(have, m) {
				t.Errorf("go doc shows no method %s.%s", name, m)
			}
		}
	}
	for _, name := range []string{"MWType", "QPType", "QPState", "Access", "WCStatus", "WCOpcode", "WCFlags", "WROpcode", "SendFlags", "AttrMask", "EventType", "PortState", "SRQAttrMask"} {
		if ty := declared[name]; ty != nil && len(ty.Consts) == 0 {
			t.Errorf("go doc lists no constants under %s", name)
		}
	}
}
