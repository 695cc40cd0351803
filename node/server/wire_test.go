package server

import (
	"encoding/json"
	"testing"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
)

// The member checks rule 10's bounds itself, without the wire package: its
// bounds and messages must be the protocol's, so a client that checks
// first and a member that checks again agree.
func TestMemberBoundsAreTheProtocols(t *testing.T) {
	if member.MaxKeyLen != wire.MaxKeyLen || member.MinLeaseMS != wire.MinLeaseMS || member.MaxLeaseMS != wire.MaxLeaseMS {
		t.Fatalf("member bounds key %d lease %d..%d, wire key %d lease %d..%d", member.MaxKeyLen, member.MinLeaseMS,
			member.MaxLeaseMS, wire.MaxKeyLen, wire.MinLeaseMS, wire.MaxLeaseMS)
	}
	for _, key := range []string{"", string(make([]byte, wire.MaxKeyLen+1)), "k"} {
		m, w := member.ValidateKey(key), wire.ValidateKey(key)
		if (m == nil) != (w == nil) || (m != nil && m.Error() != "invalid argument: "+w.Error()) {
			t.Errorf("key of %d bytes: member says %v, wire %v", len(key), m, w)
		}
	}
	for _, ms := range []int64{wire.MinLeaseMS - 1, wire.MinLeaseMS, wire.MaxLeaseMS, wire.MaxLeaseMS + 1} {
		m, w := member.ValidateLease(ms), wire.ValidateLease(ms)
		if (m == nil) != (w == nil) || (m != nil && m.Error() != "invalid argument: "+w.Error()) {
			t.Errorf("lease of %d ms: member says %v, wire %v", ms, m, w)
		}
	}
}

// /status (node.Status) and the protocol's status answer (wire.Status)
// carry the same JSON.
func TestStatusJSONIsTheProtocols(t *testing.T) {
	st := node.Status{ID: 1, Addr: "a", Role: "leader", Term: 2, Leader: 1, LeaderAddr: "b", Commit: 3, Applied: 4,
		Locks: 5, LastToken: 6, Digest: "d", Voters: []uint64{1}, Learners: []uint64{2}}
	a, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(wire.Status(st))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatalf("node.Status is %s, wire.Status %s", a, b)
	}
}
