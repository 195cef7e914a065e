package verbs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/softroce/softroce/wire"
)

// TestQueryDeviceRxeLimits pins what QueryDevice and QueryPort report to
// rxe's values (ibv_devinfo -v on a kernel rxe device, minus the
// fast-registration capability softroce lacks), written out here as plain
// numbers so that renaming a limit in params.go cannot change one.
func TestQueryDeviceRxeLimits(t *testing.T) {
	_, b := newPair(t, pairOpts{bufSize: 64})
	got := b.dev.QueryDevice()
	got.NodeGUID, got.SysImageGUID = 0, 0
	want := DeviceAttr{
		FWVer: "0.0.0", MaxMRSize: ^uint64(0), PageSizeCap: 0xfffff000, VendorID: 0xFFFFFF,
		MaxQP: 1048560, MaxQPWR: 1048576, DeviceCapFlags: 0x01223c76 &^ (1 << 21),
		MaxSGE: 32, MaxSGERd: 32, MaxCQ: 1048576, MaxCQE: 32767, MaxMR: 524287, MaxPD: 1048576,
		MaxQPRdAtom: 128, MaxResRdAtom: 258048, MaxQPInitRdAtom: 128, AtomicCap: 1,
		MaxMcastGrp: 8192, MaxMcastQPAttach: 56, MaxTotalMcastQPAttach: 458752,
		MaxAH: 32767, MaxSRQ: 917503, MaxSRQWR: 1048576, MaxSRQSGE: 27, MaxPKeys: 64,
		LocalCAAckDelay: 15, PhysPortCnt: 1, MaxInlineData: 512, MaxMsgSz: 1 << 31, MaxMW: 524288,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("QueryDevice (-rxe +got):\n%s", d)
	}
	port, err := b.dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	port.ActiveMTU = 0
	wantPort := PortAttr{State: PortActive, MaxMTU: wire.MTU4096, GIDTblLen: 1024, PortCapFlags: 1 << 16,
		MaxMsgSz: 1 << 31, PKeyTblLen: 1, LinkLayer: 2, ActiveSpeed: 1, ActiveWidth: 1, PhysState: 5}
	if d := cmp.Diff(wantPort, port); d != "" {
		t.Errorf("QueryPort (-rxe +got):\n%s", d)
	}
}
