package peer

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/internal/atomicfile"
)

// Cluster identity, and a member's incarnation.
//
// Every member stores in its data directory (identity.json, written once,
// atomically and synced, at the first boot of that directory):
//
//   - the cluster id, a 64-bit number every member of one cluster shares:
//     --cluster-id when given, else derived from the sorted --peers list
//     (the SHA-256 of "1=host:port,2=..." cut to 64 bits), which every
//     member of one bootstrap is given alike. Once stored it wins: a later
//     --cluster-id that differs refuses to start.
//   - its incarnation, a random 64-bit number drawn when the directory is
//     created: a member whose data directory was wiped comes back under its
//     old id with a new incarnation.
//
// Both travel in the peer hello, after the client address, with the
// incarnation the sender recorded for the receiver (below; 0 if none), and
// then the sender's peer address, with which a member whose log does not
// know the sender yet can answer it (TCP.learn). A member from before the
// address was announced refuses such a hello (it takes trailing bytes for
// garbage), so while a cluster is upgraded member by member the old ones
// do not hear the new ones. A hello from another cluster is refused. Each member also records, per peer, the
// incarnation that peer had when it first acknowledged something raft
// counts (an append it accepted, a vote it granted): peers.json in the data
// directory. A hello with a known member id but another incarnation than
// the recorded one is refused: that member has forgotten entries or votes
// it acknowledged, and letting it take part again could lose committed
// entries or elect two leaders in one term. (Raft's safety assumes stable
// storage; this check turns its loss into a refusal.) Its stream is closed
// with a log line naming the incarnation the hello presented, never the
// recorded one: without TLS that number is all a forged hello would need. The wiped member refuses, in
// turn, the streams of a peer whose hello says it remembers another
// incarnation of it, so it is not fed a commit index beyond its empty log
// either, and logs why. The operator brings the member back with its old
// disk, or rebuilds the cluster.
const (
	identityFile = "identity.json"
	seenFile     = "peers.json"
)

// Identity is this member's cluster id and incarnation, and the
// incarnations its peers had when they first acknowledged something.
type Identity struct {
	ClusterID   uint64
	Incarnation uint64

	dir  string
	mu   sync.Mutex
	seen map[uint64]uint64 // member id -> incarnation that acknowledged
}

type identityJSON struct {
	ClusterID   string `json:"cluster_id"`
	Incarnation string `json:"incarnation"`
}

// ClusterIDFromPeers derives a cluster id from the peer list, the same on
// every member given the same list.
func ClusterIDFromPeers(peers map[uint64]string) uint64 {
	ids := make([]uint64, 0, len(peers))
	for id := range peers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	h := sha256.New()
	for i, id := range ids {
		if i > 0 {
			h.Write([]byte(","))
		}
		fmt.Fprintf(h, "%d=%s", id, peers[id])
	}
	v := binary.BigEndian.Uint64(h.Sum(nil))
	if v == 0 {
		v = 1
	}
	return v
}

// ParseClusterID reads a cluster id: 1 to 16 hex digits, not zero.
func ParseClusterID(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("bad cluster id %q: want 1 to 16 hex digits, not all zero", s)
	}
	return v, nil
}

// FormatClusterID is the 16-digit hex form of a cluster id.
func FormatClusterID(v uint64) string { return fmt.Sprintf("%016x", v) }

// OpenIdentity reads the identity stored in dir, or creates it at the
// directory's first boot with clusterID (0: derived from peers) and a
// random incarnation.
func OpenIdentity(dir string, clusterID uint64, peers map[uint64]string) (*Identity, error) {
	id := &Identity{dir: dir, seen: map[uint64]uint64{}}
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	switch {
	case err == nil:
		var j identityJSON
		if err := json.Unmarshal(b, &j); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, identityFile), err)
		}
		if id.ClusterID, err = ParseClusterID(j.ClusterID); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, identityFile), err)
		}
		if id.Incarnation, err = strconv.ParseUint(j.Incarnation, 16, 64); err != nil {
			return nil, fmt.Errorf("%s: bad incarnation: %w", filepath.Join(dir, identityFile), err)
		}
		if clusterID != 0 && clusterID != id.ClusterID {
			return nil, fmt.Errorf("data directory %s belongs to cluster %s, not to --cluster-id %s",
				dir, FormatClusterID(id.ClusterID), FormatClusterID(clusterID))
		}
	case errors.Is(err, os.ErrNotExist):
		id.ClusterID = clusterID
		if id.ClusterID == 0 {
			id.ClusterID = ClusterIDFromPeers(peers)
		}
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return nil, err
		}
		id.Incarnation = binary.BigEndian.Uint64(r[:]) | 1
		b, _ := json.Marshal(identityJSON{FormatClusterID(id.ClusterID), strconv.FormatUint(id.Incarnation, 16)})
		if err := writeSynced(dir, identityFile, b); err != nil {
			return nil, fmt.Errorf("store cluster identity: %w", err)
		}
	default:
		return nil, err
	}
	b, err = os.ReadFile(filepath.Join(dir, seenFile))
	if err == nil {
		var m map[string]string
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, seenFile), err)
		}
		for k, v := range m {
			mid, err1 := strconv.ParseUint(k, 10, 64)
			inc, err2 := strconv.ParseUint(v, 16, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s: bad entry %q: %q", filepath.Join(dir, seenFile), k, v)
			}
			id.seen[mid] = inc
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return id, nil
}

// HasIdentity says whether dir holds a stored identity: the last thing a
// member's first start writes, so a directory without one never took part
// in a cluster (whatever else a first start cut short left in it).
func HasIdentity(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, identityFile))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("look for the cluster identity: %w", err)
}

