package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
	procs *procGroup
}

// StartRedis starts redis-server from PATH with every write fsynced.
func StartRedis(ctx context.Context, cfg RedisConfig) (Target, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH (make peers installs it)")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	g := &procGroup{}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", cfg.Dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no", "--loglevel", "warning"}
	if err := g.start(bin, args, cfg.Dir+"/redis.log"); err != nil {
		return nil, err
	}
	t := &redisTarget{addr: fmt.Sprintf("127.0.0.1:%d", port), lease: cfg.Lease, procs: g}
	if err := waitUntil(ctx, "redis", func(ctx context.Context) error {
		c, err := dialRedis(ctx, t.addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.do("PING")
		return err
	}); err != nil {
		g.stop()
		return nil, err
	}
	return t, nil
}

func (t *redisTarget) Name() string                                { return "redis" }
func (t *redisTarget) PIDs() []int                                 { return t.procs.pids() }
func (t *redisTarget) RaftStats(context.Context) (RaftStats, bool) { return RaftStats{}, false }
func (t *redisTarget) Close() error                                { t.procs.stop(); return nil }

// NewSession opens one connection per client.
func (t *redisTarget) NewSession(ctx context.Context, i int) (Session, error) {
	c, err := dialRedis(ctx, t.addr)
	if err != nil {
		return nil, err
	}
	return &redisSession{t: t, c: c, id: fmt.Sprintf("c%d", i)}, nil
}

// releaseScript deletes the key only if it still holds this client's token.
const releaseScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

type redisSession struct {
	t  *redisTarget
	c  *redisConn
	id string
	n  int64
}

func (s *redisSession) Lock(ctx context.Context, key string, wait bool) (func(context.Context) error, error) {
	s.n++
	token := s.id + "-" + strconv.FormatInt(s.n, 10)
	px := strconv.FormatInt(s.t.lease.Milliseconds(), 10)
	return pollLock(ctx, wait, 100*time.Microsecond, 5*time.Millisecond, func() (func(context.Context) error, error) {
		r, err := s.c.do("SET", key, token, "NX", "PX", px)
		if err != nil || r != "OK" {
			return nil, err
		}
		return func(context.Context) error {
			_, err := s.c.do("EVAL", releaseScript, "1", key, token)
			return err
		}, nil
	})
}

func (s *redisSession) Read(ctx context.Context, key string) error {
	_, err := s.c.do("GET", key)
	return err
}

func (s *redisSession) Close() error { return s.c.Close() }

// redisConn speaks just enough RESP for the lock recipe.
type redisConn struct {
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

func dialRedis(ctx context.Context, addr string) (*redisConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &redisConn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}, nil
}

func (c *redisConn) Close() error { return c.nc.Close() }

// do sends one command and returns a simple or bulk string reply ("" for
// a nil bulk), or an error reply as an error.
func (c *redisConn) do(args ...string) (string, error) {
	fmt.Fprintf(c.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c.w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := c.w.Flush(); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 3 {
		return "", fmt.Errorf("redis: short reply %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', ':':
		return body, nil
	case '-':
		return "", errors.New("redis: " + body)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("redis: unexpected reply %q", line)
}
