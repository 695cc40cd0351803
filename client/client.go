// Package client is the Go client for a raftlock cluster.
//
// A Client keeps one pipelined connection per member, finds the leader by
// following redirects, and retries only what is safe to retry: a call that
// was never sent, a read, or a call the cluster answered Unavailable or
// Overloaded (nothing was proposed). A lock-changing call whose connection broke after it was
// sent is never retried; it returns ErrOutcomeUnknown.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/retry"
)

// Errors returned by Client calls.
var (
	ErrHeld           = errors.New("raftlock: lock is held")
	ErrNotFound       = errors.New("raftlock: not the holder")
	ErrUnavailable    = errors.New("raftlock: cluster unavailable")
	ErrOutcomeUnknown = errors.New("raftlock: outcome unknown")
	ErrClosed         = errors.New("raftlock: client closed")
	// ErrOverloaded: the member hit one of its limits (README, Limits) and
	// proposed nothing. Calls retry it with a jittered backoff until their
	// deadline; this is what one returns when the deadline came first.
	ErrOverloaded = errors.New("raftlock: cluster overloaded")
	// ErrNoMember: every endpoint refused the connection; nothing was
	// sent, so nothing happened.
	ErrNoMember = errors.New("raftlock: no member reachable")
	// ErrPermissionDenied: the member's ACL does not let this client's
	// identity (its certificate's common name) make the call.
	ErrPermissionDenied = errors.New("raftlock: permission denied")
	// ErrCompacted: a watch resumed after a revision no member asked
	// still holds the events after (wire.OpCompacted): list the locks
	// again and watch from there.
	ErrCompacted = errors.New("raftlock: compacted")
	// ErrUnknownCapture: a snapshot.save read named a capture the leader
	// no longer holds (dropped, or the leader changed); start a new one.
	ErrUnknownCapture = errors.New("raftlock: " + wire.ReasonUnknownCapture)
)

// InvalidArgumentError is the cluster rejecting a call's arguments.
type InvalidArgumentError struct{ Reason string }

func (e *InvalidArgumentError) Error() string { return "raftlock: invalid argument: " + e.Reason }

// Is makes errors.Is(err, ErrUnknownCapture) true of the answer to a read
// of a dropped snapshot capture.
func (e *InvalidArgumentError) Is(target error) bool {
	return target == ErrUnknownCapture && strings.HasPrefix(e.Reason, wire.ReasonUnknownCapture)
}

// ServerError is an answer the client has no better name for (for example
// the state machine's defensive GrantRejected).
type ServerError struct{ Reason string }

func (e *ServerError) Error() string { return "raftlock: server error: " + e.Reason }

// Options tune a Client.
type Options struct {
	DialTimeout time.Duration // default 1s
	Logger      *slog.Logger  // default: discard
	// TLS, when set, makes every connection mutual TLS with this
	// configuration (a client certificate and the cluster's CA); its
	// ServerName defaults to each endpoint's host.
	TLS *tls.Config
	// Owner is recorded with every lock this client acquires (at most 128
	// bytes; "" records none), for get and list to show who holds it.
	// DefaultOwner gives the CLI's default, HOSTNAME:PID.
	Owner string
}

// DefaultOwner names this process as HOSTNAME:PID, the owner the CLI
// records by default.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	owner := fmt.Sprintf("%s:%d", host, os.Getpid())
	if len(owner) > wire.MaxOwnerLen {
		owner = owner[len(owner)-wire.MaxOwnerLen:]
	}
	return owner
}

// Client talks to one cluster. It is safe for concurrent use.
type Client struct {
	endpoints []string
	opts      Options
	nextID    atomic.Uint64

	targets *retry.Targets

	mu     sync.Mutex
	conns  map[string]*conn
	closed bool

	// beforeBackoff, when set (by tests, export_test.go), is called before
	// each wait between two attempts of a call, with why the last one
	// failed: the one moment no attempt is in flight, which a test cannot
	// reach by timing on a loaded machine.
	beforeBackoff func(ctx context.Context, lastErr error)
}

// New returns a client for the cluster whose members serve endpoints.
func New(endpoints []string, opts Options) (*Client, error) {
	targets, err := retry.NewTargets(endpoints)
	if err != nil {
		return nil, err
	}
	eps := targets.Endpoints()
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := wire.ValidateOwner(opts.Owner); err != nil {
		return nil, &InvalidArgumentError{Reason: err.Error()}
	}
	return &Client{endpoints: eps, opts: opts, targets: targets, conns: make(map[string]*conn)}, nil
}

