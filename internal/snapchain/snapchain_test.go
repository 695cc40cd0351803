package snapchain

import (
	"bytes"
	"errors"
	"testing"
)

func TestSplitReturnsWhatJoinJoined(t *testing.T) {
	for _, parts := range [][][]byte{
		{[]byte("base")},
		{[]byte("base"), {}, []byte("delta two")},
		{{}, []byte(Magic), []byte("12345678")}, // parts that look like framing
	} {
		data := Join(parts...)
		if got := uint64(len(data)); got != Size(sizes(parts)...) {
			t.Errorf("Join made %d bytes, Size says %d", got, Size(sizes(parts)...))
		}
		got, err := Split(data)
		if err != nil {
			t.Fatalf("Split(Join(%q)): %v", parts, err)
		}
		if len(got) != len(parts) {
			t.Fatalf("Split gave %d parts, want %d", len(got), len(parts))
		}
		for i := range parts {
			if !bytes.Equal(got[i], parts[i]) {
				t.Errorf("part %d = %q, want %q", i, got[i], parts[i])
			}
		}
	}
}

func TestSplitRejectsMalformedChains(t *testing.T) {
	good := Join([]byte("base"), []byte("delta"))
	for name, data := range map[string][]byte{
		"no magic":        []byte("RLM\x01whatever"),
		"magic alone":     []byte(Magic),
		"short trailer":   append([]byte(Magic), 1, 2, 3),
		"length too long": append(append([]byte(Magic), "ab"...), Trailer(3)...),
		"bytes before":    append(append([]byte(Magic), 'x'), Join([]byte("p"))[len(Magic):]...),
		"truncated":       good[:len(good)-1],
	} {
		if _, err := Split(data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Split = %v, want ErrCorrupt", name, err)
		}
	}
}

func FuzzSplit(f *testing.F) {
	f.Add(Join([]byte("base"), []byte("delta")))
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		parts, err := Split(data)
		if err != nil {
			return
		}
		if !bytes.Equal(Join(parts...), data) {
			t.Fatalf("Join(Split(%q)) differs", data)
		}
	})
}

func sizes(parts [][]byte) []uint64 {
	var s []uint64
	for _, p := range parts {
		s = append(s, uint64(len(p)))
	}
	return s
}
