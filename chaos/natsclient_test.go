package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/client"
)

// A lock's value carries its owner, and once renewed the grant's token;
// a created lock's token is the revision it was stored at.
func TestNatsValueRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		owner      string
		token, rev uint64
		want       uint64
	}{
		{"chaos-1", 0, 17, 17},  // created: the token is the revision
		{"chaos-1", 17, 42, 17}, // renewed: the token is carried
		{"a;o=b", 5, 9, 5},      // an owner with the separator in it
		{"", 0, 1, 1},
	} {
		token, owner, err := parseNatsValue(natsValue(tc.owner, tc.token), tc.rev)
		if err != nil || token != tc.want || owner != tc.owner {
			t.Errorf("value of (%q, %d) at revision %d: token %d owner %q err %v; want %d %q", tc.owner, tc.token, tc.rev, token, owner, err, tc.want, tc.owner)
		}
	}
	// What no client of ours wrote is never read as a token.
	for _, v := range []string{"", "ready", "t=;o=x", "t=0;o=x", "t=9;o=x", "t=x;o=y", "t=3"} {
		if token, _, err := parseNatsValue([]byte(v), 5); err == nil {
			t.Errorf("%q at revision 5 read as token %d", v, token)
		}
	}
}

// A delete marker (a release, or a forced one) leaves the key free at
// the marker's revision; a value is a hold.
func TestNatsEntryOf(t *testing.T) {
	for _, op := range []string{natsOpDelete, natsOpPurge} {
		e, err := entryOf(12, op, nil)
		if err != nil || !e.deleted || e.rev != 12 {
			t.Errorf("%s marker: %+v %v", op, e, err)
		}
	}
	e, err := entryOf(12, "", natsValue("o", 7))
	if err != nil || e.deleted || e.token != 7 || e.owner != "o" || e.rev != 12 {
		t.Errorf("renewed value: %+v %v", e, err)
	}
	if _, err := entryOf(12, "", []byte("garbage")); err == nil {
		t.Error("a value of no lock read as a hold")
	}
}

// An acquire whose create was refused says held only when its read finds
// a hold: a read that failed claims no holder (seen: a release, then an
// acquire answered held while the read after the refusal had failed).
func TestAfterRefusedCreate(t *testing.T) {
	for _, tc := range []struct {
		e      natsEntry
		err    error
		expect uint64
		want   error
	}{
		{natsEntry{rev: 9, token: 9, owner: "o"}, nil, 0, client.ErrHeld},
		{natsEntry{rev: 9, deleted: true}, nil, 9, nil},
		{natsEntry{}, nil, 0, client.ErrUnavailable},
		{natsEntry{}, fmt.Errorf("%w: read k: timeout", client.ErrUnavailable), 0, client.ErrUnavailable},
		{natsEntry{}, errors.New(`nats: lock value "x" is not ours`), 0, client.ErrUnavailable},
	} {
		expect, err := afterRefusedCreate(tc.e, tc.err)
		if expect != tc.expect || !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%+v, %v: %d %v; want %d %v", tc.e, tc.err, expect, err, tc.expect, tc.want)
		}
		if tc.want != client.ErrHeld && errors.Is(err, client.ErrHeld) {
			t.Errorf("%+v, %v: held claimed", tc.e, tc.err)
		}
	}
}

