package chaos

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"

	"github.com/raftlock/raftlock/chaos/fault"
)

// The power families on a peer target: each server's data directory
// (peerService.DataDir) is its own lazyfs mount, made before the servers
// start; a cut SIGKILLs the servers drawn, at once, drops what each one's
// disk had not synced, and its heal starts them again from what is left,
// as raftlock's members are cut (power.go).

// peerPower is what the power families need of a peer run: the mounts,
// the nemesis's counters and its log.
type peerPower struct {
	disks  *powerDisks
	counts *NemesisCounts
	log    *slog.Logger
}

// power draws a power failure of one server (power) or of every one
// (power-all) among those IDs names, and carries it out.
func (pf *peerFaults) power(ctx context.Context, rng *rand.Rand, all bool) (func(context.Context), string) {
	p := fault.DrawPower(rng, fault.Fixed{IDs: pf.p.IDs(), Lead: pf.p.Leader(ctx)}, all)
	p.Record(pf.rec)
	var wg sync.WaitGroup
	for _, id := range p.Nodes {
		pf.stopped[id] = true
		wg.Go(func() { pf.p.Kill(id) })
	}
	wg.Wait()
	var dropped int64
	for i, id := range p.Nodes {
		c, err := pf.pw.disks.cut(id, p.Torn[i])
		if err != nil {
			// As for raftlock: the run then ends with no verdict, never
			// with one on a disk the history does not describe.
			pf.pw.counts.PowerCutsFailed.Add(1)
			pf.pw.log.Error("power cut failed", "node", id, "err", err)
			continue
		}
		fault.PowerCut{Node: id, Cut: c}.Record(pf.rec)
		pf.pw.counts.PowerCuts.Add(1)
		pf.pw.counts.PowerBytesDropped.Add(c.BytesDropped)
		dropped += c.BytesDropped
	}
	return func(context.Context) {
		for _, id := range p.Nodes {
			if err := pf.p.Restart(id); err != nil {
				pf.pw.log.Error("restart after a power cut failed", "node", id, "err", err)
			}
			delete(pf.stopped, id)
		}
		fault.Start{Nodes: p.Nodes}.Record(pf.rec)
	}, fmt.Sprintf("power cut %v (%d unsynced bytes dropped)", p.Nodes, dropped)
}

// settleDirs fsyncs every directory under each of dirs once: a peer's
// data directories, right after it first answered. A power cut on
// lazyfs drops every directory entry not yet fsynced, and etcd 3.4 and
// Redis 7.0 never fsync their data directory's top level after creating
// what they keep in it (etcd's member/, Redis's appendonlydir/), so
// without this every cut would lose a server's whole data set to one
// entry made at its first start, long since durable on a filesystem
// that commits metadata in order (ext4's journal does within seconds).
// --power-strict leaves it out, to show exactly that.
func settleDirs(dirs []string) error {
	for _, root := range dirs {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Sync()
		})
		if err != nil {
			return fmt.Errorf("settle %s: %w", root, err)
		}
	}
	return nil
}
