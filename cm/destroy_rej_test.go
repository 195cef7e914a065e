package cm

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
)

// TestDestroyREJMessageRejected pins the REJ a passive ID sends when the
// application destroys it before the connection is established, as ib_cm's
// cm_destroy_id and cm_format_rej: in REQ_RCVD the REJ rejects the REQ
// (Message REJected 0); in REP_SENT nothing received is being rejected
// (the ID sent the REP), so the field says "other" (2), not REP (1, which
// is for an active side in REP_RCVD rejecting the REP it got). Reason:
// consumer defined.
func TestDestroyREJMessageRejected(t *testing.T) {
	p, _, sentB := capturePair(t)
	ch, _ := listenAt(t, netip.AddrPortFrom(p.addrB(), 7410))
	for i, tc := range []struct {
		name   string
		accept bool
		want   mad.MsgKind
	}{
		{"req-rcvd", false, mad.MsgREQ},
		{"rep-sent", true, mad.MsgOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := p.addrA() // the REQ as if from A: B's REJ goes over the pipe
			comm := uint32(0x30000 + i)
			p.ab.input(peer, spoofREQ(peer, p.addrB(), 7410, comm))
			ev := expect(t, ch, EventConnectRequest)
			if tc.accept {
				if err := ev.ID.Accept(&ConnParam{QPNum: 0x99}); err != nil {
					t.Fatal(err)
				}
			}
			ev.ID.Destroy()
			var rej *mad.REJ
			waitFor(t, 5*time.Second, "the REJ", func() bool {
				for _, m := range sentB() {
					if r, ok := m.(*mad.REJ); ok && r.RemoteCommID == comm {
						rej = r
						return true
					}
				}
				return false
			})
			if rej.MessageRejected != tc.want || rej.Reason != mad.RejConsumerDefined {
				t.Errorf("REJ: message rejected %d, reason %d; want %d, consumer defined (%d)",
					rej.MessageRejected, rej.Reason, tc.want, mad.RejConsumerDefined)
			}
		})
	}
}
