package wire

import "testing"

// ICRCVectorPayloads returns the UDP payloads (BTH through ICRC) of the
// ICRC test vectors, as fuzz seeds for the external tests.
func ICRCVectorPayloads(t testing.TB) [][]byte {
	var out [][]byte
	for _, v := range icrcVectors {
		b := unhex(t, v.hex)
		ihl := 20
		if b[0]>>4 == 6 {
			ihl = 40
		}
		out = append(out, b[ihl+8:])
	}
	return out
}
