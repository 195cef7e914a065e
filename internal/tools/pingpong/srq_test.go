package pingpong

import (
	"bytes"
	"strings"
	"testing"

	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// TestPingpongBufferFill: rdma-core's ibv_srq_pingpong fills its buffer
// with zeros (only the rc/uc/ud tools use 0x7b), so softroce's SRQ client
// sends zeros and its validating server accepts the zeros the real client
// sends, and refuses 0x7b.
func TestPingpongBufferFill(t *testing.T) {
	da, db, err := verbs.OpenPipe(pipe.Config{MTU: 4200}, pipe.Config{MTU: 4200})
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	defer db.Close()
	for _, tc := range []struct {
		kind qpKind
		fill byte
	}{{kindRC, 0x7b}, {kindUC, 0x7b}, {kindUD, 0x7b}, {kindSRQ, 0}} {
		const size = 3 * pageSize
		c := &config{kind: tc.kind, size: size, mtu: 1024, rxDepth: 16, numQP: 2, iters: 1, gidx: 1, ibPort: 1, server: "x", validate: true}
		if tc.kind == kindUD {
			c.size = 1024
		}
		p := &pingCtx{c: c, dev: da, flags: verbs.SendSignaled, qpIndex: map[uint32]int{}}
		if err := p.init(); err != nil {
			t.Fatal(err)
		}
		p.fillPattern()
		msg := p.payload()[:c.size]
		want := bytes.Repeat([]byte{tc.fill}, c.size)
		for i := 0; i < len(want); i += pageSize {
			want[i] = 0
		}
		if !bytes.Equal(msg, want) {
			t.Errorf("kind %d: the client's message is not the tool's image (fill 0x%02x)", tc.kind, tc.fill)
		}
		var out strings.Builder
		if p.checkPattern(&out) {
			t.Errorf("kind %d: the tool's own image fails validation: %s", tc.kind, out.String())
		}
		if tc.kind == kindSRQ {
			for i := range msg {
				msg[i] = 0x7b // what softroce's SRQ client used to send
			}
			for i := 0; i < len(msg); i += pageSize {
				msg[i] = 0
			}
			out.Reset()
			if !p.checkPattern(&out) || !strings.Contains(out.String(), "want 0x00") {
				t.Errorf("SRQ server accepted a 0x7b fill: %q", out.String())
			}
		}
	}
}
