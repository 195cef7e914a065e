package dada

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSyncSegmentBytes checks the raw bytes of a freshly created sync
// segment against the ABI (what dada_db writes), field by field.
func TestSyncSegmentBytes(t *testing.T) {
	for _, nbufs := range []int{2, 4, 8} {
		h := newHDU(t, Config{NBufs: nbufs, BufSize: 4096, NReaders: 3})
		k := h.Key()
		b := h.Data.syncMem
		if len(b) != SyncSize+5*nbufs {
			t.Fatalf("nbufs=%d: sync segment %d bytes, want %d", nbufs, len(b), SyncSize+5*nbufs)
		}
		le := binary.LittleEndian
		got := map[string]uint64{
			"semkey_connect": uint64(le.Uint32(b[0:])),
			"semkey_data[0]": uint64(le.Uint32(b[4:])),
			"semkey_data[7]": uint64(le.Uint32(b[32:])),
			"nbufs":          le.Uint64(b[40:]),
			"bufsz":          le.Uint64(b[48:]),
			"w_state":        uint64(le.Uint32(b[72:])),
			"n_readers":      uint64(le.Uint32(b[248:])),
			"eod[0]":         uint64(b[384]),
			"eod[7]":         uint64(b[391]),
			"on_device_id":   uint64(le.Uint32(b[520:])),
			"count[0]":       uint64(b[528]),
			"shmkey[0]":      uint64(le.Uint32(b[528+nbufs:])),
			"shmkey[last]":   uint64(le.Uint32(b[528+nbufs+4*(nbufs-1):])),
		}
		want := map[string]uint64{
			"semkey_connect": uint64(uint32(k + 0x10000)),
			"semkey_data[0]": uint64(uint32(k + 0x20000)),
			"semkey_data[7]": uint64(uint32(k + 0x90000)),
			"nbufs":          uint64(nbufs),
			"bufsz":          4096,
			"w_state":        0,
			"n_readers":      3,
			"eod[0]":         1,
			"eod[7]":         1,
			"on_device_id":   0xffffffff,
			"count[0]":       0,
			"shmkey[0]":      uint64(uint32(k + 0xa0000)),
			"shmkey[last]":   uint64(uint32(k + Key(10+nbufs-1)*0x10000)),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("nbufs=%d sync segment (-want +got):\n%s", nbufs, diff)
		}
		// only n_readers reader sets exist, but all 8 keys are stored
		if len(h.Data.semData) != 3 {
			t.Fatalf("%d reader sets", len(h.Data.semData))
		}
		h.Destroy()
	}
}

func TestLockAndPage(t *testing.T) {
	h := newHDU(t, Config{NBufs: 2, BufSize: 8192, Lock: true, Page: true})
	if h.Data.Block(1)[8191] != 0 {
		t.Fatal("paged block is not zero")
	}
}