// Endpoints returns the configured member addresses.
func (c *Client) Endpoints() []string { return append([]string(nil), c.endpoints...) }

// Close closes every connection; calls in flight fail.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*conn{}
	c.mu.Unlock()
	for _, cn := range conns {
		cn.close(ErrClosed)
	}
	return nil
}

// Grant is a successful acquire.
type Grant struct {
	Token   uint64
	LeaseMS uint64
}

// Acquire takes key for lease. wait 0 is a try-acquire that fails with
// ErrHeld at once when the key is held; otherwise the call queues (FIFO) for
// up to wait and fails with ErrHeld when it runs out. ctx must outlast wait.
func (c *Client) Acquire(ctx context.Context, key string, lease, wait time.Duration) (Grant, error) {
	return c.AcquireTagged(ctx, key, lease, wait, 0)
}

// AcquireTagged is Acquire with a caller-chosen operation id that the
// cluster records with the grant in its log (for post-run audits).
func (c *Client) AcquireTagged(ctx context.Context, key string, lease, wait time.Duration, tag uint64) (Grant, error) {
	return c.AcquireWith(ctx, AcquireRequest{Key: key, Lease: lease, Wait: wait, Tag: tag, Owner: c.opts.Owner})
}

// AcquireRequest is every argument of an acquire.
type AcquireRequest struct {
	Key   string
	Lease time.Duration
	Wait  time.Duration // 0: a try-acquire
	// Owner is recorded with the lock (at most 128 bytes); AcquireWith
	// uses it as given, "" included, whatever Options.Owner says.
	Owner string
	Tag   uint64 // an operation id recorded in the log, as AcquireTagged
}

// AcquireWith is Acquire with every argument named, the owner included.
func (c *Client) AcquireWith(ctx context.Context, r AcquireRequest) (Grant, error) {
	lease := r.Lease
	if err := validate(r.Key, &lease); err != nil {
		return Grant{}, err
	}
	if err := wire.ValidateKey(r.Key); err != nil { // a new key: the key rule
		return Grant{}, &InvalidArgumentError{Reason: err.Error()}
	}
	if err := wire.ValidateOwner(r.Owner); err != nil {
		return Grant{}, &InvalidArgumentError{Reason: err.Error()}
	}
	resp, err := c.call(ctx, &wire.Request{Op: wire.OpAcquire, Key: r.Key, Owner: r.Owner,
		LeaseMS: uint64(lease.Milliseconds()), WaitMS: uint64(max(r.Wait, 0).Milliseconds()), Tag: r.Tag}, false)
	if err != nil {
		return Grant{}, err
	}
	switch resp.Op {
	case wire.OpGranted:
		return Grant{Token: resp.Token, LeaseMS: resp.LeaseMS}, nil
	case wire.OpHeld:
		return Grant{}, ErrHeld
	}
	return Grant{}, answerError(resp)
}

// Release gives key up; token must be the holder's, or ErrNotFound.
func (c *Client) Release(ctx context.Context, key string, token uint64) error {
	return c.ReleaseTagged(ctx, key, token, 0)
}

// ReleaseTagged is Release with an operation id recorded in the log, as
// AcquireTagged.
func (c *Client) ReleaseTagged(ctx context.Context, key string, token, tag uint64) error {
	if err := validate(key, nil); err != nil {
		return err
	}
	resp, err := c.call(ctx, &wire.Request{Op: wire.OpRelease, Key: key, Token: token, Tag: tag}, false)
	if err != nil {
		return err
	}
	if resp.Op == wire.OpReleased {
		return nil
	}
	return answerError(resp)
}

// ForceRelease frees key whatever its token and returns the token it
// released: for an operator, with the admin right when the cluster has an
// ACL (ErrPermissionDenied otherwise). The leader releases the holder's
// token, read from a table confirmed current, so a forced release never
// ends a later grant; ErrNotFound when the key was not held. Fencing still
// holds: the next grant's token is higher than the one released.
func (c *Client) ForceRelease(ctx context.Context, key string) (uint64, error) {
	return c.ForceReleaseTagged(ctx, key, 0)
}

