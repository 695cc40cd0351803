package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/raftlock/raftlock/client"
)

// natsSemantics is what summary.md says of how the NATS adapter maps the
// workload's calls, and where NATS differs from raftlock.
const natsSemantics = "Differences from raftlock, none of them a weakened check: a lock is a key of a JetStream key-value bucket " +
	"replicated on the three servers; an acquire creates it (a publish expecting no message on its subject, or, when the " +
	"key's last message is a delete marker, expecting that marker's sequence), and the fencing token is the revision the " +
	"create was stored at; a lease is the bucket's MaxAge, the same for every hold (--lease-max: no hold expires before the " +
	"lease its client asked for), counted from when the stream's leader stored the write, and expiry is the stream removing " +
	"the message once it is that old, which NATS does on a timer, so a lock may outlive its lease by a little; a renewal " +
	"rewrites the key at its current revision, carrying the grant's token in the value, which restarts its MaxAge; a " +
	"release writes a delete marker expecting the holder's current revision; gets and lists read the stream's leader " +
	"(a client that finds the bucket's stream gone creates it again, as an application calling CreateKeyValue at its start does) " +
	"(direct gets, which any replica may serve, are off); no call carries a tag, so the committed-log audit, digest " +
	"convergence and raftlock's member counters are skipped."

// natsExpiryLag is how late the server may remove an expired message
// past its MaxAge, as the client-pause family waits for it.
const natsExpiryLag = 500 * time.Millisecond

// The key-value conventions nats.go's KV API keeps: a key is the subject
// $KV.<bucket>.<key>, a delete is an empty message whose KV-Operation
// header says DEL (or PURGE).
const (
	natsSubjectPrefix = "$KV." + natsBucket + "."
	natsOpHeader      = "KV-Operation"
	natsOpDelete      = "DEL"
	natsOpPurge       = "PURGE"
)

// natsLocks is a workload client of the NATS cluster's bucket.
type natsLocks struct {
	nc *nats.Conn
	js jetstream.JetStream

	ttl time.Duration // the bucket's MaxAge, should the client create it

	mu     sync.Mutex
	stream jetstream.Stream // bound on first use, again after no stream answered
	// rev is the current revision of each hold this client has: its
	// token until a renewal rewrites the key.
	rev map[holderRef]uint64
}

// dialNats makes a client of the NATS servers at endpoints, whose
// bucket has MaxAge ttl.
func dialNats(endpoints []string, ttl time.Duration) (LockClient, error) {
	if len(endpoints) == 0 {
		return nil, errNoNats
	}
	nc, err := nats.Connect(strings.Join(natsURLs(endpoints), ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.Timeout(time.Second), nats.NoEcho())
	if err != nil {
		return nil, fmt.Errorf("nats client: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats client: %w", err)
	}
	return &natsLocks{nc: nc, js: js, ttl: ttl, rev: map[holderRef]uint64{}}, nil
}

func (n *natsLocks) Close() error {
	n.nc.Close()
	return nil
}

// bucket binds the bucket's stream, creating it if the cluster says it
// does not exist, as an application that calls CreateKeyValue at its
// start would (a power failure can lose a stream: a server's meta
// layer that forgot it deletes it as orphaned).
func (n *natsLocks) bucket(ctx context.Context) (jetstream.Stream, error) {
	n.mu.Lock()
	s := n.stream
	n.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := n.js.Stream(ctx, natsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = n.js.CreateOrUpdateStream(ctx, bucketConfig(n.ttl))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: bind the bucket: %v", client.ErrUnavailable, err)
	}
	n.mu.Lock()
	n.stream = s
	n.mu.Unlock()
	return s, nil
}

// unbind forgets the bound stream after a publish no stream answered:
// the next call binds again, and creates the bucket if it is gone.
func (n *natsLocks) unbind() {
	n.mu.Lock()
	n.stream = nil
	n.mu.Unlock()
}

// natsOutcome is the workload's reading of a publish's or a read's
// error: a compare that failed (the expected revision was not the key's
// last, 10071) is mismatch; an answer that says nothing was stored (no
// server had the stream: no responders; the stream answered with any
// other API error) is ErrUnavailable; anything else (a timeout, a
// connection lost with the request out) leaves the outcome unknown.
//
// 10164 is not a mismatch: a replicated stream's leader answers it when
// another write to the subject is in flight, before that write commits
// (nats-server's jetstream_batching.go), so it says nothing of the key's
// value, and a read just after may still find the key free. nats.go's
// KV Create reads it as ErrKeyExists; a lock client that did would
// report a lock held while it is free (seen: free, held, free in three
// calls, with no grant or release between).
func natsOutcome(err, mismatch error) error {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case isInFlight(err):
		return fmt.Errorf("%w: %v", client.ErrUnavailable, err)
	case isWrongLastSeq(err):
		return mismatch
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("%w: %v", client.ErrUnavailable, err)
	case errors.As(err, &apiErr):
		return fmt.Errorf("%w: %v", client.ErrUnavailable, err)
	}
	return unknown(err)
}

