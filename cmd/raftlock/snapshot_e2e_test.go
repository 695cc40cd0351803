package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	membercore "github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node/nodetest"
)

// The backup and restore proof, with real member processes and the CLI:
// locks held, `raftlock snapshot save`, the cluster stopped and its data
// wiped, `raftlock snapshot restore` into three new data directories, the
// members started with the same --peers: every lock is held with its
// token and a full lease, and a new grant's token is above all of them.
func TestSnapshotSaveRestoreEndToEnd(t *testing.T) {
	startsProcesses(t)
	c, ctx, cl := readyProcessClusterWith(t, 60*time.Second, "--log-level", "warn")
	eps := strings.Join(c.endpoints(), ",")
	held := holdLocks(ctx, t, cl, "job-0", "job-1", "job-2", "job-3", "job-4")
	// A released lock: the last token issued is above every held one.
	g, err := cl.Acquire(ctx, "gone", time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Release(ctx, "gone", g.Token); err != nil {
		t.Fatal(err)
	}
	lastToken := g.Token

	file := filepath.Join(c.dir, "locks.backup")
	r := runCLI(t, c.bin, nil, "snapshot", "save", file, "--endpoints", eps)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "saved snapshot at index ") ||
		!strings.Contains(r.stdout, fmt.Sprintf(": 5 locks, last token %d, ", lastToken)) || !strings.HasSuffix(r.stdout, " -> "+file+"\n") {
		t.Fatalf("snapshot save: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, c.bin, nil, "snapshot", "save", file+".2", "--endpoints", eps, "--json")
	var saved struct {
		Index     uint64 `json:"index"`
		Locks     int    `json:"locks"`
		LastToken uint64 `json:"last_token"`
		SHA256    string `json:"sha256"`
		File      string `json:"file"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &saved); r.code != 0 || err != nil || saved.Locks != 5 || saved.LastToken != lastToken || saved.File != file+".2" {
		t.Fatalf("snapshot save --json: exit %d, %v: %+v\n%s%s", r.code, err, saved, r.stdout, r.stderr)
	}
	if !strings.Contains(runCLI(t, c.bin, nil, "snapshot", "save", file+".3", "--endpoints", eps).stdout, "sha256 "+saved.SHA256) {
		t.Fatal("two backups of the same table differ")
	}

	// Stop the cluster and wipe every data directory.
	for _, m := range c.members {
		c.kill(m)
		if err := os.RemoveAll(c.dataDir(m.id)); err != nil {
			t.Fatal(err)
		}
	}
	var peers []string
	for _, m := range c.members {
		peers = append(peers, fmt.Sprintf("%d=%s", m.id, m.peer))
	}
	if r := runCLI(t, c.bin, nil, "snapshot", "restore", file, "--data", c.dataDir(4), "--id", "4", "--peers", strings.Join(peers, ",")); r.code != exitUsage || !strings.Contains(r.stderr, "--id 4 is not in --peers") {
		t.Fatalf("restore with an --id outside --peers: exit %d: %s", r.code, r.stderr)
	}
	for _, m := range c.members {
		dir := c.dataDir(m.id)
		r := runCLI(t, c.bin, nil, "snapshot", "restore", file, "--data", dir, "--id", fmt.Sprint(m.id), "--peers", strings.Join(peers, ","))
		if r.code != 0 || !strings.HasPrefix(r.stdout, "restored snapshot at index ") ||
			!strings.Contains(r.stdout, fmt.Sprintf("raftlock node --id %d --peers %s --data %s\n", m.id, strings.Join(peers, ","), dir)) {
			t.Fatalf("restore member %d: exit %d\n%s%s", m.id, r.code, r.stdout, r.stderr)
		}
	}
	r = runCLI(t, c.bin, nil, "snapshot", "restore", file, "--data", c.dataDir(1), "--id", "1", "--peers", strings.Join(peers, ","))
	if r.code != exitError || !strings.Contains(r.stderr, "already holds data") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("restore over a restored directory: exit %d: %s", r.code, r.stderr)
	}

	start := time.Now()
	for _, m := range c.members {
		c.start(m)
	}
	cl2 := nodetest.Client(t, c.endpoints()...)
	for key, token := range held {
		waitUntil(ctx, t, key+" read from the restored cluster", func() bool {
			for _, m := range c.members {
				if !m.running() {
					t.Fatalf("member %d exited after the restore:\n%s", m.id, c.log(m))
				}
			}
			gctx, gcancel := context.WithTimeout(ctx, time.Second)
			defer gcancel()
			info, err := cl2.Get(gctx, key)
			if err != nil {
				return false
			}
			if !info.Held || info.Token != token {
				t.Fatalf("%s after restore: %+v; want held with token %d", key, info, token)
			}
			// A full lease from the restart, not what was left of it.
			if left, full := time.Duration(info.RemainingMS)*time.Millisecond, time.Hour-time.Since(start); left < full {
				t.Fatalf("%s after restore: %v of lease left, want at least %v", key, left, full)
			}
			return true
		})
	}
	if info, err := cl2.Get(ctx, "gone"); err != nil || info.Held {
		t.Fatalf("gone, released before the backup: %+v, %v", info, err)
	}
	r = runCLI(t, c.bin, nil, "acquire", "after-restore", "--lease", "1m", "--json", "--endpoints", eps)
	var got struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil || got.Token <= lastToken+1_000_000 {
		// Above the backup's tokens and the million the restore skipped by
		// default, which the old cluster may have granted after the backup.
		t.Fatalf("acquire after restore: exit %d, token %d, want above %d\n%s%s", r.code, got.Token, lastToken+1_000_000, r.stdout, r.stderr)
	}
}

// restore checks everything before it writes anything, and says what is
// wrong in one line with the CLI's exit codes: 2 for flags, 1 for a file
// that is not a good backup or a directory that holds data.
func TestSnapshotRestoreRefusals(t *testing.T) {
	m := fsm.New()
	m.Apply(fsm.Command{Op: fsm.OpGrant, Key: "a", LeaseMS: 60000})
	table := m.Snapshot()
	meta, err := membercore.NewBackupMeta(7, 2, table, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, membercore.EncodeBackup(meta, table), 0o600); err != nil {
		t.Fatal(err)
	}
	data := membercore.EncodeBackup(meta, table)
	data[len(data)-3] ^= 1
	corrupt := filepath.Join(dir, "corrupt")
	os.WriteFile(corrupt, data, 0o600)
	truncated := filepath.Join(dir, "truncated")
	os.WriteFile(truncated, data[:len(data)-5], 0o600)
	full := filepath.Join(dir, "full")
	os.MkdirAll(full, 0o755)
	os.WriteFile(filepath.Join(full, "something"), nil, 0o600)
	peers := "1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003"
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no file", []string{"--data", filepath.Join(dir, "d"), "--id", "1", "--peers", peers}, exitUsage, "want exactly one FILE"},
		{"no data", []string{good, "--id", "1", "--peers", peers}, exitUsage, "--data is required"},
		{"no id", []string{good, "--data", filepath.Join(dir, "d"), "--peers", peers}, exitUsage, "--id is required"},
		{"id not in peers", []string{good, "--data", filepath.Join(dir, "d"), "--id", "4", "--peers", peers}, exitUsage, "--id 4 is not in --peers"},
		{"bad peers", []string{good, "--data", filepath.Join(dir, "d"), "--id", "1", "--peers", "1=x,1=y"}, exitUsage, "--peers: peer 1 listed twice"},
		{"corrupt", []string{corrupt, "--data", filepath.Join(dir, "d"), "--id", "1", "--peers", peers}, exitError, "sha256"},
		{"truncated", []string{truncated, "--data", filepath.Join(dir, "d"), "--id", "1", "--peers", peers}, exitError, "truncated"},
		{"missing", []string{filepath.Join(dir, "nope"), "--data", filepath.Join(dir, "d"), "--id", "1", "--peers", peers}, exitError, "no such file"},
		{"directory holds data", []string{good, "--data", full, "--id", "1", "--peers", peers}, exitError, "already holds data"},
	} {
		code, out, errOut := cli(t, append([]string{"snapshot", "restore"}, tc.args...)...)
		last := errOut[strings.LastIndex(strings.TrimSuffix(errOut, "\n"), "\n")+1:]
		if code != tc.code || out != "" || !strings.HasPrefix(last, "raftlock snapshot: ") || !strings.Contains(last, tc.msg) {
			t.Errorf("%s: exit %d, stdout %q, last stderr line %q; want exit %d and %q", tc.name, code, out, last, tc.code, tc.msg)
		}
		if _, err := os.Stat(filepath.Join(dir, "d")); err == nil {
			t.Fatalf("%s: wrote the data directory", tc.name)
		}
	}
	code, out, errOut := cli(t, "snapshot", "restore", good, "--data", filepath.Join(dir, "d"), "--id", "2", "--peers", peers)
	if code != 0 || !strings.Contains(out, "restored snapshot at index 7 term 2 (1 lock, last token 1, next token 1000002, sha256 "+meta.SHA256+") into "+filepath.Join(dir, "d")+" as member 2 of 3\n") {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := cli(t, "snapshot", "frobnicate"); code != exitUsage || !strings.Contains(errOut, `unknown subcommand "frobnicate"`) {
		t.Fatalf("unknown subcommand: exit %d: %s", code, errOut)
	}
}

// Rule guarded: no table is too large to reach a follower (rule 10 bounds
// every peer frame, and a snapshot larger than one streams in chunks).
// Real members run with a 64 KiB frame limit and 16 KiB chunks; a table
// of 2,000 locks with 200-byte keys, several times the limit, is built
// while one follower is down and the log is compacted past it. The
// follower, restarted, and then a member added with `member add` and
// started with --join, each install the leader's snapshot and reach its
// applied index and digest.
func TestSnapshotLargerThanThePeerFrameLimitReachesFollowerAndNewMember(t *testing.T) {
	startsProcesses(t)
	const frameLimit = 64 << 10
	c := newProcessCluster(t, 3, "--peer-frame-limit", strconv.Itoa(frameLimit), "--snapshot-chunk-size", "16384",
		"--snapshot-every", "50", "--snapshot-by-entries", "--snapshot-keep", "10", "--log-level", "info")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	all := nodetest.Client(t, c.endpoints()...)
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
	cl := nodetest.Client(t, live...)

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