// ForceReleaseTagged is ForceRelease with an operation id recorded in the
// log, as AcquireTagged.
func (c *Client) ForceReleaseTagged(ctx context.Context, key string, tag uint64) (uint64, error) {
	if err := validate(key, nil); err != nil {
		return 0, err
	}
	resp, err := c.call(ctx, &wire.Request{Op: wire.OpRelease, Key: key, Force: true, Tag: tag}, false)
	if err != nil {
		return 0, err
	}
	if resp.Op == wire.OpReleased {
		return resp.Token, nil
	}
	return 0, answerError(resp)
}

// Renew restarts the holder's lease at lease from now.
func (c *Client) Renew(ctx context.Context, key string, token uint64, lease time.Duration) error {
	return c.RenewTagged(ctx, key, token, lease, 0)
}

// RenewTagged is Renew with an operation id recorded in the log, as
// AcquireTagged.
func (c *Client) RenewTagged(ctx context.Context, key string, token uint64, lease time.Duration, tag uint64) error {
	if err := validate(key, &lease); err != nil {
		return err
	}
	resp, err := c.call(ctx, &wire.Request{Op: wire.OpRenew, Key: key, Token: token, LeaseMS: uint64(lease.Milliseconds()), Tag: tag}, false)
	if err != nil {
		return err
	}
	if resp.Op == wire.OpRenewed {
		return nil
	}
	return answerError(resp)
}

// LockInfo is a Get answer.
type LockInfo struct {
	Held        bool
	Token       uint64
	Owner       string // what the holder's acquire recorded
	RemainingMS uint64
}

// Get reads key linearizably (through the leader's ReadIndex).
func (c *Client) Get(ctx context.Context, key string) (LockInfo, error) {
	return c.get(ctx, key, false)
}

// GetStale reads key from whichever member answers, possibly stale.
func (c *Client) GetStale(ctx context.Context, key string) (LockInfo, error) {
	return c.get(ctx, key, true)
}

func (c *Client) get(ctx context.Context, key string, stale bool) (LockInfo, error) {
	if err := validate(key, nil); err != nil {
		return LockInfo{}, err
	}
	resp, err := c.call(ctx, &wire.Request{Op: wire.OpGet, Key: key, Stale: stale}, true)
	if err != nil {
		return LockInfo{}, err
	}
	if resp.Op == wire.OpValue {
		return LockInfo{Held: resp.Held, Token: resp.Token, Owner: resp.Owner, RemainingMS: resp.RemainingMS}, nil
	}
	return LockInfo{}, answerError(resp)
}

// ListOptions page a List.
type ListOptions struct {
	Prefix string // only keys that start with it
	After  string // only keys after it: the last key of the previous page
	Limit  int    // at most this many (1..1000; 0: 100)
	Stale  bool   // read whichever member answers, possibly stale
}

// HeldLock is one lock of a List page: its key, its holder's token and
// owner, and the lease time left. Its JSON is a listed lock of the HTTP
// API and of raftlock list --json.
type HeldLock = wire.Lock

// LockPage is a page of held locks in key order. More says that locks
// follow the last one: list again with After set to its key. A page may
// hold fewer than Limit locks when their keys and owners fill one answer.
// Its JSON is the HTTP API's list answer (without next) and raftlock list
// --json's.
type LockPage struct {
	Locks []HeldLock `json:"locks"`
	More  bool       `json:"more"`
}

// List reads a page of the held locks, linearizably unless o.Stale.
func (c *Client) List(ctx context.Context, o ListOptions) (LockPage, error) {
	if len(o.Prefix) > wire.MaxKeyLen || len(o.After) > wire.MaxKeyLen {
		return LockPage{}, &InvalidArgumentError{Reason: fmt.Sprintf("prefix and after must be at most %d bytes", wire.MaxKeyLen)}
	}
	if o.Limit < 0 || o.Limit > 1000 {
		return LockPage{}, &InvalidArgumentError{Reason: fmt.Sprintf("limit must be 1..1000, got %d", o.Limit)}
	}
	resp, err := c.call(ctx, &wire.Request{Op: wire.OpList, Prefix: o.Prefix, After: o.After, Limit: uint64(o.Limit), Stale: o.Stale}, true)
	if err != nil {
		return LockPage{}, err
	}
	if resp.Op != wire.OpLocks {
		return LockPage{}, answerError(resp)
	}
	return LockPage{Locks: resp.Locks, More: resp.More}, nil
}

