package oob

import (
	"testing"
)

func FuzzParsePingpongDest(f *testing.F) {
	for _, tc := range pingpongCaptures {
		c := readCapture(f, tc.name)
		f.Add(c.turns[0].data)
		f.Add(c.turns[1].data)
	}
	f.Add([]byte("0:1:2:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePingpongDest(b)
		if err != nil {
			return
		}
		enc := d.Append(nil)
		if len(enc) != PingpongMsgLen {
			t.Fatalf("encoding of %+v is %d bytes", d, len(enc))
		}
		d2, err := ParsePingpongDest(enc)
		if err != nil || d2 != d {
			t.Fatalf("re-parse %+v %v, want %+v", d2, err, d)
		}
	})
}

func FuzzParsePerftestDest(f *testing.F) {
	for _, tc := range perftestCaptures {
		c := readCapture(f, tc.name)
		s := c.stream(true)
		f.Add(s[26 : 26+PerftestDestGIDLen])
	}
	f.Add((&PerftestDest{QPN: 1}).Append(nil, false))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePerftestDest(b)
		if err != nil {
			return
		}
		for _, withGID := range []bool{true, false} {
			enc := d.Append(nil, withGID)
			d2, err := ParsePerftestDest(enc)
			if !withGID {
				d2.GID = d.GID
			}
			if err != nil || d2 != d {
				t.Fatalf("re-parse (gid %v) %+v %v, want %+v", withGID, d2, err, d)
			}
		}
	})
}

func FuzzParseRDMAInfo(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		i, err := ParseRDMAInfo(b)
		if err != nil {
			return
		}
		if string(i.Append(nil)) != string(b) {
			t.Fatal("round trip")
		}
	})
}
