package verbs

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/engine"
)

// objects are verbs' object types, each over the engine's object of the
// same name.
var objects = map[string][2]reflect.Type{
	"Device":      {reflect.TypeFor[Device](), reflect.TypeFor[engine.Device]()},
	"PD":          {reflect.TypeFor[PD](), reflect.TypeFor[engine.PD]()},
	"MR":          {reflect.TypeFor[MR](), reflect.TypeFor[engine.MR]()},
	"MW":          {reflect.TypeFor[MW](), reflect.TypeFor[engine.MW]()},
	"CQ":          {reflect.TypeFor[CQ](), reflect.TypeFor[engine.CQ]()},
	"CompChannel": {reflect.TypeFor[CompChannel](), reflect.TypeFor[engine.CompChannel]()},
	"QP":          {reflect.TypeFor[QP](), reflect.TypeFor[engine.QP]()},
	"SRQ":         {reflect.TypeFor[SRQ](), reflect.TypeFor[engine.SRQ]()},
	"AH":          {reflect.TypeFor[AH](), reflect.TypeFor[engine.AH]()},
	"FakeClock":   {reflect.TypeFor[FakeClock](), reflect.TypeFor[engine.FakeClock]()},
}

// carriers are the structs that hold objects, declared in verbs with the
// engine's layout.
var carriers = map[string][2]reflect.Type{
	"SendWR":     {reflect.TypeFor[SendWR](), reflect.TypeFor[engine.SendWR]()},
	"MWBind":     {reflect.TypeFor[MWBind](), reflect.TypeFor[engine.MWBind]()},
	"MWBindInfo": {reflect.TypeFor[MWBindInfo](), reflect.TypeFor[engine.MWBindInfo]()},
	"QPInitAttr": {reflect.TypeFor[QPInitAttr](), reflect.TypeFor[engine.QPInitAttr]()},
	"AsyncEvent": {reflect.TypeFor[AsyncEvent](), reflect.TypeFor[engine.AsyncEvent]()},
	// The plain data structs, declared in verbs too.
	"Config":      {reflect.TypeFor[Config](), reflect.TypeFor[engine.Config]()},
	"Stats":       {reflect.TypeFor[Stats](), reflect.TypeFor[engine.Stats]()},
	"WC":          {reflect.TypeFor[WC](), reflect.TypeFor[engine.WC]()},
	"SGE":         {reflect.TypeFor[SGE](), reflect.TypeFor[engine.SGE]()},
	"RecvWR":      {reflect.TypeFor[RecvWR](), reflect.TypeFor[engine.RecvWR]()},
	"GlobalRoute": {reflect.TypeFor[GlobalRoute](), reflect.TypeFor[engine.GlobalRoute]()},
	"AHAttr":      {reflect.TypeFor[AHAttr](), reflect.TypeFor[engine.AHAttr]()},
	"QPCap":       {reflect.TypeFor[QPCap](), reflect.TypeFor[engine.QPCap]()},
	"QPAttr":      {reflect.TypeFor[QPAttr](), reflect.TypeFor[engine.QPAttr]()},
	"DeviceAttr":  {reflect.TypeFor[DeviceAttr](), reflect.TypeFor[engine.DeviceAttr]()},
	"PortAttr":    {reflect.TypeFor[PortAttr](), reflect.TypeFor[engine.PortAttr]()},
	"SRQAttr":     {reflect.TypeFor[SRQAttr](), reflect.TypeFor[engine.SRQAttr]()},
}

