package capitest

import "testing"

// TestRsocketCompat runs testdata/rs_compat.c: librdmacm's rsockets
// behaviour programs rely on. A signal whose handler does not restart
// calls ends a blocking rrecv, raccept and rpoll with EINTR, also when it
// lands while the library works between the call's waits; rconnect
// called again answers EINPROGRESS while connecting and 0 once connected;
// rclose of a socket still connecting returns at once rather than after
// the connect's timeout.
func TestRsocketCompat(t *testing.T) {
	runC(t, "rs_compat.c", 6)
}
