package mem_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/softroce/softroce/mem"
)

// tableFor builds the callback table of a provider owning buf at base,
// with the trailing context entries set or left nil.
func tableFor(name string, base uint64, buf []byte, withCtx bool, gets, puts *atomic.Int32, seen *atomic.Value) mem.ClientFuncs {
	f := mem.ClientFuncs{
		Name: name,
		Acquire: func(req mem.Request) (mem.ClientContext, error) {
			seen.Store(privBox{req.PrivateData})
			if req.Desc != nil || req.Addr < base || req.End() > base+uint64(len(buf)) {
				return nil, mem.Declinef(mem.NotMine, "")
			}
			return req.Addr - base, nil
		},
		GetPages: func(cc mem.ClientContext, write bool, core mem.CoreContext) error { return nil },
	}
	f.Map = func(cc mem.ClientContext) ([]byte, error) {
		off := cc.(uint64)
		return buf[off : off+16], nil
	}
	if withCtx {
		f.GetContextPrivateData = func(peer uint64) any { gets.Add(1); return peer * 10 }
		f.PutContextPrivateData = func(any) { puts.Add(1) }
		f.Version = "2.1"
	}
	return f
}

func TestFuncProvider(t *testing.T) {
	for _, withCtx := range []bool{false, true} {
		var gets, puts atomic.Int32
		var seen atomic.Value
		buf := make([]byte, 64)
		p, err := mem.NewFuncProvider(tableFor("tbl", 0x9000, buf, withCtx, &gets, &puts, &seen))
		if err != nil {
			t.Fatal(err)
		}
		wantCaps := mem.Caps(0)
		if withCtx {
			wantCaps = mem.CapContext | mem.CapVersion
		}
		if c := mem.CapabilitiesOf(p); c != wantCaps {
			t.Fatalf("withCtx=%v: caps %v, want %v", withCtx, c, wantCaps)
		}
		g := mem.NewRegistry(mem.Options{})
		g.Register(p)
		pc := g.OpenContext(4)
		r := mustRegister(t, g, mem.Request{Addr: 0x9008, Length: 16, Write: true, PeerContext: pc})
		if _, err := r.WriteAt([]byte("superset"), 0); err != nil {
			t.Fatal(err)
		}
		if string(buf[8:16]) != "superset" {
			t.Fatalf("buf %q", buf)
		}
		if r.PageSize() != 4096 {
			t.Fatalf("default page size %d", r.PageSize())
		}
		r.Deregister()
		pc.Close()
		got := seen.Load().(privBox).v
		if withCtx && (got != uint64(40) || gets.Load() != 1 || puts.Load() != 1) {
			t.Fatalf("private data %v gets %d puts %d", got, gets.Load(), puts.Load())
		}
		if !withCtx && got != nil {
			t.Fatalf("private data %v without the context entries", got)
		}
	}
}

func TestFuncProviderIncomplete(t *testing.T) {
	var gets, puts atomic.Int32
	var seen atomic.Value
	f := tableFor("x", 0, make([]byte, 16), true, &gets, &puts, &seen)
	f.PutContextPrivateData = nil
	if _, err := mem.NewFuncProvider(f); !errors.Is(err, mem.ErrIncompleteFuncs) {
		t.Fatalf("half a pair: %v", err)
	}
	_, err := mem.NewFuncProvider(mem.ClientFuncs{Name: "y"})
	if !errors.Is(err, mem.ErrIncompleteFuncs) || !strings.Contains(err.Error(), "Acquire, GetPages, Map") {
		t.Fatalf("empty table: %v", err)
	}
}