// enums are verbs' enumerations and flag sets, each with the engine's
// representation.
var enums = map[string][2]reflect.Type{
	"MWType":      {reflect.TypeFor[MWType](), reflect.TypeFor[engine.MWType]()},
	"QPType":      {reflect.TypeFor[QPType](), reflect.TypeFor[engine.QPType]()},
	"QPState":     {reflect.TypeFor[QPState](), reflect.TypeFor[engine.QPState]()},
	"Access":      {reflect.TypeFor[Access](), reflect.TypeFor[engine.Access]()},
	"WCStatus":    {reflect.TypeFor[WCStatus](), reflect.TypeFor[engine.WCStatus]()},
	"WCOpcode":    {reflect.TypeFor[WCOpcode](), reflect.TypeFor[engine.WCOpcode]()},
	"WCFlags":     {reflect.TypeFor[WCFlags](), reflect.TypeFor[engine.WCFlags]()},
	"WROpcode":    {reflect.TypeFor[WROpcode](), reflect.TypeFor[engine.WROpcode]()},
	"SendFlags":   {reflect.TypeFor[SendFlags](), reflect.TypeFor[engine.SendFlags]()},
	"GID":         {reflect.TypeFor[GID](), reflect.TypeFor[engine.GID]()},
	"AttrMask":    {reflect.TypeFor[AttrMask](), reflect.TypeFor[engine.AttrMask]()},
	"EventType":   {reflect.TypeFor[EventType](), reflect.TypeFor[engine.EventType]()},
	"PortState":   {reflect.TypeFor[PortState](), reflect.TypeFor[engine.PortState]()},
	"SRQAttrMask": {reflect.TypeFor[SRQAttrMask](), reflect.TypeFor[engine.SRQAttrMask]()},
}

// TestAPIDeclared checks what go doc shows: the objects and the structs
// that carry them are declared in verbs (not aliases), every exported
// name and method has its own doc comment, and every exported method of
// the engine's objects has its verbs counterpart.
func TestAPIDeclared(t *testing.T) {
	fset := token.NewFileSet()
	//lint:ignore SA1019 one directory, no build tags in verbs
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
	for name := range mergeKeys(objects, carriers) {
		ty := declared[name]
		if ty == nil {
			t.Errorf("type %s is not declared in verbs", name)
			continue
		}
		spec := ty.Decl.Specs[0].(*ast.TypeSpec)
		if spec.Assign.IsValid() {
			t.Errorf("type %s is an alias; want a type declared in verbs", name)
		}
		if _, ok := spec.Type.(*ast.StructType); !ok {
			t.Errorf("type %s is declared as %T; want a struct", name, spec.Type)
		}
	}
	for name, ts := range enums {
		ty := declared[name]
		if ty == nil {
			t.Errorf("type %s is not declared in verbs", name)
			continue
		}
		if ty.Decl.Specs[0].(*ast.TypeSpec).Assign.IsValid() {
			t.Errorf("type %s is an alias; want a type declared in verbs", name)
		}
		for i := range ts[1].NumMethod() {
			{
				m := ts[1].Method(i).Name
				if _, ok := ts[0].MethodByName(m); !ok {
					t.Errorf("engine's %s has method %s; verbs.%s does not", name, m, name)
				}
			}
		}
	}
	// Every exported constant of the engine has its verbs twin; typed ones
	// are grouped under their type, as go doc lists them.
	consts := map[string]bool{}
	for _, c := range p.Consts {
		for _, n := range c.Names {
			consts[n] = true
		}
	}
	for _, ty := range p.Types {
		for _, c := range ty.Consts {
			for _, n := range c.Names {
				consts[n] = true
			}
		}
	}
	for _, n := range engineConsts(t) {
		if !consts[n] {
			t.Errorf("engine's constant %s has no verbs twin", n)
		}
	}
	for name := range enums {
		if ty := declared[name]; ty != nil && name != "GID" && len(ty.Consts) == 0 {
			t.Errorf("go doc lists no constants under %s", name)
		}
	}
	for name, ts := range objects {
		ty := declared[name]
		if ty == nil {
			continue
		}
		have := map[string]bool{}
		for _, m := range ty.Methods {
			have[m.Name] = true
		}
		e := reflect.PointerTo(ts[1])
		for i := range e.NumMethod() {
			if m := e.Method(i).Name; !have[m] {
				t.Errorf("engine's %s has method %s; verbs.%s does not", name, m, name)
			}
		}
	}
}

func mergeKeys(ms ...map[string][2]reflect.Type) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			out[k] = true
		}
	}
	return out
}

