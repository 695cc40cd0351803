package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/procgroup"
)

// The experiments in this file change the cluster itself (a follower
// killed, a member added), so they need a cluster the bench started.

// CatchUpResult is a follower's catch-up after it was down while the
// leader compacted its log.
type CatchUpResult struct {
	Member        int     `json:"member"`
	EntriesBehind uint64  `json:"entries_behind"`
	Seconds       float64 `json:"seconds"`
	BySnapshot    bool    `json:"by_snapshot"`
	// ReadySeconds is from its restart until it answered a status
	// request: its store loaded and its table decoded.
	ReadySeconds float64 `json:"ready_seconds"`
}

// JoinResult is a new member's way from its start to the leader's
// applied index.
type JoinResult struct {
	Member     int     `json:"member"`
	Seconds    float64 `json:"seconds"`
	BySnapshot bool    `json:"by_snapshot"`
}

// ErrNotStarted: the experiment needs a cluster the bench started.
var ErrNotStarted = errors.New("needs a cluster the bench started (not --endpoints)")

func startedCluster(t Target) (*raftlockTarget, error) {
	rt, ok := t.(*raftlockTarget)
	if !ok || rt.procs == nil {
		return nil, ErrNotStarted
	}
	return rt, nil
}

const (
	metricInstalled  = "raftlock_snapshots_installed_total"
	metricFirstIndex = "raftlock_first_index"
)