// isWrongLastSeq says whether err is JetStream's answer to a publish
// whose expected last sequence for its subject was not the subject's
// (10071).
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// isInFlight says whether err is a replicated stream's refusal of a
// compare while another write to the subject is in flight (10164).
func isInFlight(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// natsValue is what a lock's key holds: its owner, and once a renewal
// has rewritten it, the grant's token (a create's token is the revision
// it was stored at, which the value cannot know).
func natsValue(owner string, token uint64) []byte {
	if token == 0 {
		return []byte("o=" + owner)
	}
	return []byte("t=" + strconv.FormatUint(token, 10) + ";o=" + owner)
}

// parseNatsValue reads a lock's value stored at revision rev: its token
// and owner. A value it cannot read is an error, never a token.
func parseNatsValue(v []byte, rev uint64) (token uint64, owner string, err error) {
	s := string(v)
	if rest, ok := strings.CutPrefix(s, "o="); ok {
		return rev, rest, nil
	}
	t, rest, ok := strings.Cut(strings.TrimPrefix(s, "t="), ";o=")
	if !ok || !strings.HasPrefix(s, "t=") {
		return 0, "", fmt.Errorf("nats: lock value %q is not ours", s)
	}
	token, err = strconv.ParseUint(t, 10, 64)
	if err != nil || token == 0 || token > rev {
		return 0, "", fmt.Errorf("nats: lock value %q names no token before revision %d", s, rev)
	}
	return token, rest, nil
}

// natsEntry is a key's last message: free when there is none or it is a
// delete marker.
type natsEntry struct {
	rev     uint64 // 0: the key has no message
	deleted bool
	token   uint64
	owner   string
}

// last reads key's last message from the stream's leader.
func (n *natsLocks) last(ctx context.Context, key string) (natsEntry, error) {
	s, err := n.bucket(ctx)
	if err != nil {
		return natsEntry{}, err
	}
	m, err := s.GetLastMsgForSubject(ctx, natsSubjectPrefix+key)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return natsEntry{}, nil
	case err != nil:
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return natsEntry{}, nil
		}
		return natsEntry{}, fmt.Errorf("%w: read %s: %v", client.ErrUnavailable, key, err)
	}
	return entryOf(m.Sequence, m.Header.Get(natsOpHeader), m.Data)
}

// entryOf is the entry of a message stored at rev with KV-Operation op
// and data.
func entryOf(rev uint64, op string, data []byte) (natsEntry, error) {
	if op == natsOpDelete || op == natsOpPurge {
		return natsEntry{rev: rev, deleted: true}, nil
	}
	token, owner, err := parseNatsValue(data, rev)
	if err != nil {
		return natsEntry{}, err
	}
	return natsEntry{rev: rev, token: token, owner: owner}, nil
}

// publish writes data (a delete marker when del) to key expecting its
// last revision to be rev (0: none): the stored revision, or the
// workload's error, mismatch when the key had moved on.
func (n *natsLocks) publish(ctx context.Context, key string, data []byte, del bool, rev uint64, mismatch error) (uint64, error) {
	m := &nats.Msg{Subject: natsSubjectPrefix + key, Data: data, Header: nats.Header{}}
	if del {
		m.Header.Set(natsOpHeader, natsOpDelete)
	}
	ack, err := n.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		n.unbind()
	}
	if err != nil {
		return 0, natsOutcome(err, mismatch)
	}
	return ack.Sequence, nil
}

func (n *natsLocks) AcquireWith(ctx context.Context, r client.AcquireRequest) (client.Grant, error) {
	deadline := time.Now().Add(r.Wait)
	for {
		g, err := n.tryAcquire(ctx, r)
		if !errors.Is(err, client.ErrHeld) || !time.Now().Before(deadline) {
			return g, err
		}
		sleep(ctx, 10*time.Millisecond)
		if ctx.Err() != nil {
			return client.Grant{}, client.ErrHeld
		}
	}
}

// tryAcquire creates the key, or rewrites the delete marker a release
// left at its revision: the revision stored is the token.
func (n *natsLocks) tryAcquire(ctx context.Context, r client.AcquireRequest) (client.Grant, error) {
	if _, err := n.bucket(ctx); err != nil {
		return client.Grant{}, err
	}
	val := natsValue(r.Owner, 0)
	rev, err := n.publish(ctx, r.Key, val, false, 0, client.ErrHeld)
	if errors.Is(err, client.ErrHeld) {
		expect, ferr := afterRefusedCreate(n.last(ctx, r.Key))
		if ferr != nil {
			return client.Grant{}, ferr
		}
		rev, err = n.publish(ctx, r.Key, val, false, expect, client.ErrHeld)
	}
	if err != nil {
		return client.Grant{}, err
	}
	n.mu.Lock()
	n.rev[holderRef{r.Key, rev}] = rev
	n.mu.Unlock()
	return client.Grant{Token: rev, LeaseMS: uint64(n.ttl.Milliseconds())}, nil
}

