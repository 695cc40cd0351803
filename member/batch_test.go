package member

import (
	"strings"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

func proposal(key string, withNext bool) Proposal {
	return Proposal{Env: fsm.Envelope{Cmd: fsm.Command{Op: fsm.OpRelease, Key: key}}, WithNext: withNext}
}

// An entry takes at most MaxBatch commands and MaxEntryBytes of encoding,
// and never splits a handoff (a Release or Expire and the Grant bound to
// it): split, the Grant could commit without the command that frees its
// key, and the state machine would reject it.
func TestBatchesNeverSplitAHandoff(t *testing.T) {
	q := []Proposal{proposal("a", false), proposal("b", true), proposal("b", false), proposal("c", false)}
	for _, c := range []struct {
		max  int
		want []int
	}{
		{1, []int{1, 2, 1}}, // the group of two goes whole even past the limit
		{2, []int{1, 2, 1}},
		{3, []int{3, 1}},
		{4, []int{4}},
	} {
		var got []int
		for rest := q; len(rest) > 0; {
			n := batchLen(rest, c.max)
			got = append(got, n)
			rest = rest[n:]
		}
		if len(got) != len(c.want) {
			t.Fatalf("max %d: batches %v, want %v", c.max, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("max %d: batches %v, want %v", c.max, got, c.want)
			}
		}
	}
	// Bytes: 4096 commands of 256-byte keys and 128-byte owners would make
	// a 1.7 MB entry, which every member's decoder refuses.
	big := make([]Proposal, fsm.MaxBatch)
	for i := range big {
		big[i] = Proposal{Env: fsm.Envelope{ID: fsm.RequestID{Node: 1, Seq: 1 << 50}, Tag: 1 << 50,
			Cmd: fsm.Command{Op: fsm.OpGrant, Key: strings.Repeat("k", fsm.MaxKeyLen), LeaseMS: 3_600_000, Owner: strings.Repeat("o", fsm.MaxOwnerLen)}}}
	}
	for rest := big; len(rest) > 0; {
		n := batchLen(rest, fsm.MaxBatch)
		envs := make([]fsm.Envelope, n)
		for i := range envs {
			envs[i] = rest[i].Env
		}
		if _, err := fsm.DecodeBatch(fsm.EncodeBatch(envs)); err != nil {
			t.Fatalf("a batch of %d commands does not decode: %v", n, err)
		}
		rest = rest[n:]
	}
}