// Settle waits until every member of a cluster the bench started has
// applied what the leader has: after a fill, the moment the followers
// are through its log.
func Settle(ctx context.Context, t Target) error {
	rt, err := startedCluster(t)
	if err != nil {
		return err
	}
	for _, m := range rt.members {
		if err := rt.waitCaughtUp(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// IdleLeaderCPU is the leader's CPU use over window with no load, as a
// fraction of one core, once every member has applied what the leader
// has: what a big table costs a member that is doing nothing.
func IdleLeaderCPU(ctx context.Context, t Target, window time.Duration) (float64, error) {
	if err := Settle(ctx, t); err != nil {
		return 0, err
	}
	leader, err := leaderPID(ctx, t)
	if err != nil {
		return 0, err
	}
	pid := []int{leader}
	cpu0, err := cpuSeconds(pid)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if !sleepCtx(ctx, window) {
		return 0, ctx.Err()
	}
	cpu1, err := cpuSeconds(pid)
	if err != nil {
		return 0, err
	}
	return (cpu1 - cpu0) / time.Since(start).Seconds(), nil
}

// CatchUp kills a follower (SIGKILL), drives acquires and releases until
// the leader has applied behind entries more than the follower had, and
// restarts it: the result is the time from its restart until it applied
// what the leader has, and whether it took a snapshot to get there.
// behind should pass the members' --snapshot-every plus --snapshot-keep,
// so that the leader compacted what the follower lacks.
func CatchUp(ctx context.Context, t Target, behind uint64, keySize int) (CatchUpResult, error) {
	rt, err := startedCluster(t)
	if err != nil {
		return CatchUpResult{}, err
	}
	f, err := rt.follower(ctx)
	if err != nil {
		return CatchUpResult{}, err
	}
	st, err := rt.status(ctx, f)
	if err != nil {
		return CatchUpResult{}, fmt.Errorf("status of member %d: %w", f.id, err)
	}
	f.proc.Kill()
	// Until the leader applied behind more entries and compacted its log
	// past what the follower has: a big table is snapshotted only once the
	// log is as big as the table, so a fixed count of entries may not get there.
	leaderApplied, err := rt.churn(ctx, keySize, 32, func(l *benchMember, lst wire.Status) bool {
		if lst.Applied < st.Applied+behind {
			return false
		}
		first, err := scrapeWith(ctx, rt.metrics, rt.metricsURL(l), metricFirstIndex)
		return err == nil && uint64(first[metricFirstIndex]) > st.Applied+1
	})
	if err != nil {
		return CatchUpResult{}, fmt.Errorf("drive the leader past member %d: %w", f.id, err)
	}
	start := time.Now()
	if err := rt.procs.Restart(f.proc); err != nil {
		return CatchUpResult{}, err
	}
	ready, err := rt.waitAnswers(ctx, f)
	if err != nil {
		return CatchUpResult{}, err
	}
	if err := rt.waitCaughtUp(ctx, f); err != nil {
		return CatchUpResult{}, err
	}
	res := CatchUpResult{Member: f.id, EntriesBehind: leaderApplied - st.Applied, Seconds: time.Since(start).Seconds(),
		ReadySeconds: ready.Sub(start).Seconds()}
	res.BySnapshot, err = rt.installedSnapshot(ctx, f)
	return res, err
}

// JoinMember adds a member (member.add), starts it with --join, times it
// from its start until it applied what the leader has, then removes it
// again (member.remove), so that what follows runs on the members before.
func JoinMember(ctx context.Context, t Target) (res JoinResult, err error) {
	rt, err := startedCluster(t)
	if err != nil {
		return JoinResult{}, err
	}
	if rt.scheme == "https" {
		return JoinResult{}, errors.New("join: not under --tls (the bench makes no certificate for a new member)")
	}
	m, err := rt.addMember(ctx)
	if err != nil {
		return JoinResult{}, err
	}
	start := time.Now()
	a := rt.tuning
	a.ID, a.Join, a.PeerListen, a.Listen, a.HTTP, a.Data = uint64(m.id), rt.cl.Endpoints(), m.peer, m.client, m.http, memberDir(rt.dir, m.id)
	if m.proc, err = rt.procs.Start(rt.bin, a.Argv(), memberDir(rt.dir, m.id)+".log"); err != nil {
		return JoinResult{}, err
	}
	rt.members = append(rt.members, m)
	defer func() { err = errors.Join(err, rt.removeMember(ctx, m)) }()
	if err := rt.waitCaughtUp(ctx, m); err != nil {
		return JoinResult{}, err
	}
	res = JoinResult{Member: m.id, Seconds: time.Since(start).Seconds()}
	res.BySnapshot, err = rt.installedSnapshot(ctx, m)
	return res, err
}

// addMember picks the next id and free addresses and adds the member as
// a learner.
func (rt *raftlockTarget) addMember(ctx context.Context) (*benchMember, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	m := &benchMember{id: rt.nextID, peer: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		client: fmt.Sprintf("127.0.0.1:%d", ports[1]), http: fmt.Sprintf("127.0.0.1:%d", ports[2])}
	rt.nextID++
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	a := wire.MemberArgs{ID: uint64(m.id), PeerAddr: m.peer, ClientAddr: m.client}
	if err := rt.cl.Admin(cctx, "member.add", a, nil, false); err != nil {
		return nil, fmt.Errorf("member.add %d: %w", m.id, err)
	}
	return m, nil
}

// removeMember removes m from the configuration, waits for it to stop
// itself (it does once it learns so) and removes its data.
func (rt *raftlockTarget) removeMember(ctx context.Context, m *benchMember) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := rt.cl.Admin(cctx, "member.remove", wire.MemberArgs{ID: uint64(m.id)}, nil, false)
	if err != nil {
		err = fmt.Errorf("member.remove %d: %w", m.id, err)
	}
	select {
	case <-m.proc.Exited():
	case <-cctx.Done():
	}
	rt.procs.Remove(m.proc, 5*time.Second)
	for i, x := range rt.members {
		if x == m {
			rt.members = append(rt.members[:i], rt.members[i+1:]...)
			break
		}
	}
	return errors.Join(err, os.RemoveAll(memberDir(rt.dir, m.id)))
}

// leader is the member that says it leads, with its status.
func (rt *raftlockTarget) leader(ctx context.Context) (*benchMember, wire.Status, error) {
	for {
		for _, m := range rt.members {
			st, err := rt.status(ctx, m)
			if err == nil && st.Role == "leader" {
				return m, st, nil
			}
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return nil, wire.Status{}, fmt.Errorf("find the leader: %w", ctx.Err())
		}
	}
}

// status asks m for its status, within a second: a member being started
// or stopped may not answer.
func (rt *raftlockTarget) status(ctx context.Context, m *benchMember) (wire.Status, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return rt.cl.Status(cctx, m.client)
}

// follower is a voter that is not the leader.
func (rt *raftlockTarget) follower(ctx context.Context) (*benchMember, error) {
	l, st, err := rt.leader(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range rt.members {
		if m != l && slices.Contains(st.Voters, uint64(m.id)) {
			return m, nil
		}
	}
	return nil, errors.New("the cluster has no follower")
}

// waitAnswers polls m every 10 ms until it answers a status request, and
// returns when it did.
func (rt *raftlockTarget) waitAnswers(ctx context.Context, m *benchMember) (time.Time, error) {
	for {
		if _, err := rt.status(ctx, m); err == nil {
			return time.Now(), nil
		}
		if !m.proc.Running() {
			return time.Time{}, exitedWhileStarting(m)
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return time.Time{}, fmt.Errorf("member %d starting: %w", m.id, ctx.Err())
		}
	}
}

// exitedWhileStarting is the error for m's process having exited before it
// answered: what its log says it died of, wrapping errPortTaken when a
// port it was given had been taken.
func exitedWhileStarting(m *benchMember) error {
	reason := procgroup.ExitReason(m.proc.LogPath())
	err := fmt.Errorf("member %d exited while starting: %s (see %s)", m.id, reason, m.proc.LogPath())
	// The member's own words are the only report of why it exited; the
	// kernel's EADDRINUSE reads so in every listen error.
	if strings.Contains(reason, "address already in use") {
		err = fmt.Errorf("%w: %w", errPortTaken, err)
	}
	return err
}

// LeaderRSS is the leader process's resident memory, in bytes.
func LeaderRSS(ctx context.Context, t Target) (uint64, error) {
	leader, err := leaderPID(ctx, t)
	if err != nil {
		return 0, err
	}
	return residentBytes(leader)
}

// leaderPID is the process id of the leader of a cluster the bench
// started, the one whose resources IdleLeaderCPU and LeaderRSS measure.
func leaderPID(ctx context.Context, t Target) (int, error) {
	rt, err := startedCluster(t)
	if err != nil {
		return 0, err
	}
	l, _, err := rt.leader(ctx)
	if err != nil {
		return 0, err
	}
	return l.proc.PID(), nil
}

// waitCaughtUp polls m every 20 ms until it has applied what the leader
// has (m may be starting: until it answers, it has not).
func (rt *raftlockTarget) waitCaughtUp(ctx context.Context, m *benchMember) error {
	for {
		_, lst, err := rt.leader(ctx)
		if err != nil {
			return err
		}
		if st, err := rt.status(ctx, m); err == nil && st.Applied >= lst.Applied {
			return nil
		}
		if !m.proc.Running() {
			return fmt.Errorf("member %d exited before it caught up: %s (see %s)", m.id, procgroup.ExitReason(m.proc.LogPath()), m.proc.LogPath())
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return fmt.Errorf("member %d catching up: %w", m.id, ctx.Err())
		}
	}
}

// installedSnapshot reports whether m installed a snapshot from the leader
// since its process started.
func (rt *raftlockTarget) installedSnapshot(ctx context.Context, m *benchMember) (bool, error) {
	v, err := scrapeWith(ctx, rt.metrics, rt.metricsURL(m), metricInstalled)
	if err != nil {
		return false, fmt.Errorf("metrics of member %d: %w", m.id, err)
	}
	return v[metricInstalled] > 0, nil
}

// churn runs acquire and release cycles from clients goroutines (keys
// padded to keySize) until done says so of the leader and its status,
// and returns the leader's applied index then.
func (rt *raftlockTarget) churn(ctx context.Context, keySize, clients int, done func(*benchMember, wire.Status) bool) (uint64, error) {
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	spec := Spec{Workload: Uncontended, KeySize: keySize}
	run := time.Now().UnixNano()
	for i := range clients {
		wg.Go(func() {
			sess := raftlockSession{rt}
			for cctx.Err() == nil {
				spec.cycle(cctx, sess, padKey(fmt.Sprintf("churn-%d-%d", run, i), keySize))
			}
		})
	}
	for {
		l, st, err := rt.leader(ctx)
		if err != nil {
			return 0, err
		}
		if done(l, st) {
			return st.Applied, nil
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}
