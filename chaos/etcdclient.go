package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/raftlock/raftlock/client"
)

// etcdSemantics is what summary.md says of how the etcd adapter maps
// etcd's lock onto the workload's calls, and where it differs.
const etcdSemantics = "Differences from raftlock, none of them a weakened check: a lease is etcd's whole-second TTL " +
	"(the asked lease rounded up, at least 1 s), granted after the acquire's invocation, so counting it from the invocation " +
	"as the lease-timing check does is never later than etcd; a renewal is a keepalive of that lease; " +
	"a release or renewal of a lock whose key is gone (its lease expired, or a forced release deleted it) is recorded as " +
	"not-found, where concurrency.Mutex's Unlock succeeds silently; gets and lists read the lowest create revision " +
	"under each lock's prefix; no call carries a tag, so the committed-log audit, digest convergence and raftlock's " +
	"member counters are skipped."

// etcdLockPrefix is where the adapter keeps the locks: one prefix per
// lock key, one key per acquire under it (concurrency.Mutex's layout).
const etcdLockPrefix = "/chaos/lock/"

// etcdLocks is a workload client of etcd: the lock recipe of etcd's
// concurrency.Mutex (a key under the lock's prefix bound to a lease, the
// lowest create revision owns the lock, a waiter watches the key just
// below its own) written over clientv3 rather than called through Mutex,
// because Mutex's failure paths are not definite: TryLock, and Lock when
// its wait ends, delete their key unconditionally, so an attempt
// reported failed may for a moment have owned the lock (a reader sees a
// token nobody was granted). This adapter deletes its key only while the
// owner it saw still exists, and otherwise reports the grant it got. The
// fencing token is the key's create revision.
type etcdLocks struct {
	cli *clientv3.Client
	mu  sync.Mutex
	// held maps a lock (key, token) this client acquired to its lease.
	held map[holderRef]clientv3.LeaseID
}

// holderRef names one hold: a lock key and its token.
type holderRef struct {
	key   string
	token uint64
}

// dialEtcd makes a client of the etcd members at endpoints.
func dialEtcd(endpoints []string) (LockClient, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return &etcdLocks{cli: cli, held: map[holderRef]clientv3.LeaseID{}}, nil
}

func (e *etcdLocks) Close() error { return e.cli.Close() }

// etcdTTL is the whole-second TTL of a lease of d: etcd's leases are
// whole seconds.
func etcdTTL(d time.Duration) int64 { return max(1, int64(math.Ceil(d.Seconds()))) }

// unknown marks err as an outcome the client cannot know.
func unknown(err error) error { return fmt.Errorf("%w: %v", client.ErrOutcomeUnknown, err) }

func lockPrefix(key string) string { return etcdLockPrefix + key + "/" }

func (e *etcdLocks) AcquireWith(ctx context.Context, r client.AcquireRequest) (client.Grant, error) {
	lease, err := e.cli.Grant(ctx, etcdTTL(r.Lease))
	if err != nil {
		// A lease alone locks nothing: whatever became of it, the lock
		// was not taken.
		return client.Grant{}, fmt.Errorf("%w: lease grant: %v", client.ErrUnavailable, err)
	}
	pfx := lockPrefix(r.Key)
	myKey := fmt.Sprintf("%s%x", pfx, int64(lease.ID))
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(myKey), "=", 0)).
		Then(clientv3.OpPut(myKey, r.Owner, clientv3.WithLease(lease.ID)), clientv3.OpGet(pfx, clientv3.WithFirstCreate()...)).Commit()
	if err != nil {
		e.revoke(lease.ID)
		return client.Grant{}, unknown(err)
	}
	myRev := resp.Header.Revision
	first := resp.Responses[1].GetResponseRange().Kvs
	g := client.Grant{Token: uint64(myRev), LeaseMS: uint64(etcdTTL(r.Lease) * 1000)}
	if len(first) == 0 || first[0].CreateRevision == myRev {
		e.remember(r.Key, g.Token, lease.ID)
		return g, nil
	}
	if r.Wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, r.Wait)
		owned, err := e.waitOwner(wctx, pfx, myRev)
		cancel()
		switch {
		case owned:
			e.remember(r.Key, g.Token, lease.ID)
			return g, nil
		case err != nil && ctx.Err() == nil && wctx.Err() == nil:
			e.revoke(lease.ID)
			return client.Grant{}, unknown(err)
		}
	}
	return e.giveUp(ctx, r.Key, pfx, myKey, myRev, lease.ID, g)
}