// Status asks one member (by address) to describe itself.
func (c *Client) Status(ctx context.Context, addr string) (wire.Status, error) {
	cn, err := c.conn(ctx, addr)
	if err != nil {
		return wire.Status{}, err
	}
	resp, _, err := cn.roundTrip(ctx, &wire.Request{ID: c.nextID.Add(1), Op: wire.OpStatus})
	if err != nil {
		return wire.Status{}, err
	}
	if resp.Op != wire.OpStatusInfo {
		return wire.Status{}, answerError(resp)
	}
	return resp.Status, nil
}

// validate checks a call's arguments before anything is sent, so a call
// that could never succeed fails as "invalid argument", never as an
// outcome unknown. A lease is checked in whole milliseconds, as sent. The
// key is one the cluster may hold, stored before the key rule included:
// an acquire checks the rule as well.
func validate(key string, lease *time.Duration) error {
	if err := wire.ValidateStoredKey(key); err != nil {
		return &InvalidArgumentError{Reason: err.Error()}
	}
	if lease != nil {
		if err := wire.ValidateLease(lease.Milliseconds()); err != nil {
			return &InvalidArgumentError{Reason: err.Error()}
		}
	}
	return nil
}

func answerError(resp wire.Response) error {
	switch resp.Op {
	case wire.OpNotFound:
		return ErrNotFound
	case wire.OpHeld:
		return ErrHeld
	case wire.OpInvalidArgument:
		return &InvalidArgumentError{Reason: resp.Reason}
	case wire.OpOutcomeUnknown:
		return withReason(ErrOutcomeUnknown, resp.Reason)
	case wire.OpUnavailable:
		return withReason(ErrUnavailable, resp.Reason)
	case wire.OpOverloaded:
		return withReason(ErrOverloaded, resp.Reason)
	case wire.OpError:
		return &ServerError{Reason: resp.Reason}
	case wire.OpPermissionDenied:
		return withReason(ErrPermissionDenied, resp.Reason)
	case wire.OpCompacted:
		return withReason(ErrCompacted, resp.Reason)
	}
	return &ServerError{Reason: fmt.Sprintf("unexpected answer 0x%02x", uint8(resp.Op))}
}

// withReason adds a member's reason to the error of its answer, unless
// the reason only names that error again (a member answers "outcome
// unknown" with the reason "outcome unknown"): one line says it once.
func withReason(kind error, reason string) error {
	if reason == "" || strings.HasSuffix(kind.Error(), reason) {
		return kind
	}
	return fmt.Errorf("%w: %s", kind, reason)
}

