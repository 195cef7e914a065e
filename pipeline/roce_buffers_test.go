package pipeline

import (
	"errors"
	"testing"

	"github.com/softroce/softroce/dada"
)

// TestRoCESendBuffersBound: a work request ID carries the source buffer's
// number in its low byte, 0xff meaning the relayed ring, so SendRoCE takes
// at most 254 buffers and refuses more with ErrConfig.
func TestRoCESendBuffersBound(t *testing.T) {
	for _, tc := range []struct {
		buffers int
		ok      bool
	}{{0, true}, {1, true}, {254, true}, {255, false}, {256, false}, {1 << 20, false}} {
		s := &roceSender{cfg: RoCESendConfig{Header: dada.NewHeader(4096), Buffers: tc.buffers}}
		err := s.openSource()
		if tc.ok && err != nil {
			t.Errorf("Buffers %d: %v", tc.buffers, err)
		}
		if !tc.ok && !errors.Is(err, ErrConfig) {
			t.Errorf("Buffers %d: %v, want ErrConfig", tc.buffers, err)
		}
	}
}
