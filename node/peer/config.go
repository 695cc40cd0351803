package peer

import (
	"log/slog"
	"net"
	"time"

	"github.com/raftlock/raftlock/internal/tlsconfig"
)

// Config configures a TCP transport (NewTCP). Zero fields take their
// defaults; nothing of it changes once the transport runs, except the
// peer set (SetPeers).
type Config struct {
	ID         uint64
	Peers      map[uint64]string // id to peer address, this member included
	Removed    []uint64          // ids removed from the configuration: refused from the first stream on
	Listen     string            // where to listen; default Peers[ID]
	ClientAddr string            // announced to peers in hellos, for redirects
	APIAddr    string            // announced on accepted streams, for the HTTP/JSON API's redirects (announce.go)
	Logger     *slog.Logger      // default: slog.Default()

	// TLS, when set, makes every peer stream mutual TLS 1.3 with these
	// certificates: the listener requires a certificate signed by the CA,
	// a dialled peer must present the certificate of the member it was
	// dialled as, and an inbound hello must name the member its
	// certificate is bound to (so no member, nor anyone holding a client
	// certificate, can speak as another member). Nil is plain TCP.
	TLS *tlsconfig.Reloader
	// Identity, when set, is sent in every hello, and hellos from other
	// clusters or forgotten incarnations are refused (identity.go); nil:
	// hellos carry none.
	Identity *Identity

	// ReadTimeout is how long an inbound peer stream past its hello may
	// stay silent (inside or between frames) before it is closed;
	// default DefaultReadTimeout. Raft keeps every
	// leader-follower link busy with heartbeats each tick, so ten
	// election timeouts only ever closes a link that is stuck or idle (an
	// idle link between two followers is re-dialled by its sender).
	ReadTimeout time.Duration
	// HelloTimeout is how long an inbound connection has, from its
	// accept, to complete its TLS handshake and send a hello that passes
	// the checks (DefaultHelloTimeout). Until then it is pending: it
	// holds no member's slot (pending.go).
	HelloTimeout time.Duration
	// MaxPending bounds the pending inbound connections of all remote
	// addresses (DefaultMaxPending), MaxPendingPerAddress those of one
	// remote IP (DefaultMaxPendingPerAddress). Either, when reached,
	// closes its oldest pending connection to take the new one.
	MaxPending           int
	MaxPendingPerAddress int
	// MaxStreamsPerMember bounds the message streams open from one
	// member past their hello (DefaultMaxStreamsPerMember); one more
	// closes that member's oldest.
	MaxStreamsPerMember int

	// OnAcceptError, when set, is called at every failed accept on the
	// peer port (the accept loop backs off and tries again); OnRefused
	// at every connection a limit closes, with the limit's name
	// (LimitPending and the others). They feed the member's metrics, and
	// must not block.
	OnAcceptError func()
	OnRefused     func(limit string)

	// FrameLimit is the largest frame this member reads from a peer
	// (DefaultFrameLimit). Every member of a cluster should have the
	// same: a sender cuts its snapshot chunks to its own.
	FrameLimit int
	// SnapshotChunkSize is the most snapshot data one frame carries
	// (DefaultSnapshotChunkSize); it is cut to fit the frame limit.
	SnapshotChunkSize int
	// MaxSnapshotSize is the most snapshot data an inbound stream may
	// announce (DefaultMaxSnapshotSize).
	MaxSnapshotSize int64
	// SnapshotDir is where inbound snapshots are spooled as they arrive,
	// under the member's data directory (SnapshotSpoolDir); Start
	// creates it and removes the spool files a crash left in it. Without
	// one, Start makes a private temporary directory that Close removes.
	SnapshotDir string
	// SnapshotSource reads the snapshots raft gives by reference (a store
	// that keeps its snapshot's data in a file of its own).
	SnapshotSource SnapshotSource
	// LearnedExpiry is how long a peer learned from its hello stays a
	// peer with no inbound stream from it open (DefaultLearnedExpiry).
	LearnedExpiry time.Duration

	// UnsafeSkipSnapshotChecks plants the bug snapshot-partial: a
	// received snapshot reaches raft without its size or SHA-256
	// checked, and a stream that breaks before its last chunk delivers
	// what arrived. Never in production.
	UnsafeSkipSnapshotChecks bool

	// Tests only: the clock the learned expiry is measured on (time.Now),
	// and a wrapper of each outbound snapshot stream's connection (to
	// corrupt or cut it in transit).
	now      func() time.Time
	wrapConn func(net.Conn) net.Conn
	// Tests only: a wrapper of the peer listener (to fail accepts), and
	// how long accepts must fail before ListenerErr says so
	// (listenerFailingAfter).
	wrapListener func(net.Listener) net.Listener
	failingAfter time.Duration
}

// apply sets t's tunables from cfg, leaving the defaults where cfg has
// none.
func (cfg *Config) apply(t *TCP) {
	if cfg.ReadTimeout > 0 {
		t.lim.readTimeout = cfg.ReadTimeout
	}
	if cfg.HelloTimeout > 0 {
		t.lim.helloTimeout = cfg.HelloTimeout
	}
	if cfg.MaxStreamsPerMember > 0 {
		t.lim.maxStreamsPerMember = cfg.MaxStreamsPerMember
	}
	maxPending, maxPerAddr := DefaultMaxPending, DefaultMaxPendingPerAddress
	if cfg.MaxPending > 0 {
		maxPending = cfg.MaxPending
	}
	if cfg.MaxPendingPerAddress > 0 {
		maxPerAddr = cfg.MaxPendingPerAddress
	}
	t.pending = newPendingPool(maxPending, maxPerAddr)
	t.onAcceptError, t.onRefused = cfg.OnAcceptError, cfg.OnRefused
	t.wrapTestListener = cfg.wrapListener
	if cfg.failingAfter > 0 {
		t.failingAfter = cfg.failingAfter
	}
	if cfg.FrameLimit > 0 {
		t.snap.frameLimit = cfg.FrameLimit
	}
	if cfg.SnapshotChunkSize > 0 {
		t.snap.chunkSize = cfg.SnapshotChunkSize
	}
	if cfg.MaxSnapshotSize > 0 {
		t.snap.maxSize = cfg.MaxSnapshotSize
	}
	if cfg.LearnedExpiry > 0 {
		t.learnedExpiry = cfg.LearnedExpiry
	}
	if cfg.now != nil {
		t.now = cfg.now
	}
	t.snap.dir, t.snap.source, t.snap.wrapConn = cfg.SnapshotDir, cfg.SnapshotSource, cfg.wrapConn
	t.snap.checks = !cfg.UnsafeSkipSnapshotChecks
	t.tls, t.identity = cfg.TLS, cfg.Identity
	t.removed = make(map[uint64]bool, len(cfg.Removed))
	for _, id := range cfg.Removed {
		t.removed[id] = true
	}
}