// How a publish's or read's error reads to the workload: a failed compare
// is definite, so are answers that say nothing was stored; a timeout or
// a lost connection leaves the outcome unknown, never a definite fail.
func TestNatsOutcome(t *testing.T) {
	wrong := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 4"}
	wrongR3 := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}
	other := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	for _, tc := range []struct {
		err  error
		want error
	}{
		{wrong, client.ErrHeld},
		{fmt.Errorf("publish: %w", wrong), client.ErrHeld},
		{wrongR3, client.ErrUnavailable}, // another write in flight: says nothing of the key
		{nats.ErrNoResponders, client.ErrUnavailable},
		{jetstream.ErrNoStreamResponse, client.ErrUnavailable},
		{other, client.ErrUnavailable},
		{context.DeadlineExceeded, client.ErrOutcomeUnknown},
		{nats.ErrTimeout, client.ErrOutcomeUnknown},
		{nats.ErrConnectionClosed, client.ErrOutcomeUnknown},
	} {
		if got := natsOutcome(tc.err, client.ErrHeld); !errors.Is(got, tc.want) {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
	if natsOutcome(nil, client.ErrHeld) != nil {
		t.Error("no error read as one")
	}
}

// Each server's configuration: its name, JetStream on its data
// directory, every write synced only with --nats-sync always, and one
// route per other server, through the links given.
func TestNatsConfig(t *testing.T) {
	conf := natsConfig(2, "127.0.0.1:4222", "127.0.0.1:6222", "127.0.0.1:1", "/d/nats-2", []string{"127.0.0.1:7001", "127.0.0.1:7003"}, NatsSyncDefault)
	for _, want := range []string{"server_name: n2\n", `store_dir: "/d/nats-2"`, `listen: "127.0.0.1:6222"`, `advertise: "127.0.0.1:1"`,
		`"nats-route://127.0.0.1:7001"`, `"nats-route://127.0.0.1:7003"`} {
		if !strings.Contains(conf, want) {
			t.Errorf("configuration lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "sync_interval") {
		t.Errorf("the default sync sets sync_interval:\n%s", conf)
	}
	if conf := natsConfig(2, "a", "b", "c", "d", nil, NatsSyncAlways); !strings.Contains(conf, "sync_interval: always") {
		t.Errorf("--nats-sync always does not sync every write:\n%s", conf)
	}
}

// The bucket is a key-value bucket nats.go binds (history 1, three
// replicas) whose lease is its MaxAge, and whose reads go to the leader.
func TestNatsBucketConfig(t *testing.T) {
	c := bucketConfig(time.Second)
	if c.Name != "KV_locks" || c.MaxMsgsPerSubject != 1 || c.Replicas != 3 || c.MaxAge != time.Second || c.AllowDirect || c.Duplicates > c.MaxAge {
		t.Errorf("bucket config %+v", c)
	}
}

// --redis-fsync and --nats-sync take their settings, with their target
// only.
func TestPeerSettingsFlags(t *testing.T) {
	for _, tc := range []struct {
		mod func(*Config)
		ok  bool
	}{
		{func(c *Config) { c.Target, c.RedisFsync = TargetRedis, RedisFsyncAlways }, true},
		{func(c *Config) { c.Target, c.RedisFsync = TargetRedis, RedisFsyncEverysec }, true},
		{func(c *Config) { c.Target, c.RedisFsync = TargetRedis, "no" }, false},
		{func(c *Config) { c.Target, c.RedisFsync = TargetEtcd, RedisFsyncAlways }, false},
		{func(c *Config) { c.RedisFsync = RedisFsyncAlways }, false},
		{func(c *Config) { c.Target, c.NatsSync = TargetNats, NatsSyncAlways }, true},
		{func(c *Config) { c.Target, c.NatsSync = TargetNats, "sometimes" }, false},
		{func(c *Config) { c.Target, c.NatsServer = TargetRedis, "/bin/nats-server" }, false},
		{func(c *Config) { c.Target, c.PowerStrict = TargetEtcd, true }, false},
		{func(c *Config) {
			c.Target, c.PowerStrict, c.Nemeses = TargetEtcd, true, []fault.Family{fault.FamilyPowerAll}
		}, true},
		{func(c *Config) { c.PowerStrict, c.Nemeses = true, []fault.Family{fault.FamilyPowerAll} }, false},
	} {
		c := Defaults()
		tc.mod(&c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("target %s redis-fsync %q nats-sync %q nats-server %q power-strict %v: %v, want ok %v", c.Target, c.RedisFsync, c.NatsSync, c.NatsServer, c.PowerStrict, err, tc.ok)
		}
	}
}

// The header and summary.md name the target's durability setting.
func TestTargetLinesNameTheSetting(t *testing.T) {
	c := Defaults()
	c.Target = TargetRedis
	header := map[string]any{}
	lines := strings.Join(c.targetLines(header), "\n")
	if header["redis_fsync"] != "everysec" || !strings.Contains(lines, "Redis appendfsync: everysec") {
		t.Errorf("redis default: %v\n%s", header, lines)
	}
	c = Defaults()
	c.Target, c.NatsSync, c.Nemeses = TargetNats, NatsSyncAlways, []fault.Family{fault.FamilyPowerAll}
	header = map[string]any{}
	lines = strings.Join(c.targetLines(header), "\n")
	if header["nats_sync"] != "always" || header["power_strict"] != false || !strings.Contains(lines, "sync_interval: always") {
		t.Errorf("nats always: %v\n%s", header, lines)
	}
}

// parseNatsValue reads any bytes without panicking, and a token it reads
// is never past the revision the value was stored at.
func FuzzParseNatsValue(f *testing.F) {
	for _, s := range []string{"o=x", "t=3;o=y", "t=;o=", "t=18446744073709551615;o=z", ""} {
		f.Add([]byte(s), uint64(5))
	}
	f.Fuzz(func(t *testing.T, v []byte, rev uint64) {
		token, _, err := parseNatsValue(v, rev)
		if err == nil && (token == 0 && rev != 0 || token > rev) {
			t.Fatalf("%q at revision %d read as token %d", v, rev, token)
		}
	})
}
