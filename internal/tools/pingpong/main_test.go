package pingpong

import (
	"testing"

	"github.com/softroce/softroce/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }
