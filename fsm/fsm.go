// Package fsm is raftlock's deterministic lock state machine.
//
// Every node applies the same committed commands in the same order and so
// reaches the same lock table and issues the same fencing tokens. The package
// has no clock, no randomness, no goroutines and no dependence on map
// iteration order: it is a pure function of the committed log prefix.
package fsm

import (
	"fmt"
	"math"
	"strings"
)

// Op names a replicated command.
type Op uint8

// The replicated commands. Grant, Release and Expire are the seed's; Renew is
// a replicated lease extension.
const (
	OpGrant   Op = 1 // Grant{key, lease_ms[, owner]}
	OpRelease Op = 2 // Release{key}
	OpExpire  Op = 3 // Expire{key, token}
	OpRenew   Op = 4 // Renew{key, token, lease_ms}
)

var opNames = [...]string{OpGrant: "grant", OpRelease: "release", OpExpire: "expire", OpRenew: "renew"}

func (o Op) String() string { return enumName(opNames[:], uint8(o), "op") }

// Command is one replicated lock command. Fields that an Op does not use are
// zero (and are not encoded).
type Command struct {
	Op      Op
	Key     string
	LeaseMS uint64 // Grant, Renew
	Token   uint64 // Expire, Renew
	// Owner is who asked for a Grant (free text, at most MaxOwnerLen
	// bytes, "" when not said): kept with the lock so that an operator can
	// see who holds it. It decides nothing.
	Owner string
}

func (c Command) String() string {
	switch c.Op {
	case OpGrant:
		if c.Owner != "" {
			return fmt.Sprintf("Grant{%q, %dms, owner %q}", c.Key, c.LeaseMS, c.Owner)
		}
		return fmt.Sprintf("Grant{%q, %dms}", c.Key, c.LeaseMS)
	case OpRelease:
		return fmt.Sprintf("Release{%q}", c.Key)
	case OpExpire:
		return fmt.Sprintf("Expire{%q, %d}", c.Key, c.Token)
	case OpRenew:
		return fmt.Sprintf("Renew{%q, %d, %dms}", c.Key, c.Token, c.LeaseMS)
	}
	return c.Op.String()
}

// Status is the kind of an applied result.
type Status uint8

// Applied results, as the seed names them.
const (
	Noop          Status = 0
	Granted       Status = 1 // Token set
	GrantRejected Status = 2
	Released      Status = 3
	NotFound      Status = 4
	Expired       Status = 5 // Existed set
	Renewed       Status = 6
)

var statusNames = [...]string{
	Noop: "Noop", Granted: "Granted", GrantRejected: "GrantRejected", Released: "Released",
	NotFound: "NotFound", Expired: "Expired", Renewed: "Renewed",
}

func (s Status) String() string { return enumName(statusNames[:], uint8(s), "Status") }

// enumName is the name of v in names, or kind(v) for a value without one
// (a decoder may meet any byte).
func enumName(names []string, v uint8, kind string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, v)
}

// Result is what applying one command produced.
type Result struct {
	Status  Status
	Token   uint64 // Granted: the fencing token issued; Renewed: the holder's token
	Existed bool   // Expired: whether a lock was removed
}

// Lock is one held lock in the table.
type Lock struct {
	Token   uint64
	LeaseMS uint64 // the last granted or renewed lease length
	Owner   string // the Grant's owner (from Get or At: pointing into the table's memory, which it keeps alive)
}

// Machine is the lock table. The zero value is not usable; call New.
type Machine struct {
	locks     table
	lastToken uint64
	sum       digestSum // of locks, for Digest
	// changes since the last FreezeChanges (delta.go); nil in a Frozen
	// copy, which never changes.
	changes *Changes
}

// New returns an empty lock table whose first grant will get token 1.
func New() *Machine {
	return &Machine{locks: newTable(), changes: &Changes{}} // the empty table's state is the zero tableState
}

// Apply applies one committed command and returns its result. It is total:
// every command, in every state, has a defined result. Its key and owner
// must be within MaxKeyLen and MaxOwnerLen, as the codec guarantees for
// every decoded command.
func (m *Machine) Apply(c Command) Result {
	r, _ := m.ApplyAt(c)
	return r
}

