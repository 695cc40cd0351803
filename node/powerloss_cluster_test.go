package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/logstore"
	"github.com/raftlock/raftlock/node/nodetest"
)

// Every member of a 3-member cluster loses power at the same moment, under load (distinct keys, a contended key with handoffs,
// snapshots every 50 entries), with the write overlap on. Restarted from
// what each disk kept, the cluster still holds every grant it
// acknowledged before the cut, and its last token is at least every token
// it handed out.
func TestEveryAcknowledgedGrantSurvivesPowerLossOfEveryMember(t *testing.T) {
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) { powerLossRun(t, uint64(run)) })
	}
}

func powerLossRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	var mu sync.Mutex
	fss := map[uint64]*vfs.MemFS{}
	for id := uint64(1); id <= 3; id++ {
		fss[id] = vfs.NewCrashableMem()
	}
	quiet := slog.New(slog.DiscardHandler)
	c := nodetest.New(t, 3, func(cfg *node.Config) {
		cfg.SnapshotEvery, cfg.SnapshotKeep, cfg.SnapshotByEntries = 50, 10, true
		mu.Lock()
		fs := fss[cfg.ID]
		mu.Unlock()
		d, err := logstore.OpenFS("/raft", fs, []uint64{1, 2, 3}, quiet)
		if err != nil {
			t.Errorf("member %d: open store: %v", cfg.ID, err)
			return
		}
		cfg.Storage = &slowStore{Disk: d}
	})
	ctx := nodetest.Context(t, 60*time.Second)
	leader := func() *node.Node {
		for _, n := range c.Nodes() {
			if nodetest.Status(t, n).Role == "leader" {
				return n
			}
		}
		return nil
	}
	nodetest.WaitFor(t, 20*time.Second, "a leader that grants", func() bool {
		l := leader()
		if l == nil {
			return false
		}
		_, err := l.Acquire(ctx, "warm", time.Hour, 0, 0)
		return err == nil
	})

	var amu sync.Mutex
	acked := map[string]uint64{}
	var maxToken atomic.Uint64
	note := func(tok uint64) {
		for {
			m := maxToken.Load()
			if tok <= m || maxToken.CompareAndSwap(m, tok) {
				return
			}
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// clients starts n clients that, until stop, each call step with
	// their number, their call's number and the leader of the moment.
	clients := func(n int, step func(g, i int, l *node.Node)) {
		for g := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					l := leader()
					if l == nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					step(g, i, l)
				}
			}()
		}
	}
	clients(6, func(g, i int, l *node.Node) {
		key := fmt.Sprintf("g%d-%d", g, i)
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		tok, err := l.Acquire(cctx, key, time.Hour, 0, 0)
		ccancel()
		if err == nil {
			amu.Lock()
			acked[key] = tok
			amu.Unlock()
			note(tok)
		}
	})
	clients(3, func(_, _ int, l *node.Node) {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		tok, err := l.Acquire(cctx, "hot", time.Hour, time.Second, 0)
		if err == nil {
			note(tok)
			l.Release(cctx, "hot", tok, 0)
		}
		ccancel()
	})
	// The cut comes once a random number of grants was acknowledged.
	cutAt := 50 + rng.IntN(200)
	nodetest.WaitFor(t, 60*time.Second, "grants acknowledged before the cut", func() bool {
		amu.Lock()
		defer amu.Unlock()
		return len(acked) >= cutAt
	})
	// The cut: what was acknowledged so far, then every disk as a power
	// loss leaves it.
	amu.Lock()
	want := make(map[string]uint64, len(acked))
	for k, v := range acked {
		want[k] = v
	}
	amu.Unlock()
	wantMax := maxToken.Load()
	clones := map[uint64]*vfs.MemFS{}
	for id, fs := range fss {
		clones[id] = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
	}
	close(stop)
	wg.Wait()
	// Every acknowledged grant is on a majority of the disks as the cut
	// left them.
	have := map[uint64]map[string]bool{}
	for id, fs := range clones {
		have[id] = durableGrants(t, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rng}))
	}
	short := 0
	for k := range want {
		n := 0
		for id := range have {
			if have[id][k] {
				n++
			}
		}
		if n < 2 {
			short++
			if short <= 5 {
				t.Errorf("%s: acknowledged before the cut, on %d of 3 disks after it", k, n)
			}
		}
	}
	for _, id := range c.IDs() {
		c.StopMember(id)
	}
	mu.Lock()
	fss = clones
	mu.Unlock()
	for _, id := range c.IDs() {
		if err := c.StartMember(id); err != nil {
			t.Fatalf("restart %d after the power cut: %v", id, err)
		}
	}
	var l *node.Node
	nodetest.WaitFor(t, 30*time.Second, "a leader after the power cut", func() bool {
		l = leader()
		if l == nil {
			return false
		}
		_, err := l.Get(ctx, "warm", false)
		return err == nil
	})
	if st := nodetest.Status(t, l); st.LastToken < wantMax {
		t.Fatalf("last token %d after the power cut, but token %d was handed out before it", st.LastToken, wantMax)
	}
	lost := 0
	for k, tok := range want {
		info, err := l.Get(ctx, k, false)
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		if !info.Held || info.Token != tok {
			lost++
			t.Errorf("%s: acknowledged with token %d before the power cut, now %+v", k, tok, info)
		}
	}
	t.Logf("seed %d: %d acknowledged grants checked, max token %d, lost %d", seed, len(want), wantMax, lost)
}

// slowStore makes every synced write take a few milliseconds, as a disk's
// fsync does, so that what happens during a write has time to matter.
type slowStore struct{ *logstore.Disk }

func (s *slowStore) Save(hs *raftpb.HardState, es []*raftpb.Entry, snap *raftpb.Snapshot, sync bool) error {
	if sync {
		time.Sleep(time.Duration(1+rand.IntN(4)) * time.Millisecond)
	}
	return s.Disk.Save(hs, es, snap, sync)
}

// durableGrants lists the keys a store granted: held in its snapshot, or
// granted by an entry of its log.
func durableGrants(t *testing.T, fs *vfs.MemFS) map[string]bool {
	d, err := logstore.OpenFS("/raft", fs, []uint64{1, 2, 3}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("reopen a cut disk: %v", err)
	}
	defer d.Close()
	out := map[string]bool{}
	snap, _ := d.Snapshot()
	data, err := d.SnapshotData(snap.GetData())
	if err != nil {
		t.Fatal(err)
	}
	m, _, _, err := member.DecodeSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range m.Keys() {
		out[k] = true
	}
	first, _ := d.FirstIndex()
	last, _ := d.LastIndex()
	if last >= first {
		es, err := d.Entries(first, last+1, 1<<62)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			envs, _ := fsm.DecodeBatch(e.GetData())
			for _, env := range envs {
				if env.Cmd.Op == fsm.OpGrant {
					out[env.Cmd.Key] = true
				}
			}
		}
	}
	return out
}