// waitOwner waits until myRev is the lowest create revision under pfx:
// true once it is; false with an error if the key vanished (its lease
// ran out: it may have owned the lock meanwhile) or ctx ended.
func (e *etcdLocks) waitOwner(ctx context.Context, pfx string, myRev int64) (bool, error) {
	for {
		resp, err := e.cli.Get(ctx, pfx, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(myRev-1))...)
		if err != nil {
			return false, err
		}
		if len(resp.Kvs) == 0 {
			first, err := e.cli.Get(ctx, pfx, clientv3.WithFirstCreate()...)
			if err != nil {
				return false, err
			}
			if len(first.Kvs) == 1 && first.Kvs[0].CreateRevision == myRev {
				return true, nil
			}
			return false, errors.New("the waiter's key vanished: its lease ran out")
		}
		wch := e.cli.Watch(ctx, string(resp.Kvs[0].Key), clientv3.WithRev(resp.Header.Revision+1))
		deleted := false
		for wr := range wch {
			for _, ev := range wr.Events {
				deleted = deleted || ev.Type == clientv3.EventTypeDelete
			}
			if deleted || wr.Err() != nil {
				break
			}
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
}

// giveUp withdraws an attempt that does not own the lock: its key is
// deleted only while a key below it still exists, so the attempt never
// owned the lock and is a definite held. If the keys below are gone, it
// owns the lock after all and reports the grant; if its own key is gone,
// its lease ran out and it may have owned the lock meanwhile: unknown.
func (e *etcdLocks) giveUp(ctx context.Context, key, pfx, myKey string, myRev int64, lease clientv3.LeaseID, g client.Grant) (client.Grant, error) {
	for range 5 {
		below, err := e.cli.Get(ctx, pfx, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(myRev-1))...)
		if err != nil {
			e.revoke(lease)
			return client.Grant{}, unknown(err)
		}
		if len(below.Kvs) == 0 {
			break
		}
		kv := below.Kvs[0]
		resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
			Then(clientv3.OpDelete(myKey)).Commit()
		if err != nil {
			e.revoke(lease)
			return client.Grant{}, unknown(err)
		}
		if resp.Succeeded {
			e.revoke(lease)
			return client.Grant{}, client.ErrHeld
		}
	}
	first, err := e.cli.Get(ctx, pfx, clientv3.WithFirstCreate()...)
	if err == nil && len(first.Kvs) == 1 && first.Kvs[0].CreateRevision == myRev {
		e.remember(key, g.Token, lease)
		return g, nil
	}
	e.revoke(lease)
	if err == nil {
		err = errors.New("the attempt's key vanished: its lease ran out")
	}
	return client.Grant{}, unknown(err)
}

func (e *etcdLocks) remember(key string, token uint64, lease clientv3.LeaseID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.held[holderRef{key, token}] = lease
}

// lease is the lease of a hold this client acquired.
func (e *etcdLocks) lease(key string, token uint64) (clientv3.LeaseID, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	id, ok := e.held[holderRef{key, token}]
	return id, ok
}

// revoke ends a lease the client no longer needs, in the background:
// its keys go with it, and if the revoke is lost the lease runs out.
func (e *etcdLocks) revoke(id clientv3.LeaseID) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		e.cli.Revoke(ctx, id)
	}()
}

// RenewTagged keeps the hold's lease alive once (etcd renews it for its
// TTL) and answers ok only if the hold's key still exists.
func (e *etcdLocks) RenewTagged(ctx context.Context, key string, token uint64, _ time.Duration, _ uint64) error {
	id, ok := e.lease(key, token)
	if !ok {
		return client.ErrNotFound
	}
	if _, err := e.cli.KeepAliveOnce(ctx, id); err != nil {
		if strings.Contains(err.Error(), "requested lease not found") {
			return client.ErrNotFound
		}
		return unknown(err)
	}
	myKey := fmt.Sprintf("%s%x", lockPrefix(key), int64(id))
	// The Get is what makes this read linearizable: etcd serves a
	// transaction of compares alone as a serializable read, from the
	// member's own state, which may be stale (seen: a renewal answered
	// not-found and the release just after it succeeded).
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(myKey), "=", int64(token))).
		Then(clientv3.OpGet(myKey, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return unknown(err)
	}
	if !resp.Succeeded {
		return client.ErrNotFound
	}
	return nil
}

