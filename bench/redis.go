package bench

import (
	"context"
	"errors"
	"fmt"
	"github.com/raftlock/raftlock/internal/procgroup"
	"github.com/raftlock/raftlock/internal/resp"
	"os/exec"
	"strconv"
	"time"
)

// RedisConfig starts one redis-server with appendfsync always.
type RedisConfig struct {
	Dir   string
	Lease time.Duration
}

type redisTarget struct {
	addr  string
	lease time.Duration
	procs *procgroup.Group
}

// StartRedis starts redis-server from PATH with every write fsynced.
func StartRedis(ctx context.Context, cfg RedisConfig) (Target, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH (make peers installs it)")
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	g := &procgroup.Group{}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", cfg.Dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no", "--loglevel", "warning"}
	if _, err := g.Start(bin, args, cfg.Dir+"/redis.log"); err != nil {
		return nil, err
	}
	t := &redisTarget{addr: fmt.Sprintf("127.0.0.1:%d", port), lease: cfg.Lease, procs: g}
	if err := waitUntil(ctx, "redis", func(ctx context.Context) error {
		c, err := resp.Dial(ctx, t.addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Do("PING")
		return err
	}); err != nil {
		g.Stop()
		return nil, err
	}
	return t, nil
}

func (t *redisTarget) Name() string                                { return "redis" }
func (t *redisTarget) PIDs() []int                                 { return t.procs.PIDs() }
func (t *redisTarget) RaftStats(context.Context) (RaftStats, bool) { return RaftStats{}, false }
func (t *redisTarget) Close() error                                { t.procs.Stop(); return nil }

// NewSession opens one connection per client.
func (t *redisTarget) NewSession(ctx context.Context, i int) (Session, error) {
	c, err := resp.Dial(ctx, t.addr)
	if err != nil {
		return nil, err
	}
	return &redisSession{t: t, c: c, id: fmt.Sprintf("c%d", i)}, nil
}

// releaseScript deletes the key only if it still holds this client's token.
const releaseScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

type redisSession struct {
	t  *redisTarget
	c  *resp.Conn
	id string
	n  int64
}

func (s *redisSession) Lock(ctx context.Context, key string, wait bool) (func(context.Context) error, error) {
	s.n++
	token := s.id + "-" + strconv.FormatInt(s.n, 10)
	px := strconv.FormatInt(s.t.lease.Milliseconds(), 10)
	return pollLock(ctx, wait, 100*time.Microsecond, 5*time.Millisecond, func() (func(context.Context) error, error) {
		r, err := s.c.Do("SET", key, token, "NX", "PX", px)
		if err != nil || r != "OK" {
			return nil, err
		}
		return func(context.Context) error {
			_, err := s.c.Do("EVAL", releaseScript, "1", key, token)
			return err
		}, nil
	})
}

func (s *redisSession) Read(ctx context.Context, key string) error {
	_, err := s.c.Do("GET", key)
	return err
}

func (s *redisSession) Close() error { return s.c.Close() }
