package logstore

import "testing"

// A seal decodes only as written, and bytes that are not one are refused
// without a panic.
func FuzzDecodeSeal(f *testing.F) {
	f.Add(seal{lastIndex: 40, snapIndex: 20, term: 3, vote: 2, commit: 39}.encode())
	f.Add([]byte(sealMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSeal(b)
		if err != nil {
			return
		}
		if got, err := decodeSeal(s.encode()); err != nil || got != s {
			t.Fatalf("seal %+v does not round-trip: %+v, %v", s, got, err)
		}
	})
}
