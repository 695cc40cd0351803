package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/resp"
)

// redisSemantics is what summary.md says of how the Redis adapter maps
// the workload's calls, and where Redis differs from raftlock.
const redisSemantics = "Differences from raftlock, none of them a weakened check: a client asks a Sentinel for the primary and keeps " +
	"its connection to it until a call fails (as Sentinel clients do), so a client connected to a primary that was cut off " +
	"keeps using it; the lease is the key's PX, set on the primary after the acquire's invocation; replication is " +
	"asynchronous, so a failover may lose grants and the token counter's latest values; gets and lists read the primary " +
	"the client is connected to; no call carries a tag, so the committed-log audit, digest convergence and raftlock's " +
	"member counters are skipped."

// The lock recipe's scripts, each one atomic on the primary. A lock is
// the key lock:KEY holding its token; the token comes from INCR of
// fence, taken only when the lock is free (SET NX PX).
const (
	redisAcquire = `if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], t, 'NX', 'PX', ARGV[1])
return t`
	redisRenew   = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`
	redisRelease = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`
	redisForce   = `local v = redis.call('GET', KEYS[1]) if v then redis.call('DEL', KEYS[1]) return v end return 0`
	redisList    = `local out = {} for _, k in ipairs(redis.call('KEYS', 'lock:*')) do
local v = redis.call('GET', k) if v then table.insert(out, k) table.insert(out, v) end end return out`
	redisFence  = "fence"
	redisMaster = "mymaster"
)

// redisLocks is a workload client of Redis under Sentinel.
type redisLocks struct {
	sentinels []string

	mu     sync.Mutex // one call at a time, as the workload makes them
	conn   *resp.Conn // to the primary, its real address; nil: ask a Sentinel
	realOf map[string]string
}

// dialRedis makes a client of the Redis primary the Sentinels at
// endpoints name.
func dialRedis(endpoints []string) (LockClient, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("redis: no Sentinel addresses")
	}
	return &redisLocks{sentinels: endpoints, realOf: map[string]string{}}, nil
}

func (r *redisLocks) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drop()
	return nil
}

func (r *redisLocks) drop() {
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
}

// primary connects to the primary a Sentinel names, at its real address
// (the Sentinels know it through its proxy, which a partition cuts):
// asked of the instance through the proxy once, then remembered.
func (r *redisLocks) primary(ctx context.Context) (*resp.Conn, error) {
	if r.conn != nil {
		return r.conn, nil
	}
	var last error
	for _, s := range r.sentinels {
		addr, err := askMaster(ctx, s)
		if err != nil {
			last = err
			continue
		}
		real, ok := r.realOf[addr]
		if !ok {
			if real, err = realAddr(ctx, addr); err != nil {
				last = err
				continue
			}
			r.realOf[addr] = real
		}
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := resp.Dial(dctx, real)
		cancel()
		if err != nil {
			last = err
			continue
		}
		r.conn = c
		return c, nil
	}
	return nil, fmt.Errorf("%w: no primary: %v", client.ErrUnavailable, last)
}

// askMaster asks the Sentinel at s for the primary's address.
func askMaster(ctx context.Context, s string) (string, error) {
	a, err := callOnce(ctx, s, "SENTINEL", "get-master-addr-by-name", redisMaster)
	if err != nil {
		return "", err
	}
	if len(a) != 2 {
		return "", fmt.Errorf("sentinel %s: no primary known", s)
	}
	host, _ := a[0].(string)
	port, _ := a[1].(string)
	return net.JoinHostPort(host, port), nil
}

// realAddr asks the instance at addr the port it listens on.
func realAddr(ctx context.Context, addr string) (string, error) {
	a, err := callOnce(ctx, addr, "CONFIG", "GET", "port")
	if err != nil || len(a) != 2 {
		return "", fmt.Errorf("redis %s: port unknown: %v", addr, err)
	}
	port, _ := a[1].(string)
	host, _, _ := net.SplitHostPort(addr)
	return net.JoinHostPort(host, port), nil
}

