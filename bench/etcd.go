package bench

import (
	"context"
	"errors"
	"fmt"
	"github.com/raftlock/raftlock/internal/procgroup"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// EtcdConfig starts an etcd cluster (fsync on, etcd's default).
type EtcdConfig struct {
	Dir   string
	Lease time.Duration
	Mode  string // "etcd-mutex" or "etcd-txn"
	Nodes int    // members; default 3, as raftlock's --nodes
}

type etcdTarget struct {
	mode  string
	lease time.Duration
	cli   *clientv3.Client
	procs *procgroup.Group
}

// StartEtcd starts an etcd cluster of cfg.Nodes members from the etcd
// binary on PATH.
func StartEtcd(ctx context.Context, cfg EtcdConfig) (Target, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, errors.New("etcd not found on PATH (make peers installs it)")
	}
	nodes := cfg.Nodes
	if nodes <= 0 {
		nodes = 3
	}
	ports, err := freePorts(2 * nodes)
	if err != nil {
		return nil, err
	}
	var initial, eps []string
	for i := 0; i < nodes; i++ {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i+1, ports[2*i+1]))
		eps = append(eps, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
	}
	g := &procgroup.Group{Env: shareCores(nodes)}
	for i := 0; i < nodes; i++ {
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		args := []string{"--name", fmt.Sprintf("m%d", i+1), "--data-dir", filepath.Join(cfg.Dir, fmt.Sprintf("etcd-%s-%d", cfg.Mode, i+1)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "raftlock-bench", "--logger", "zap", "--log-level", "error"}
		if _, err := g.Start(bin, args, filepath.Join(cfg.Dir, fmt.Sprintf("etcd-%s-%d.log", cfg.Mode, i+1))); err != nil {
			g.Stop()
			return nil, err
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		g.Stop()
		return nil, err
	}
	t := &etcdTarget{mode: cfg.Mode, lease: cfg.Lease, cli: cli, procs: g}
	if err := waitUntil(ctx, "etcd", func(ctx context.Context) error { _, err := cli.Get(ctx, "bench-probe"); return err }); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *etcdTarget) Name() string                                { return t.mode }
func (t *etcdTarget) PIDs() []int                                 { return t.procs.PIDs() }
func (t *etcdTarget) RaftStats(context.Context) (RaftStats, bool) { return RaftStats{}, false }

func (t *etcdTarget) Close() error {
	t.cli.Close()
	t.procs.Stop()
	return nil
}

// NewSession opens one etcd concurrency session (a lease kept alive) per
// client, as the recipe is meant to be used.
func (t *etcdTarget) NewSession(ctx context.Context, i int) (Session, error) {
	ttl := max(int(t.lease.Seconds()), 1)
	sess, err := concurrency.NewSession(t.cli, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return &etcdSession{t: t, sess: sess, id: fmt.Sprintf("c%d", i)}, nil
}

type etcdSession struct {
	t    *etcdTarget
	sess *concurrency.Session
	id   string
}

func (s *etcdSession) Lock(ctx context.Context, key string, wait bool) (func(context.Context) error, error) {
	if s.t.mode == "etcd-mutex" {
		m := concurrency.NewMutex(s.sess, "/bench/mutex/"+key)
		var err error
		if wait {
			err = m.Lock(ctx)
		} else {
			err = m.TryLock(ctx)
		}
		if err != nil {
			return nil, err
		}
		return m.Unlock, nil
	}
	// etcd-txn: put-if-absent under the session's lease, delete to release.
	k := "/bench/txn/" + key
	return pollLock(ctx, wait, time.Millisecond, 10*time.Millisecond, func() (func(context.Context) error, error) {
		resp, err := s.t.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, s.id, clientv3.WithLease(s.sess.Lease()))).Commit()
		if err != nil || !resp.Succeeded {
			return nil, err
		}
		return func(ctx context.Context) error {
			_, err := s.t.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", s.id)).Then(clientv3.OpDelete(k)).Commit()
			return err
		}, nil
	})
}

func (s *etcdSession) Read(ctx context.Context, key string) error {
	_, err := s.t.cli.Get(ctx, "/bench/"+key)
	return err
}

func (s *etcdSession) Close() error { return s.sess.Close() }
