package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
)

// Rule guarded: no table is too large to reach a follower (rule 10 bounds
// every peer frame, and a snapshot larger than one streams in chunks).
// Real members run with a 64 KiB frame limit and 16 KiB chunks; a table
// of 2,000 locks with 200-byte keys, several times the limit, is built
// while one follower is down and the log is compacted past it. The
// follower, restarted, and then a member added with `member add` and
// started with --join, each install the leader's snapshot and reach its
// applied index and digest.
func TestSnapshotLargerThanThePeerFrameLimitReachesFollowerAndNewMember(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const frameLimit = 64 << 10
	c := newProcessCluster(t, 3, "--peer-frame-limit", strconv.Itoa(frameLimit), "--snapshot-chunk-size", "16384",
		"--snapshot-every", "50", "--snapshot-by-entries", "--snapshot-keep", "10", "--log-level", "info")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	all, err := client.New(c.endpoints(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	statusOf := func(m *processMember) (role string, applied uint64, digest string, ok bool) {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		defer scancel()
		st, err := all.Status(sctx, m.client)
		return st.Role, st.Applied, st.Digest, err == nil
	}
	var follower *processMember
	waitUntil(ctx, t, "a leader and a follower", func() bool {
		leaders := 0
		follower = nil
		for _, m := range c.members {
			role, _, _, ok := statusOf(m)
			switch {
			case ok && role == "leader":
				leaders++
			case ok && role == "follower":
				follower = m
			}
		}
		return leaders == 1 && follower != nil
	})
	c.kill(follower)
	var live []string
	for _, m := range c.members {
		if m != follower {
			live = append(live, m.client)
		}
	}
	cl, err := client.New(live, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// The table: 2,000 locks with 200-byte keys and one-hour leases, from
	// 16 clients at once.
	const locks, clients = 2000, 16
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= locks; i = next.Add(1) {
				key := fmt.Sprintf("big-%05d-%s", i, strings.Repeat("k", 190))
				if _, err := cl.Acquire(ctx, key, time.Hour, 0); err != nil {
					errs <- fmt.Errorf("acquire %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Past compaction with small entries: the latest snapshot, the one
	// raft sends, then covers the whole table, and the entries after it,
	// which the catching-up member receives as appends, stay far below
	// the frame limit (an append carries up to 1 MiB of entries).
	for i := range 120 {
		if _, err := cl.Acquire(ctx, fmt.Sprintf("small-%d", i), time.Hour, 0); err != nil {
			t.Fatal(err)
		}
	}
	filled := time.Since(start)

	caughtUp := func(m *processMember) {
		t.Helper()
		waitUntil(ctx, t, fmt.Sprintf("member %d to reach the leader's applied index and digest", m.id), func() bool {
			if !m.running() {
				t.Fatalf("member %d exited:\n%s", m.id, c.log(m))
			}
			_, applied, digest, ok := statusOf(m)
			if !ok || applied == 0 {
				return false
			}
			for _, l := range c.members {
				if role, la, ld, ok := statusOf(l); ok && role == "leader" {
					return la == applied && ld == digest
				}
			}
			return false
		})
		installed, err := m.metric(ctx, "raftlock_snapshots_installed_total")
		if err != nil || installed < 1 {
			t.Fatalf("member %d caught up without installing a snapshot (%v, %v):\n%s", m.id, installed, err, c.log(m))
		}
		// The transport logs each snapshot it received, with its size:
		// the proof the table was larger than any frame.
		var largest int
		for _, s := range regexp.MustCompile(`msg="received snapshot".* bytes=(\d+)`).FindAllStringSubmatch(c.fullLog(m), -1) {
			n, _ := strconv.Atoi(s[1])
			largest = max(largest, n)
		}
		if largest <= frameLimit {
			t.Fatalf("member %d received no snapshot larger than the %d-byte frame limit (largest %d):\n%s", m.id, frameLimit, largest, c.log(m))
		}
		t.Logf("member %d installed a %d-byte snapshot (frame limit %d) and caught up %v into the test", m.id, largest, frameLimit, time.Since(start).Round(time.Millisecond))
	}

	c.start(follower)
	caughtUp(follower)

	eps := strings.Join(c.endpoints(), ",")
	m4 := c.addJoiner(4, eps)
	c.members = append(c.members, m4)
	c.start(m4)
	caughtUp(m4)
	for _, m := range c.members {
		if strings.Contains(c.fullLog(m), "exceeds limit") {
			t.Errorf("member %d refused a frame over the limit:\n%s", m.id, c.log(m))
		}
	}
	t.Logf("table of %d locks filled in %v; whole test %v", locks+120, filled.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
