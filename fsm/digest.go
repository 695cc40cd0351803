package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// digestSum is the table's digest kept as it changes: the sum, lane by
// lane modulo 2^64, of a hash of every (key, lock) pair. A sum does not
// depend on the order keys came in, so equal tables give equal sums on
// every member, and Digest costs the same for ten keys as for a million
// (a member's /status and status requests used to hash the whole table).
type digestSum struct{ a, b uint64 }

func lockHash(key string, l Lock) (uint64, uint64) {
	var buf [4*binary.MaxVarintLen64 + MaxKeyLen + MaxOwnerLen]byte
	b := binary.AppendUvarint(buf[:0], uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, l.Token)
	b = binary.AppendUvarint(b, l.LeaseMS)
	if l.Owner != "" {
		// Only when there is one: a table without owners keeps the digest
		// it had before locks had owners.
		b = binary.AppendUvarint(b, uint64(len(l.Owner)))
		b = append(b, l.Owner...)
	}
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[0:8]), binary.BigEndian.Uint64(sum[8:16])
}

func (d *digestSum) add(key string, l Lock) {
	a, b := lockHash(key, l)
	d.a += a
	d.b += b
}

func (d *digestSum) sub(key string, l Lock) {
	a, b := lockHash(key, l)
	d.a -= a
	d.b -= b
}

// put sets key's lock, keeping the digest, and returns its handle.
func (m *Machine) put(key string, l Lock) Handle { return m.putAt(m.locks.find(key), key, l) }

// putAt is put at p, found for key.
func (m *Machine) putAt(p place, key string, l Lock) Handle {
	if m.changes != nil {
		m.changes.note(key, p.slot >= 0, true)
	}
	if p.slot >= 0 {
		m.sum.sub(key, m.locks.lockAt(p))
	}
	h := m.locks.setAt(p, key, l)
	m.sum.add(key, l)
	return h
}

// delAt removes the lock at p, found held for key, keeping the digest,
// and returns the handle it had.
func (m *Machine) delAt(p place, key string) Handle {
	if m.changes != nil {
		m.changes.note(key, true, false)
	}
	m.sum.sub(key, m.locks.lockAt(p))
	return m.locks.removeAt(p, key)
}

// Digest is a short hex digest of the table (every lock and the last
// token): equal state, equal digest. It is kept as the table changes, so
// it costs O(1).
func (m *Machine) Digest() string {
	var b [4 * 8]byte
	binary.BigEndian.PutUint64(b[0:], m.sum.a)
	binary.BigEndian.PutUint64(b[8:], m.sum.b)
	binary.BigEndian.PutUint64(b[16:], m.lastToken)
	binary.BigEndian.PutUint64(b[24:], uint64(m.locks.n))
	sum := sha256.Sum256(b[:])
	return hex.EncodeToString(sum[:8])
}