// callOnce sends one command, whose answer is an array (nil when it is
// not), to the instance at addr on a connection of its own, within 500 ms.
func callOnce(ctx context.Context, addr string, args ...string) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	c, err := resp.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	v, err := c.Call(ctx, args...)
	a, _ := v.([]any)
	return a, err
}

// call runs one command on the primary. An error reply (READONLY from a
// demoted primary, LOADING, ...) ran nothing and is ErrUnavailable; a
// broken or timed-out connection is dropped and the outcome unknown.
func (r *redisLocks) call(ctx context.Context, args ...string) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.primary(ctx)
	if err != nil {
		return nil, err
	}
	v, err := c.Call(ctx, args...)
	var rerr *resp.Error
	switch {
	case err == nil, errors.Is(err, resp.ErrNil):
		return v, nil
	case errors.As(err, &rerr):
		if strings.HasPrefix(rerr.Msg, "READONLY") {
			r.drop() // a Sentinel names the new primary
		}
		return nil, fmt.Errorf("%w: %v", client.ErrUnavailable, err)
	}
	r.drop()
	return nil, unknown(err)
}

// intOf reads an integer reply.
func intOf(v any) uint64 {
	s, _ := v.(string)
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

func (r *redisLocks) AcquireWith(ctx context.Context, req client.AcquireRequest) (client.Grant, error) {
	deadline := time.Now().Add(req.Wait)
	for {
		v, err := r.call(ctx, "EVAL", redisAcquire, "2", "lock:"+req.Key, redisFence, strconv.FormatInt(req.Lease.Milliseconds(), 10))
		if err != nil {
			return client.Grant{}, err
		}
		if t := intOf(v); t > 0 {
			return client.Grant{Token: t, LeaseMS: uint64(req.Lease.Milliseconds())}, nil
		}
		if !time.Now().Before(deadline) {
			return client.Grant{}, client.ErrHeld
		}
		sleep(ctx, 10*time.Millisecond)
		if ctx.Err() != nil {
			return client.Grant{}, client.ErrHeld
		}
	}
}

// owned runs a script that acts only while the lock holds token: 0 is
// not-found.
func (r *redisLocks) owned(ctx context.Context, script, key string, args ...string) error {
	v, err := r.call(ctx, append([]string{"EVAL", script, "1", "lock:" + key}, args...)...)
	if err != nil {
		return err
	}
	if intOf(v) == 0 {
		return client.ErrNotFound
	}
	return nil
}

func (r *redisLocks) RenewTagged(ctx context.Context, key string, token uint64, lease time.Duration, _ uint64) error {
	return r.owned(ctx, redisRenew, key, strconv.FormatUint(token, 10), strconv.FormatInt(lease.Milliseconds(), 10))
}

func (r *redisLocks) ReleaseTagged(ctx context.Context, key string, token, _ uint64) error {
	return r.owned(ctx, redisRelease, key, strconv.FormatUint(token, 10))
}

func (r *redisLocks) ForceReleaseTagged(ctx context.Context, key string, _ uint64) (uint64, error) {
	v, err := r.call(ctx, "EVAL", redisForce, "1", "lock:"+key)
	if err != nil {
		return 0, err
	}
	if t := intOf(v); t > 0 {
		return t, nil
	}
	return 0, client.ErrNotFound
}

func (r *redisLocks) Get(ctx context.Context, key string) (client.LockInfo, error) {
	v, err := r.call(ctx, "GET", "lock:"+key)
	if err != nil {
		return client.LockInfo{}, err
	}
	if t := intOf(v); t > 0 {
		return client.LockInfo{Held: true, Token: t}, nil
	}
	return client.LockInfo{}, nil
}

func (r *redisLocks) List(ctx context.Context, o client.ListOptions) (client.LockPage, error) {
	v, err := r.call(ctx, "EVAL", redisList, "0")
	if err != nil {
		return client.LockPage{}, err
	}
	a, _ := v.([]any)
	locks := map[string]client.HeldLock{}
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		k = strings.TrimPrefix(k, "lock:")
		locks[k] = client.HeldLock{Key: k, Token: intOf(a[i+1])}
	}
	return pageOf(locks, o), nil
}
