package peer

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
)

// Rule guarded: only a member of this cluster is told it was removed from
// it. The notice makes the member that reads it stop for good (and log
// that its data directory can be deleted), so a member of another cluster
// whose id this cluster removed, reaching this member at an address its
// own book names (an address reused after a cluster was rebuilt, say),
// must be refused as a stranger, not told it was removed.
func TestRemovedNoticeOnlyForThisCluster(t *testing.T) {
	a := freeport.ForIDs(t, 1, 2, 3, 4)
	const clusterA, clusterB = 0xa1, 0xb2
	m3, _ := startMember(t, 3, map[uint64]string{1: a[1], 2: a[2], 3: a[3]}, clusterA)
	m3.SetPeers(map[uint64]string{1: a[1], 2: a[2], 3: a[3]}, []uint64{4}) // cluster A removed its member 4

	// A raw hello from cluster B's member 4.
	c, err := net.Dial("tcp", m3.listenAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(helloFrame(4, 3, &Identity{ClusterID: clusterB, Incarnation: 7}, a[4]))
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	got, _ := io.ReadAll(c)
	if strings.Contains(string(got), strings.TrimSpace(removedNotice)) {
		t.Errorf("member 3 of cluster %x told member 4 of cluster %x it was removed: %q", clusterA, clusterB, got)
	}

	// Cluster B's member 4, whose book has member 3 at that address, stays up.
	m4, rec4 := startMember(t, 4, map[uint64]string{3: a[3], 4: a[4]}, clusterB)
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && len(rec4.removedBy()) == 0 {
		m4.Send(heartbeatMsg(4, 3))
		time.Sleep(20 * time.Millisecond)
	}
	if by := rec4.removedBy(); len(by) > 0 {
		t.Errorf("member 4 of cluster %x stops: member %v of cluster %x says it was removed", clusterB, by, clusterA)
	}
}
