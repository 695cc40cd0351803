package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	membercore "github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/peer"
)

// lockLoop is clients that acquire and release their own key in a loop
// until stopped, recording every error (the client retries what is safe
// to retry: an error here is one a caller would see) and the completion
// time of every cycle.
type lockLoop struct {
	mu     sync.Mutex
	errs   []string
	ops    int
	stamps []time.Time
	// longest is the longest one client waited for one cycle.
	longest time.Duration
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startLockLoop(cl *client.Client, clients int, prefix string) *lockLoop {
	l := &lockLoop{stop: make(chan struct{})}
	for i := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			key := fmt.Sprintf("%s-%d", prefix, i)
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				g, err := cl.Acquire(ctx, key, 5*time.Second, 0)
				if err == nil {
					err = cl.Release(ctx, key, g.Token)
				}
				cancel()
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, fmt.Sprintf("%s: %v", key, err))
				} else {
					l.ops++
					l.stamps = append(l.stamps, time.Now())
					l.longest = max(l.longest, time.Since(start))
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond) // the errors fail the test; do not spin
				}
			}
		}()
	}
	return l
}

func (l *lockLoop) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ops
}

// finish stops the loop and returns its errors, the longest time no
// client completed a cycle, and the longest one cycle took.
func (l *lockLoop) finish() (errs []string, longestPause, longestCycle time.Duration, ops int) {
	close(l.stop)
	l.wg.Wait()
	slices.SortFunc(l.stamps, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(l.stamps); i++ {
		longestPause = max(longestPause, l.stamps[i].Sub(l.stamps[i-1]))
	}
	return l.errs, longestPause, l.longest, l.ops
}

// progress waits until the loop completed more cycles than it had.
func (l *lockLoop) progress(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	from := l.count()
	waitUntil(ctx, t, "lock traffic "+what, func() bool { return l.count() > from+10 })
}

// Issue 12's membership proof, on real processes: three members; a fourth
// is added as a learner, joins with --join, is promoted once caught up;
// member 1 is removed and stops; member list and status show the new
// configuration; locks taken before keep their tokens; acquire and
// release keep working throughout without an error reaching a caller.
func TestMembershipReplaceAMemberWithRealProcesses(t *testing.T) {
	startsProcesses(t)
	c, ctx, cl := readyProcessCluster(t, 2*time.Minute)
	held := holdLocks(ctx, t, cl, "held-0", "held-1", "held-2")
	loop := startLockLoop(cl, 4, "loop")
	loop.progress(ctx, t, "before any change")
	eps := strings.Join(c.endpoints(), ",")

	m4 := newMember(t, 4)
	m4.join = eps
	code, out := c.run("member", "add", "--endpoints", eps, "--id", "4", "--peer-addr", m4.peer, "--client-addr", m4.client)
	if code != 0 || !strings.Contains(out, "4   learner") {
		t.Fatalf("member add: exit %d\n%s", code, out)
	}
	// Asked again, as after an answer lost: done, nothing changed.
	code, out = c.run("member", "add", "--endpoints", eps, "--id", "4", "--peer-addr", m4.peer, "--client-addr", m4.client)
	if code != 0 || !strings.Contains(out, "member 4 is already in the configuration") || !strings.Contains(out, "4   learner") {
		t.Fatalf("member add again: exit %d\n%s", code, out)
	}
	c.members = append(c.members, m4)
	c.start(m4)
	waitUntil(ctx, t, "the learner to be promoted (refused until it caught up)", func() bool {
		code, out = c.run("member", "promote", "--endpoints", eps, "4")
		return code == 0
	})
	if !strings.Contains(out, "4   voter") {
		t.Fatalf("member promote:\n%s", out)
	}
	loop.progress(ctx, t, "after the promotion")

	// A member that was never added cannot join.
	stranger := newMember(t, 9)
	code, out = c.run("node", "--id", "9", "--join", eps, "--peer-listen", stranger.peer, "--listen", stranger.client,
		"--data", t.TempDir())
	if code != 1 || !strings.Contains(out, "member 9 is not in the cluster's configuration") {
		t.Fatalf("joining without member add: exit %d\n%s", code, out)
	}

	// Member 1 leads when it is removed: it must hand over first.
	code, out = c.run("leader", "transfer", "--endpoints", eps, "--to", "1")
	if code != 0 || !strings.Contains(out, "leader is now member 1") {
		t.Fatalf("leader transfer --to 1: exit %d\n%s", code, out)
	}
	loop.progress(ctx, t, "after the leader transfer")
	code, out = c.run("member", "remove", "--endpoints", eps, "1")
	if code != 0 || strings.Contains(out, "1   voter") {
		t.Fatalf("member remove: exit %d\n%s", code, out)
	}
	// The removed member stops itself: it applies its removal, or a peer
	// that applied it refuses its stream and says why.
	m1 := c.members[0]
	select {
	case <-m1.exited:
		if code := m1.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("removed member exited %d:\n%s", code, c.log(m1))
		}
		m1.cmd = nil
	case <-time.After(10 * time.Second):
		t.Fatalf("the removed member still runs 10 s after its removal:\n%s", c.log(m1))
	}
	loop.progress(ctx, t, "after the removal")

	rest := strings.Join([]string{c.members[1].client, c.members[2].client, m4.client}, ",")
	code, out = c.run("member", "remove", "--endpoints", rest, "1")
	if code != 0 || !strings.Contains(out, "member 1 was already removed") {
		t.Fatalf("member remove again: exit %d\n%s", code, out)
	}
	code, out = c.run("member", "list", "--endpoints", rest, "--json")
	var list struct {
		Members []struct {
			ID         uint64 `json:"id"`
			PeerAddr   string `json:"peer_addr"`
			ClientAddr string `json:"client_addr"`
			Role       string `json:"role"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("member list --json: exit %d, %v\n%s", code, err, out)
	}
	var ids []uint64
	for _, m := range list.Members {
		ids = append(ids, m.ID)
		if m.Role != "voter" || m.PeerAddr == "" || m.ClientAddr == "" {
			t.Errorf("member list entry %+v", m)
		}
	}
	if !slices.Equal(ids, []uint64{2, 3, 4}) {
		t.Fatalf("member list: %v, want 2 3 4\n%s", ids, out)
	}
	code, out = c.run("status", "--endpoints", rest)
	if code != 0 || !strings.Contains(out, "configuration: voters 2 3 4; learners none") {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	// Asking one member names the others it did not ask; --cluster asks
	// every member of the configuration.
	code, out = c.run("status", "--endpoints", c.members[1].client)
	if code != 0 || !strings.Contains(out, "not asked: members 3 4 (status --cluster asks every member)") {
		t.Fatalf("status of one member: exit %d\n%s", code, out)
	}
	code, out = c.run("status", "--endpoints", c.members[1].client, "--json")
	if code != 0 || !strings.Contains(out, `"not_asked":[3,4]`) {
		t.Fatalf("status --json of one member: exit %d\n%s", code, out)
	}
	code, out = c.run("status", "--endpoints", c.members[1].client, "--cluster")
	if code != 0 || strings.Contains(out, "not asked") || !strings.Contains(out, m4.client) || !strings.Contains(out, c.members[2].client) {
		t.Fatalf("status --cluster: exit %d\n%s", code, out)
	}
	for k, tok := range held {
		info, err := cl.Get(ctx, k)
		if err != nil || !info.Held || info.Token != tok {
			t.Errorf("%s: %+v, %v; want held with token %d", k, info, err, tok)
		}
	}
	errs, pause, cycle, ops := loop.finish()
	t.Logf("lock loop: %d cycles, longest pause %v, longest cycle %v", ops, pause, cycle)
	if len(errs) > 0 {
		t.Fatalf("%d lock calls failed during the membership changes, first: %s\n%s", len(errs), errs[0], c.logs())
	}
}

// Issue 12's rolling restart: 16 clients acquire and release in a loop
// while each member in turn is stopped with SIGTERM and started again. No
// client sees an error (the client retries what was never sent or was
// answered Unavailable; the leader hands over before it stops, and a
// stopping member sends a goaway rather than breaking a connection under
// a request), a stopped leader hands leadership over, and the loop never
// stops.
func TestRollingRestartWithSIGTERMFailsNoCall(t *testing.T) {
	startsProcesses(t)
	c, ctx, cl := readyProcessCluster(t, 3*time.Minute)
	loop := startLockLoop(cl, 16, "rolling")
	loop.progress(ctx, t, "before the restarts")
	leadersStopped := 0
	for _, m := range c.members {
		st, err := cl.Status(ctx, m.client)
		if err == nil && st.Role == "leader" {
			leadersStopped++
		}
		c.stop(m)
		c.start(m)
		waitUntil(ctx, t, fmt.Sprintf("member %d to catch up", m.id), func() bool {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			defer scancel()
			st, err := cl.Status(sctx, m.client)
			if err != nil || st.Leader == 0 {
				return false
			}
			lst, err := cl.Status(sctx, st.LeaderAddr)
			return err == nil && st.Applied+50 >= lst.Applied
		})
		loop.progress(ctx, t, fmt.Sprintf("after member %d restarted", m.id))
	}
	errs, pause, cycle, ops := loop.finish()
	t.Logf("rolling restart: %d cycles by 16 clients, %d leader(s) stopped, longest pause %v, longest cycle of one client %v", ops, leadersStopped, pause, cycle)
	if leadersStopped == 0 {
		t.Fatal("no member was the leader when it was stopped: the test proves nothing about handover")
	}
	if len(errs) > 0 {
		t.Fatalf("%d lock calls failed during the rolling restart, first: %s", len(errs), errs[0])
	}
	// The stopped leader handed over rather than leaving the others to
	// wait out an election timeout: its log says so. (How long the loop
	// paused is logged above, not asserted: on a loaded machine a handover
	// alone can take longer than an election timeout.)
	handedOver := slices.ContainsFunc(c.members, func(m *processMember) bool {
		return strings.Contains(c.fullLog(m), "handed leadership over")
	})
	if !handedOver {
		t.Fatalf("a leader was stopped, but no member logged handing leadership over:\n%s", c.logs())
	}
	if limit := 10 * time.Second; pause > limit {
		t.Fatalf("the lock loop stalled for %v (one client's cycle took up to %v): no lock call completed for over %v", pause, cycle, limit)
	}
}

// Rule guarded: a member follows any leader its peers elected. A voter
// that was down while a member was added, promoted and made leader
// restarts with a log and --peers that do not name that member; it must
// still take its hello and its messages, answer it, and catch up.
func TestStaleVoterCatchesUpWithLeaderAddedWhileItWasDown(t *testing.T) {
	startsProcesses(t)
	c, ctx, cl := readyProcessCluster(t, 2*time.Minute)
	holdLocks(ctx, t, cl, "a")
	m3 := c.members[2]
	c.stop(m3)
	eps := strings.Join([]string{c.members[0].client, c.members[1].client}, ",")
	m4 := c.addJoiner(4, eps)
	c.members = append(c.members, m4)
	c.start(m4)
	waitUntil(ctx, t, "promotion", func() bool {
		code, _ := c.run("member", "promote", "--endpoints", eps, "4")
		return code == 0
	})
	eps4 := eps + "," + m4.client
	waitUntil(ctx, t, "transfer to 4", func() bool {
		code, _ := c.run("leader", "transfer", "--endpoints", eps4, "--to", "4")
		return code == 0
	})
	c.start(m3) // with --peers naming members 1 to 3 only
	holdLocks(ctx, t, nodetest.Client(t, strings.Split(eps4, ",")...), "k0", "k1", "k2", "k3", "k4")
	lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
	defer lcancel()
	var a3, a4 float64
	caughtUp := func() bool {
		var err3, err4 error
		a3, err3 = m3.metric(lctx, "raftlock_applied_index")
		a4, err4 = m4.metric(lctx, "raftlock_applied_index")
		return err3 == nil && err4 == nil && a3 == a4 && a3 > 0
	}
	for !caughtUp() {
		select {
		case <-lctx.Done():
			t.Fatalf("member 3 applied %v, leader 4 applied %v after 20s\nmember 3 log:\n%s\nmember 4 log:\n%s", a3, a4, c.log(m3), c.log(m4))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Rule guarded: a joiner's first start is all or nothing. A joiner that
// crashed after seeding its store and before storing its identity (cluster
// id, incarnation) must join again when restarted with --join, not restart
// from its log as a member of no cluster (it would derive a cluster id of
// its own and be refused by every peer).
func TestJoinerThatCrashedBeforeItsIdentityJoinsAgain(t *testing.T) {
	startsProcesses(t)
	c, ctx, cl := readyProcessCluster(t, 2*time.Minute)
	holdLocks(ctx, t, cl, "a")
	eps := strings.Join(c.endpoints(), ",")
	m4 := c.addJoiner(4, eps)

	// The crash: the joiner's store is seeded as its first start seeds it,
	// and the process dies before identity.json is written.
	clusterID := storedClusterID(t, c.dataDir(1))
	dir := c.dataDir(4)
	bootstrap := map[uint64]string{}
	for _, m := range c.members {
		bootstrap[uint64(m.id)] = m.peer
	}
	cid, err := peer.ParseClusterID(clusterID)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{
		Config:     membercore.Config{ID: 4, Peers: map[uint64]string{4: m4.peer}},
		DataDir:    dir,
		ClientAddr: m4.client,
		Join:       &node.Join{ClusterID: cid, Bootstrap: bootstrap, Members: map[uint64]string{4: m4.peer}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	for _, f := range []string{"identity.json", "peers.json"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}

	c.members = append(c.members, m4)
	c.start(m4)
	jctx, jcancel := context.WithTimeout(ctx, 30*time.Second)
	defer jcancel()
	waitUntil(jctx, t, "member 4 to catch up", func() bool {
		a1, err1 := c.members[0].metric(jctx, "raftlock_applied_index")
		a4, err4 := m4.metric(jctx, "raftlock_applied_index")
		if !m4.running() {
			t.Fatalf("member 4 exited:\n%s", c.log(m4))
		}
		return err1 == nil && err4 == nil && a4 == a1 && a4 > 0
	})
	if got := storedClusterID(t, dir); got != clusterID {
		t.Fatalf("member 4 stored cluster id %s, the cluster's is %s\n%s", got, clusterID, c.log(m4))
	}
}

// storedClusterID reads the cluster id a data directory stores.
func storedClusterID(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id struct {
		ClusterID string `json:"cluster_id"`
	}
	if err := json.Unmarshal(b, &id); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", dir, err))
	}
	return id.ClusterID
}
