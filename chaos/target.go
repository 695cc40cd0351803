package chaos

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/chaos/fault"
)

// Target is the lock service a chaos run tries (raftlock chaos --target):
// raftlock itself, or a peer started, driven and faulted by an adapter
// (etcd.go, redis.go, nats.go) under the same workload, nemesis schedule, history
// format, checks and reports.
type Target string

// The targets.
const (
	TargetRaftlock Target = "raftlock"
	TargetEtcd     Target = "etcd"
	TargetRedis    Target = "redis"
	TargetNats     Target = "nats"
)

// Targets are the valid targets, in the order --target documents them.
var Targets = []Target{TargetRaftlock, TargetEtcd, TargetRedis, TargetNats}

// joinTargets lists the targets as --target takes them.
func joinTargets() string {
	parts := make([]string, len(Targets))
	for i, t := range Targets {
		parts[i] = string(t)
	}
	return strings.Join(parts, "|")
}

// target is the run's target: raftlock unless another was asked.
func (c *Config) target() Target {
	if c.Target == "" {
		return TargetRaftlock
	}
	return c.Target
}

// validateTarget checks the settings a peer target cannot take.
func (c *Config) validateTarget() error {
	t := c.target()
	switch {
	case !slices.Contains(Targets, t):
		return fmt.Errorf("unknown --target %q (want %s)", t, joinTargets())
	case c.RedisFsync != "" && t != TargetRedis:
		return fmt.Errorf("--redis-fsync is Redis's: not with --target %s", t)
	case c.RedisFsync != "" && c.RedisFsync != RedisFsyncEverysec && c.RedisFsync != RedisFsyncAlways:
		return fmt.Errorf("unknown --redis-fsync %q (want %s|%s)", c.RedisFsync, RedisFsyncEverysec, RedisFsyncAlways)
	case (c.NatsSync != "" || c.NatsServer != "") && t != TargetNats:
		return fmt.Errorf("--nats-sync and --nats-server are NATS's: not with --target %s", t)
	case c.NatsSync != "" && c.NatsSync != NatsSyncDefault && c.NatsSync != NatsSyncAlways:
		return fmt.Errorf("unknown --nats-sync %q (want %s|%s)", c.NatsSync, NatsSyncDefault, NatsSyncAlways)
	case c.PowerStrict && (t == TargetRaftlock || !c.usesPower()):
		return errors.New("--power-strict is for the power families on a peer target (--target etcd|redis|nats)")
	case t == TargetRaftlock:
		return nil
	case c.Bug != "":
		return fmt.Errorf("--unsafe-bug plants bugs in raftlock's members, not with --target %s", t)
	case c.Held > 0:
		return fmt.Errorf("--held fills raftlock's table: not with --target %s", t)
	case c.Nodes != 3:
		return fmt.Errorf("--target %s runs three members (etcd, nats) or a primary, a replica and three Sentinels (redis): --nodes must be 3", t)
	case c.usesAPI():
		return fmt.Errorf("--protocols are raftlock's: --target %s speaks its own", t)
	}
	return nil
}

// notCarried says why the run's target cannot carry family out, "" when
// it can. Families a target cannot carry out are named in the header and
// summary.md, never dropped silently.
func (c *Config) notCarried(f fault.Family) string {
	if slices.Contains(ClientFamilies, f) {
		if c.ClientProcs == 0 {
			return "it stops client processes, and --client-procs is 0"
		}
		return ""
	}
	t := c.target()
	if t == TargetRaftlock {
		return ""
	}
	switch f {
	case fault.FamilyKill, fault.FamilyPause, fault.FamilyPartition, fault.FamilyPower, fault.FamilyPowerAll:
		return ""
	case fault.FamilyClock:
		return string(t) + " reads the system clock, which only root can skew"
	case fault.FamilyNet:
		return "the byte-stream proxies of " + string(t) + "'s links can cut them but not delay or drop messages whose boundaries they do not see"
	case fault.FamilySnapshot:
		return "it aims at raftlock's own snapshot streams"
	case fault.FamilyGarbage, fault.FamilyGarbageHeartbeat:
		return "it forges raftlock's peer and client frames"
	case fault.FamilyMembership:
		return "it changes members through raftlock's admin commands"
	}
	return "not implemented for " + string(t)
}

// notRunLine is summary.md's line naming the families not run and why:
// for a raftlock run it is the line it always was.
func notRunLine(c *Config, notRun []fault.Family) string {
	var parts []string
	same := true
	for _, f := range notRun {
		why := c.notCarried(f)
		same = same && slices.Contains(ClientFamilies, f)
		parts = append(parts, fmt.Sprintf("%s (%s)", f, why))
	}
	if same {
		return fmt.Sprintf("Not run: %s (it stops client processes, and --client-procs is 0).", fault.Join(notRun))
	}
	return "Not run: " + strings.Join(parts, "; ") + "."
}

// targetLines are summary.md's lines for a peer target, and its settings
// in the history's header: Redis's appendfsync, the NATS servers' sync
// and binary.
func (c *Config) targetLines(header map[string]any) []string {
	t := c.target()
	lines := []string{targetLine(t)}
	if c.usesPower() {
		header["power_strict"] = c.PowerStrict
		if c.PowerStrict {
			lines = append(lines, "Power: strict (--power-strict): the servers' data directories were never fsynced by the harness, so a cut also drops the directory entries a server made at its start and never synced.")
		} else {
			lines = append(lines, "Power: each server's data directories were fsynced once by the harness right after the target first answered (as a filesystem that commits metadata in order would have done by then); every later directory entry is the server's to sync.")
		}
	}
	switch t {
	case TargetRedis:
		fsync := c.RedisFsync
		if fsync == "" {
			fsync = RedisFsyncEverysec
		}
		header["redis_fsync"] = string(fsync)
		lines = append(lines, fmt.Sprintf("Redis appendfsync: %s (--redis-fsync).", fsync))
	case TargetNats:
		sync := c.NatsSync
		if sync == "" {
			sync = NatsSyncDefault
		}
		header["nats_sync"] = string(sync)
		server := c.NatsServer
		if server == "" {
			server = "nats-server on PATH"
		}
		header["nats_server"] = server
		what := "the server's default (an fsync every two minutes; writes are acknowledged before)"
		if sync == NatsSyncAlways {
			what = "always (sync_interval: always, an fsync before each write is acknowledged)"
		}
		lines = append(lines, fmt.Sprintf("NATS JetStream sync: %s (--nats-sync); server: %s (--nats-server).", what, server))
	}
	return lines
}