// TestEngineLayout checks that each struct carrying objects has the
// engine's layout field by field (names, offsets, sizes, and the same type
// or verbs' view of the engine's object), which is what lets PostSend and
// AsyncEvents read the caller's memory as the engine's without a copy.
func TestEngineLayout(t *testing.T) {
	view := map[reflect.Type]reflect.Type{}
	for _, ts := range objects {
		if ts[0].Size() != ts[1].Size() || ts[0].NumField() != 1 || ts[0].Field(0).Type != ts[1] {
			t.Errorf("%v is not exactly the engine's %v", ts[0], ts[1])
		}
		view[reflect.PointerTo(ts[0])] = reflect.PointerTo(ts[1])
	}
	for _, ts := range carriers {
		view[ts[0]] = ts[1]
	}
	for _, ts := range enums {
		view[ts[0]] = ts[1]
	}
	var same func(path string, v, e reflect.Type)
	same = func(path string, v, e reflect.Type) {
		if v == e {
			return
		}
		if view[v] != e {
			if v.Kind() == e.Kind() && (v.Kind() == reflect.Slice || v.Kind() == reflect.Pointer ||
				v.Kind() == reflect.Array && v.Len() == e.Len()) {
				same(path+"[]", v.Elem(), e.Elem())
				return
			}
			t.Errorf("%s: verbs has %v, engine %v", path, v, e)
			return
		}
		if v.Kind() != reflect.Struct {
			if v.Kind() != e.Kind() || v.Size() != e.Size() {
				t.Errorf("%s: verbs %v is a %d-byte %v, engine %v a %d-byte %v", path, v, v.Size(), v.Kind(), e, e.Size(), e.Kind())
			}
			return
		}
		if v.NumField() != e.NumField() || v.Size() != e.Size() || v.Align() != e.Align() {
			t.Errorf("%s: verbs %v has %d fields, %d bytes; engine %v has %d, %d", path, v, v.NumField(), v.Size(), e, e.NumField(), e.Size())
			return
		}
		for i := range v.NumField() {
			fv, fe := v.Field(i), e.Field(i)
			if fv.Name != fe.Name || fv.Offset != fe.Offset {
				t.Errorf("%s field %d: verbs %s at %d, engine %s at %d", path, i, fv.Name, fv.Offset, fe.Name, fe.Offset)
				continue
			}
			same(path+"."+fv.Name, fv.Type, fe.Type)
		}
	}
	for name, ts := range carriers {
		same(name, ts[0], ts[1])
	}
}

// aliasStructs are the aliases of engine structs whose doc comment lists
// their fields (go doc shows an alias's comment, not the engine's fields).
var aliasStructs = map[string]reflect.Type{
	"Error": reflect.TypeFor[Error](),
}

// TestAliasDocFields checks that each struct alias's doc comment lists
// exactly the engine struct's exported fields, in order, so the listing
// go doc shows cannot drift from the type.
func TestAliasDocFields(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "types.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		spec := g.Specs[0].(*ast.TypeSpec)
		rt, ok := aliasStructs[spec.Name.Name]
		if !ok {
			continue
		}
		seen[spec.Name.Name] = true
		var listed []string
		in := false
		for _, line := range strings.Split(g.Doc.Text(), "\n") {
			s := strings.TrimSpace(line)
			switch {
			case s == "struct {":
				in = true
			case s == "}":
				in = false
			case in && s != "" && !strings.HasPrefix(s, "//"):
				names, _, _ := strings.Cut(strings.Fields(s)[0]+" ", " ")
				if strings.HasSuffix(names, ",") { // "A, B  T"
					names = s[:strings.IndexAny(s, "\t")]
				}
				for n := range strings.SplitSeq(names, ",") {
					listed = append(listed, strings.TrimSpace(n))
				}
			}
		}
		var want []string
		for i := range rt.NumField() {
			if fl := rt.Field(i); fl.IsExported() {
				want = append(want, fl.Name)
			}
		}
		if strings.Join(listed, " ") != strings.Join(want, " ") {
			t.Errorf("%s's doc lists fields %v; the type has %v", spec.Name.Name, listed, want)
		}
	}
	for name := range aliasStructs {
		if !seen[name] {
			t.Errorf("%s: no alias declaration with a field listing in types.go", name)
		}
	}
}

// engineConsts returns the names of the engine's exported constants.
func engineConsts(t *testing.T) []string {
	t.Helper()
	//lint:ignore SA1019 one directory, no build tags in the engine's non-test files
	pkgs, err := parser.ParseDir(token.NewFileSet(), "../internal/engine", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range pkgs["engine"].Files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, sp := range g.Specs {
					for _, n := range sp.(*ast.ValueSpec).Names {
						if n.IsExported() {
							out = append(out, n.Name)
						}
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("found no engine constants")
	}
	return out
}