// call sends req to the leader, following redirects and retrying what is
// safe until ctx ends. idempotent marks reads, which may be retried even
// after a connection broke with the request sent.
func (c *Client) call(ctx context.Context, req *wire.Request, idempotent bool) (wire.Response, error) {
	var backoff retry.Backoff
	var lastErr error
	refused := map[string]bool{} // endpoints that refused a connection
	target := c.target("")
	for redirects := 0; ; {
		if err := ctx.Err(); err != nil {
			if errors.Is(lastErr, ErrOverloaded) {
				return wire.Response{}, fmt.Errorf("gave up at the deadline: %w (%w)", lastErr, err)
			}
			if lastErr != nil {
				return wire.Response{}, fmt.Errorf("gave up at the deadline: %v (%w)", lastErr, err)
			}
			return wire.Response{}, err
		}
		req.ID = c.nextID.Add(1)
		outcome, resp, err := c.try(ctx, target, req)
		if outcome == retry.NotSent && errors.Is(err, syscall.ECONNREFUSED) && slices.Contains(c.endpoints, target) {
			if refused[target] = true; len(refused) == len(c.endpoints) {
				return wire.Response{}, fmt.Errorf("%w at %s: every member refused the connection", ErrNoMember, strings.Join(c.endpoints, ","))
			}
		}
		switch retry.Decide(outcome, idempotent, redirects) {
		case retry.Return:
			return resp, err
		case retry.Follow:
			redirects++
			c.setLeader(resp.Leader)
			target = resp.Leader
			continue // a redirect is an answer, not a failure: no backoff
		case retry.FollowLater:
			redirects++
			c.setLeader(resp.Leader)
			target = resp.Leader
			lastErr = fmt.Errorf("redirected to %s", resp.Leader)
		case retry.Again:
			lastErr = err
		case retry.Next:
			lastErr = err
			c.forgetLeader(target)
			target = c.target(target)
		case retry.Unknown:
			c.forgetLeader(target)
			return wire.Response{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		if c.beforeBackoff != nil {
			c.beforeBackoff(ctx, lastErr)
		}
		backoff.Wait(ctx)
	}
}

// try sends req to target once and says what it came to
// (retry.Outcome), with the answer, or the error that stands for it: an
// overloaded or unavailable answer's, or why no answer came.
func (c *Client) try(ctx context.Context, target string, req *wire.Request) (retry.Outcome, wire.Response, error) {
	cn, err := c.conn(ctx, target)
	if err != nil {
		if pe := (*ProtocolError)(nil); errors.Is(err, ErrClosed) || errors.As(err, &pe) {
			return retry.Answered, wire.Response{}, err // no retry cures it
		}
		return retry.NotSent, wire.Response{}, err
	}
	resp, sent, err := cn.roundTrip(ctx, req)
	switch {
	case err != nil && sent:
		return retry.Lost, resp, err
	case err != nil:
		return retry.NotSent, resp, err
	case resp.Op == wire.OpRedirect && resp.Leader != "":
		return retry.Redirected, resp, nil
	case resp.Op == wire.OpOverloaded:
		// The member is busy, not gone: back off and ask it again.
		return retry.Overloaded, resp, fmt.Errorf("%w: %s: %s", ErrOverloaded, target, resp.Reason)
	case resp.Op == wire.OpUnavailable, resp.Op == wire.OpRedirect:
		return retry.Unavailable, resp, fmt.Errorf("%s: %s", target, resp.Reason)
	}
	return retry.Answered, resp, nil
}

// target picks where to send: the known leader, else the next endpoint after
// the one that just failed.
func (c *Client) target(failed string) string { return c.targets.Next(failed) }

func (c *Client) setLeader(addr string) { c.targets.SetLeader(addr) }

func (c *Client) forgetLeader(addr string) { c.targets.ForgetLeader(addr) }

// ProtocolError says an endpoint does not speak this client's protocol: the
// wrong port, or another version. No retry can cure it.
type ProtocolError struct {
	Addr string
	Err  error
}

func (e *ProtocolError) Error() string {
	if errors.Is(e.Err, wire.ErrNotRaftlock) {
		return e.Addr + " is not a raftlock client port"
	}
	return fmt.Sprintf("%s: %v", e.Addr, e.Err)
}

func (e *ProtocolError) Unwrap() error { return e.Err }

// greet sends the protocol greeting and checks the member's, within the
// dial timeout.
func (c *Client) greet(ctx context.Context, nc net.Conn) error {
	deadline := time.Now().Add(max(c.opts.DialTimeout, time.Second))
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	nc.SetDeadline(deadline)
	defer nc.SetDeadline(time.Time{})
	if _, err := io.WriteString(nc, wire.Greeting); err != nil {
		return err
	}
	return checkGreeting(nc)
}

func (c *Client) conn(ctx context.Context, addr string) (*conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if cn, ok := c.conns[addr]; ok && !cn.broken() {
		c.mu.Unlock()
		return cn, nil
	}
	c.mu.Unlock()
	cn, err := c.dial(ctx, addr, wire.FeaturePermissionDenied)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cn.close(ErrClosed)
		return nil, ErrClosed
	}
	if old, ok := c.conns[addr]; ok && !old.broken() {
		cn.close(errors.New("duplicate connection"))
		return old, nil
	}
	c.conns[addr] = cn
	return cn, nil
}

// dial opens a new connection to addr, greeted, on which the client first
// announces features, the answers it understands.
func (c *Client) dial(ctx context.Context, addr string, features uint64) (*conn, error) {
	d := net.Dialer{Timeout: c.opts.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	nc = c.wrapTLS(nc, addr)
	if err := c.greet(ctx, nc); err != nil {
		nc.Close()
		if errors.Is(err, wire.ErrNotRaftlock) || errors.Is(err, wire.ErrVersion) || isTLSError(err) {
			return nil, &ProtocolError{Addr: addr, Err: err}
		}
		return nil, fmt.Errorf("greet %s: %w", addr, err)
	}
	cn := newConn(addr, nc, c.opts.Logger)
	// First on the connection: the answers this client understands.
	hello := &wire.Request{ID: c.nextID.Add(1), Op: wire.OpStatus, Features: features}
	cn.w.Write(func(b []byte) []byte { return wire.AppendRequest(b, hello) })
	return cn, nil
}