// ApplyAt is Apply that also returns the handle of the lock the command
// granted, renewed, released or expired (0 when it changed no lock): for a
// member that keeps something of its own per held lock (a lease on its
// clock) without keeping the key twice. A removed lock's handle is free
// again once ApplyAt returns.
func (m *Machine) ApplyAt(c Command) (Result, Handle) {
	p := m.locks.find(c.Key)
	held := p.slot >= 0
	switch c.Op {
	case OpGrant:
		if held {
			return Result{Status: GrantRejected}, 0
		}
		m.lastToken++
		h := m.putAt(p, c.Key, Lock{Token: m.lastToken, LeaseMS: c.LeaseMS, Owner: c.Owner})
		return Result{Status: Granted, Token: m.lastToken}, h
	case OpRelease:
		if !held {
			return Result{Status: NotFound}, 0
		}
		return Result{Status: Released}, m.delAt(p, c.Key)
	case OpExpire:
		if !held || m.locks.lockAt(p).Token != c.Token {
			// A late or duplicated expiry: the lock it was meant for is gone,
			// and a lock granted since then must survive.
			return Result{Status: Expired, Existed: false}, 0
		}
		return Result{Status: Expired, Existed: true}, m.delAt(p, c.Key)
	case OpRenew:
		if !held {
			return Result{Status: NotFound}, 0
		}
		l := m.locks.lockAt(p)
		if l.Token != c.Token {
			return Result{Status: NotFound}, 0
		}
		l.LeaseMS = c.LeaseMS
		return Result{Status: Renewed, Token: l.Token}, m.putAt(p, c.Key, l)
	}
	return Result{Status: Noop}, 0
}

// Get returns the lock held on key, if any. Its Owner points into the
// table's memory (Lock.Owner), so a caller that keeps many should copy them.
func (m *Machine) Get(key string) (Lock, bool) {
	return m.locks.get(key)
}

// Handle returns the handle of the lock held on key, if any.
func (m *Machine) Handle(key string) (Handle, bool) { return m.locks.handle(key) }

// At returns the key and lock h names, if h names a held lock. The key
// points into the table's memory and never changes.
func (m *Machine) At(h Handle) (key string, l Lock, ok bool) { return m.locks.at(h) }

// EncodedSize estimates the bytes of the table's Snapshot, in O(1).
func (m *Machine) EncodedSize() uint64 { return m.locks.bytes + 16 }

// Len returns the number of held locks.
func (m *Machine) Len() int { return m.locks.n }

// SkipTokens raises the last token by n without granting anything, so the
// next grant's token is above any of the n a copy of this table may have
// issued elsewhere (the old cluster, after a backup of it was taken). It
// refuses to wrap around rather than reuse a token.
func (m *Machine) SkipTokens(n uint64) error {
	if m.lastToken > math.MaxUint64-n-1 {
		return fmt.Errorf("skip %d tokens past %d: the token space would wrap", n, m.lastToken)
	}
	m.lastToken += n
	return nil
}

// LastToken returns the highest token ever issued (0 before the first grant).
func (m *Machine) LastToken() uint64 { return m.lastToken }

// Range calls f with the handle of every held lock, in no particular
// order: for work whose result does not depend on order (building an
// index), which would otherwise sort a million keys for nothing.
func (m *Machine) Range(f func(h Handle, l Lock)) {
	m.locks.each(f)
}

// Entry is one held lock and its key.
type Entry struct {
	Key  string
	Lock Lock
}

// List returns, in key order, up to limit held locks whose keys start with
// prefix and sort after after ("" starts at the first), and whether more
// such locks follow. It costs O(1,024 log(n/1,024) + limit), whatever the
// table's size: each shard keeps its keys sorted.
func (m *Machine) List(prefix, after string, limit int) (locks []Entry, more bool) {
	from, inclusive := after, false
	if after < prefix {
		from, inclusive = prefix, true
	}
	m.locks.eachSorted(nil, from, inclusive, func(key string, l Lock) bool {
		if !strings.HasPrefix(key, prefix) {
			return false // sorted: no key after this one has the prefix
		}
		if len(locks) == limit {
			more = true
			return false
		}
		l.Owner = strings.Clone(l.Owner)
		locks = append(locks, Entry{Key: strings.Clone(key), Lock: l})
		return true
	})
	return locks, more
}

// Keys returns the held keys in sorted order.
func (m *Machine) Keys() []string {
	return m.locks.sortedKeys()
}