// afterRefusedCreate is what an acquire whose create was refused (the
// key had a message) does with its read of the key's last message: held
// when the read finds a hold (the key was held then), the revision of
// the delete marker to rewrite when it finds one. A read that failed, or
// that finds no message (the one that refused the create expired since),
// says nothing of whether the key was held: unavailable, a definite
// failure that claims no holder (nothing was written).
func afterRefusedCreate(e natsEntry, err error) (uint64, error) {
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: read after a refused create: %v", client.ErrUnavailable, err)
	case e.rev == 0:
		return 0, fmt.Errorf("%w: the key's message went away after it refused the create", client.ErrUnavailable)
	case !e.deleted:
		return 0, client.ErrHeld
	}
	return e.rev, nil
}

// current is the current revision of a hold this client acquired.
func (n *natsLocks) current(key string, token uint64) (uint64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	rev, ok := n.rev[holderRef{key, token}]
	return rev, ok
}

// RenewTagged rewrites the hold's key at its current revision, which
// restarts its MaxAge; the value carries the token on.
func (n *natsLocks) RenewTagged(ctx context.Context, key string, token uint64, _ time.Duration, _ uint64) error {
	cur, ok := n.current(key, token)
	if !ok {
		return client.ErrNotFound
	}
	e, err := n.last(ctx, key)
	if err != nil {
		return err
	}
	if e.rev != cur || e.deleted {
		return client.ErrNotFound
	}
	rev, err := n.publish(ctx, key, natsValue(e.owner, token), false, cur, client.ErrNotFound)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.rev[holderRef{key, token}] = rev
	n.mu.Unlock()
	return nil
}

// ReleaseTagged writes a delete marker expecting the hold's current
// revision: a hold that expired, or was released by force, is not-found.
func (n *natsLocks) ReleaseTagged(ctx context.Context, key string, token, _ uint64) error {
	cur, ok := n.current(key, token)
	if !ok {
		return client.ErrNotFound
	}
	_, err := n.publish(ctx, key, nil, true, cur, client.ErrNotFound)
	if err == nil || errors.Is(err, client.ErrNotFound) {
		n.mu.Lock()
		delete(n.rev, holderRef{key, token})
		n.mu.Unlock()
	}
	return err
}

// ForceReleaseTagged deletes the key at the revision it was read at,
// whoever holds it.
func (n *natsLocks) ForceReleaseTagged(ctx context.Context, key string, _ uint64) (uint64, error) {
	for range 5 {
		e, err := n.last(ctx, key)
		if err != nil {
			return 0, err
		}
		if e.rev == 0 || e.deleted {
			return 0, client.ErrNotFound
		}
		_, err = n.publish(ctx, key, nil, true, e.rev, errRevMoved)
		if err == nil {
			return e.token, nil
		}
		if !errors.Is(err, errRevMoved) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: the key kept changing", client.ErrUnavailable)
}

// errRevMoved is a forced release's compare that failed: read again.
var errRevMoved = errors.New("the key moved on")

// Get reads the key's last message from the stream's leader.
func (n *natsLocks) Get(ctx context.Context, key string) (client.LockInfo, error) {
	e, err := n.last(ctx, key)
	if err != nil {
		return client.LockInfo{}, err
	}
	if e.rev == 0 || e.deleted {
		return client.LockInfo{}, nil
	}
	return client.LockInfo{Held: true, Token: e.token, Owner: e.owner}, nil
}

// List reads the subjects the stream holds, then each one's last
// message: not one atomic read, as NATS has none across keys.
func (n *natsLocks) List(ctx context.Context, o client.ListOptions) (client.LockPage, error) {
	s, err := n.bucket(ctx)
	if err != nil {
		return client.LockPage{}, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(natsSubjectPrefix+">"))
	if err != nil {
		return client.LockPage{}, fmt.Errorf("%w: %v", client.ErrUnavailable, err)
	}
	locks := map[string]client.HeldLock{}
	for subj := range info.State.Subjects {
		k := strings.TrimPrefix(subj, natsSubjectPrefix)
		if k == "probe" || !strings.HasPrefix(k, o.Prefix) {
			continue
		}
		e, err := n.last(ctx, k)
		if err != nil {
			return client.LockPage{}, err
		}
		if e.rev != 0 && !e.deleted {
			locks[k] = client.HeldLock{Key: k, Token: e.token, Owner: e.owner}
		}
	}
	return pageOf(locks, o), nil
}