// ReleaseTagged deletes the hold's key only if it is still the one the
// grant created: an expired or evicted hold is not-found (Mutex.Unlock's
// Delete would succeed and delete nothing).
func (e *etcdLocks) ReleaseTagged(ctx context.Context, key string, token, _ uint64) error {
	id, ok := e.lease(key, token)
	if !ok {
		return client.ErrNotFound
	}
	myKey := fmt.Sprintf("%s%x", lockPrefix(key), int64(id))
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(myKey), "=", int64(token))).
		Then(clientv3.OpDelete(myKey)).Commit()
	if err != nil {
		return unknown(err)
	}
	e.mu.Lock()
	delete(e.held, holderRef{key, token})
	e.mu.Unlock()
	e.revoke(id)
	if !resp.Succeeded {
		return client.ErrNotFound
	}
	return nil
}

// ForceReleaseTagged deletes the owner's key, whoever it is, if it is
// still the owner when deleted.
func (e *etcdLocks) ForceReleaseTagged(ctx context.Context, key string, _ uint64) (uint64, error) {
	pfx := lockPrefix(key)
	for range 5 {
		first, err := e.cli.Get(ctx, pfx, clientv3.WithFirstCreate()...)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", client.ErrUnavailable, err)
		}
		if len(first.Kvs) == 0 {
			return 0, client.ErrNotFound
		}
		kv := first.Kvs[0]
		resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
			Then(clientv3.OpDelete(string(kv.Key))).Commit()
		if err != nil {
			return 0, unknown(err)
		}
		if resp.Succeeded {
			return uint64(kv.CreateRevision), nil
		}
	}
	return 0, fmt.Errorf("%w: the owner kept changing", client.ErrUnavailable)
}

// Get reads the lock's owner: the lowest create revision under its
// prefix (a linearizable read).
func (e *etcdLocks) Get(ctx context.Context, key string) (client.LockInfo, error) {
	resp, err := e.cli.Get(ctx, lockPrefix(key), clientv3.WithFirstCreate()...)
	if err != nil {
		return client.LockInfo{}, err
	}
	if len(resp.Kvs) == 0 {
		return client.LockInfo{}, nil
	}
	kv := resp.Kvs[0]
	return client.LockInfo{Held: true, Token: uint64(kv.CreateRevision), Owner: string(kv.Value)}, nil
}

// List reads every lock's owner in one read and pages them in key order.
func (e *etcdLocks) List(ctx context.Context, o client.ListOptions) (client.LockPage, error) {
	resp, err := e.cli.Get(ctx, etcdLockPrefix+o.Prefix, clientv3.WithPrefix())
	if err != nil {
		return client.LockPage{}, err
	}
	owners := map[string]client.HeldLock{}
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), etcdLockPrefix)
		i := strings.LastIndexByte(k, '/')
		if i < 0 {
			continue
		}
		k = k[:i]
		if cur, ok := owners[k]; !ok || uint64(kv.CreateRevision) < cur.Token {
			owners[k] = client.HeldLock{Key: k, Token: uint64(kv.CreateRevision), Owner: string(kv.Value)}
		}
	}
	return pageOf(owners, o), nil
}

// pageOf is the page of locks o asks for: keys after o.After, in order,
// at most o.Limit (default 100).
func pageOf(locks map[string]client.HeldLock, o client.ListOptions) client.LockPage {
	limit := o.Limit
	if limit == 0 {
		limit = 100
	}
	var keys []string
	for k := range locks {
		if k > o.After && strings.HasPrefix(k, o.Prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var page client.LockPage
	for i, k := range keys {
		if i == limit {
			page.More = true
			break
		}
		page.Locks = append(page.Locks, locks[k])
	}
	return page
}
