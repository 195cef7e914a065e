package verbs

import "testing"

// TestIBSpeed: Ethernet speeds to the InfiniBand speed and width rxe
// reports (the kernel's ib_get_eth_speed), at each boundary.
func TestIBSpeed(t *testing.T) {
	for _, c := range []struct {
		mbps         int
		speed, width uint8
	}{
		{0, 1, 1}, {100, 1, 1}, {1000, 1, 1},
		{1001, 8, 1}, {10000, 8, 1},
		{10001, 2, 2}, {20000, 2, 2},
		{20001, 32, 1}, {25000, 32, 1},
		{25001, 8, 2}, {40000, 8, 2},
		{40001, 32, 2}, {100000, 32, 2}, {400000, 32, 2},
	} {
		if s, w := ibSpeed(c.mbps); s != c.speed || w != c.width {
			t.Errorf("ibSpeed(%d) = %d, %d; want %d, %d", c.mbps, s, w, c.speed, c.width)
		}
	}
}