// check refuses a hello from another cluster, from a member that came
// back with another incarnation than the one that acknowledged entries, or
// from a peer that remembers another incarnation of this member.
func (id *Identity) check(from, clusterID, incarnation, expected uint64) error {
	if clusterID != id.ClusterID {
		if clusterID == 0 {
			return fmt.Errorf("hello from member %d refused: it names no cluster (a raftlock without cluster identity); this is cluster %s", from, FormatClusterID(id.ClusterID))
		}
		return fmt.Errorf("hello from member %d refused: it is in cluster %s, this member in cluster %s", from, FormatClusterID(clusterID), FormatClusterID(id.ClusterID))
	}
	if expected != 0 && expected != id.Incarnation {
		// This member's own incarnation stays out of the reason (a log
		// line): it is what a hello must name to be taken for it.
		return fmt.Errorf("hello from member %d refused: it remembers this member as incarnation %x, which acknowledged entries, but this member is another incarnation: this member's data directory was lost or replaced; bring the old one back", from, expected)
	}
	id.mu.Lock()
	known, ok := id.seen[from]
	id.mu.Unlock()
	if ok && known != incarnation {
		// The recorded incarnation stays out of the reason (a log line):
		// it is what a forged hello as member from must name.
		return fmt.Errorf("hello from member %d refused: incarnation %x, but another incarnation of member %d acknowledged entries: its data directory was lost or replaced (or the hello is forged), and it may have forgotten what it acknowledged", from, incarnation, from)
	}
	return nil
}

// noteAck records from's incarnation the first time it acknowledges
// something raft counts. The record is synced before raft sees the
// acknowledgement.
func (id *Identity) noteAck(from, incarnation uint64, m *raftpb.Message) error {
	switch m.GetType() {
	case raftpb.MessageType_MsgAppResp, raftpb.MessageType_MsgVoteResp:
		if m.GetReject() {
			return nil
		}
	default:
		return nil
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if _, ok := id.seen[from]; ok {
		return nil
	}
	id.seen[from] = incarnation
	out := map[string]string{}
	for k, v := range id.seen {
		out[strconv.FormatUint(k, 10)] = strconv.FormatUint(v, 16)
	}
	b, _ := json.Marshal(out)
	if err := writeSynced(id.dir, seenFile, b); err != nil {
		delete(id.seen, from)
		return fmt.Errorf("record the incarnation of member %d: %w", from, err)
	}
	return nil
}

// helloExtension is what follows the client address in this member's
// hello to member to: cluster id, incarnation, and the incarnation of to
// recorded here (0 if none).
func (id *Identity) helloExtension(to uint64) []byte {
	if id == nil {
		return nil
	}
	id.mu.Lock()
	expected := id.seen[to]
	id.mu.Unlock()
	b := binary.AppendUvarint(nil, id.ClusterID)
	b = binary.AppendUvarint(b, id.Incarnation)
	return binary.AppendUvarint(b, expected)
}

// helloExtension is what follows the client address in this member's
// hello to member to: the identity's fields, then this member's peer
// address (uvarint length and bytes), which a member whose log does not
// know this one yet needs to answer it (TCP.learn). Without an identity,
// nothing: such a member is taken only by peers that know it.
func (t *TCP) helloExtension(to uint64) []byte {
	b := t.identity.helloExtension(to)
	if b == nil {
		return nil
	}
	b = binary.AppendUvarint(b, uint64(len(t.peerAddr)))
	return append(b, t.peerAddr...)
}

// decodeHelloExtension reads a hello's cluster id, incarnation and
// expected incarnation (zeros when the sender sent none), and the
// sender's peer address ("" when it sent none: a member from before it
// was announced).
func decodeHelloExtension(b []byte) (vals [3]uint64, peerAddr string, err error) {
	if len(b) == 0 {
		return vals, "", nil
	}
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return vals, "", errors.New("bad cluster identity in peer hello")
		}
		vals[i], b = v, b[n:]
	}
	if len(b) == 0 {
		return vals, "", nil
	}
	l, n := binary.Uvarint(b)
	if n <= 0 || l != uint64(len(b)-n) {
		return vals, "", errors.New("bad peer address in peer hello")
	}
	return vals, string(b[n:]), nil
}

// checkIdentity checks a hello's extension and returns the sender's
// incarnation and announced peer address; no identity, no check (and no
// address: only known members are taken).
func (t *TCP) checkIdentity(from uint64, ext []byte) (incarnation uint64, peerAddr string, err error) {
	if t.identity == nil {
		return 0, "", nil
	}
	v, peerAddr, err := decodeHelloExtension(ext)
	if err != nil {
		return 0, "", err
	}
	return v[1], peerAddr, t.identity.check(from, v[0], v[1], v[2])
}

// sameCluster says whether a hello's extension names this member's
// cluster (always, without an identity: there is nothing to tell apart).
func (t *TCP) sameCluster(ext []byte) bool {
	if t.identity == nil {
		return true
	}
	v, _, err := decodeHelloExtension(ext)
	return err == nil && v[0] == t.identity.ClusterID
}

// noteAck records an acknowledging message's sender incarnation.
func (t *TCP) noteAck(from, incarnation uint64, m *raftpb.Message) error {
	if t.identity == nil {
		return nil
	}
	return t.identity.noteAck(from, incarnation, m)
}

// writeSynced writes name in dir atomically and durably, readable by its
// owner only (atomicfile.Write).
func writeSynced(dir, name string, b []byte) error {
	return atomicfile.Write(filepath.Join(dir, name), b, 0o600)
}
