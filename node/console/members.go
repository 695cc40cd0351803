package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/node"
)

// Health of a member as the members table shows it.
const (
	Healthy     = "healthy"
	NoLeader    = "no leader"
	Unreachable = "unreachable"
	Refused     = "refused"
)

// behind is how many committed entries a member may have left to apply
// before the table says it is catching up rather than healthy.
const behind = 100

// peerTimeout bounds one member's status answer.
const peerTimeout = 1500 * time.Millisecond

// fresh is how long one gathering of the members serves every caller:
// several open consoles ask the other members once a second in all.
const fresh = 800 * time.Millisecond

// Member is one row of the members table.
type Member struct {
	ID      uint64 `json:"id"`
	Addr    string `json:"addr"`
	Self    bool   `json:"self"`
	Role    string `json:"role"` // leader, follower, learner, candidate...; "" when it gave no status
	Term    uint64 `json:"term"`
	Applied uint64 `json:"applied"`
	Commit  uint64 `json:"commit"`
	Locks   uint64 `json:"locks"`
	Digest  string `json:"digest"`
	Health  string `json:"health"`
	Error   string `json:"error,omitempty"` // why it is not healthy
}

// members asks every member of the configuration for its status, at most
// once per fresh.
type members struct {
	node  *node.Node
	peers *client.Client

	mu   sync.Mutex
	at   time.Time
	last []Member
}

// get returns every member of the configuration self applied, self's
// row from st, the others' from their answers.
func (m *members) get(ctx context.Context, st node.Status) []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Since(m.at) < fresh && m.last != nil {
		return m.last
	}
	ids := slices.Concat(st.Voters, st.Learners)
	if !slices.Contains(ids, st.ID) {
		ids = append(ids, st.ID)
	}
	slices.Sort(ids)
	rows := make([]Member, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		if id == st.ID {
			rows[i] = m.self(ctx, st)
			continue
		}
		wg.Go(func() { rows[i] = m.ask(ctx, id) })
	}
	wg.Wait()
	judge(rows, st.Learners)
	m.at, m.last = time.Now(), rows
	return rows
}

func (m *members) self(ctx context.Context, st node.Status) Member {
	row := Member{ID: st.ID, Addr: st.Addr, Self: true, Role: st.Role, Term: st.Term, Applied: st.Applied, Commit: st.Commit, Locks: st.Locks, Digest: st.Digest}
	if err := m.node.Healthy(ctx); err != nil {
		row.Error = err.Error()
	}
	return row
}

func (m *members) ask(ctx context.Context, id uint64) Member {
	row := Member{ID: id, Addr: m.node.PeerClientAddr(id)}
	if row.Addr == "" {
		row.Health, row.Error = Unreachable, "its address is not known here yet"
		return row
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	st, err := m.peers.Status(ctx, row.Addr)
	switch {
	case errors.Is(err, client.ErrPermissionDenied):
		row.Health, row.Error = Refused, short(err)
		return row
	case err != nil:
		row.Health, row.Error = Unreachable, short(err)
		return row
	}
	row.Role, row.Term, row.Applied, row.Commit, row.Locks, row.Digest = st.Role, st.Term, st.Applied, st.Commit, st.Locks, st.Digest
	if st.Leader == 0 {
		row.Health = NoLeader
	}
	return row
}

// judge fills in the health of the rows that answered: behind the
// highest commit index any member reported by more than behind entries
// is catching up; its own error (self) or no leader says why not healthy.
func judge(rows []Member, learners []uint64) {
	var commit uint64
	for _, r := range rows {
		commit = max(commit, r.Commit)
	}
	for i := range rows {
		r := &rows[i]
		if r.Role == "" {
			continue // gave no status: health already says why
		}
		if slices.Contains(learners, r.ID) && r.Role == "follower" {
			r.Role = "learner"
		}
		switch {
		case r.Health != "":
		case r.Error != "":
			r.Health = "unhealthy"
		case commit > r.Applied+behind:
			r.Health = fmt.Sprintf("catching up (%d behind)", commit-r.Applied)
		default:
			r.Health = Healthy
		}
	}
}

func short(err error) string { return strings.TrimPrefix(err.Error(), "raftlock: ") }
