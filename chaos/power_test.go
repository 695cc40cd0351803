package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/lazyfs"
)

// powerConfig is a valid config with nemeses.
func powerConfig(nemeses ...fault.Family) Config {
	cfg := Defaults()
	cfg.Nemeses = nemeses
	return cfg
}

// The power families are opt-in, carried out on every target (a peer's
// servers' data is mounted as raftlock's members' is), and not with
// membership (a newcomer's data would be on no mount).
func TestPowerFamiliesAreOptIn(t *testing.T) {
	for _, f := range []fault.Family{fault.FamilyPower, fault.FamilyPowerAll} {
		if slices.Contains(Families, f) || !slices.Contains(OptInFamilies, f) {
			t.Errorf("%s: want an opt-in family, not a default one", f)
		}
		cfg := powerConfig("kill", f)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("--nemesis kill,%s: %v", f, err)
		}
		if !cfg.usesPower() {
			t.Errorf("--nemesis kill,%s does not mount the members' data", f)
		}
		cfg.Nemeses = append(cfg.Nemeses, fault.FamilyMembership)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "membership") {
			t.Errorf("--nemesis %s,membership: %v, want refused", f, err)
		}
	}
	if cfg := powerConfig(Families...); cfg.usesPower() || cfg.checkPower() != nil {
		t.Error("the default families mount the members' data on lazyfs")
	}
	for _, target := range []Target{TargetEtcd, TargetRedis, TargetNats} {
		peer := powerConfig("kill", fault.FamilyPower, fault.FamilyPowerAll)
		peer.Target = target
		if _, notRun := peer.nemeses(); len(notRun) > 0 || !peer.usesPower() {
			t.Errorf("%s with power: not run %v, mounts %v; want both run on mounted data", target, notRun, peer.usesPower())
		}
	}
}

// Where lazyfs cannot mount, a power run is refused, not run without
// its cuts.
func TestPowerRefusedWithoutFUSE(t *testing.T) {
	if lazyfs.Available() == nil {
		t.Skip("this machine can mount lazyfs")
	}
	cfg := powerConfig(fault.FamilyPowerAll)
	err := cfg.checkPower()
	if err == nil || !strings.Contains(err.Error(), "root and /dev/fuse") {
		t.Fatalf("checkPower: %v, want a refusal naming root and /dev/fuse", err)
	}
	if _, err := Run(context.Background(), cfg); err == nil {
		t.Fatal("Run with power-all went ahead without FUSE")
	} else if _, ok := err.(*HarnessError); !ok {
		t.Fatalf("Run: %T %v, want a *HarnessError (exit 3)", err, err)
	}
}

// The members' mounts: each data directory on its own mount over a
// backing directory beside it; a cut drops what was not synced and
// counts it; closing the run unmounts every one, whatever ended it.
func TestPowerMountsCutAndUnmountWithTheRun(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	dataDir := func(id int) string { return filepath.Join(dir, fmt.Sprintf("data-%d", id)) }
	p, err := mountPower(context.Background(), dataDir, []int{1, 2}, 1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r := &run{cfg: Config{Log: slog.New(slog.DiscardHandler)}, power: p}
	defer r.close()
	for _, id := range []int{1, 2} {
		if !mounted(t, dataDir(id)) {
			t.Fatalf("%s is not a lazyfs mount", dataDir(id))
		}
	}
	synced := filepath.Join(dataDir(1), "synced")
	f, err := os.Create(synced)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(bytes.Repeat([]byte("s"), 100))
	f.Sync()
	f.Write(bytes.Repeat([]byte("u"), 5000))
	f.Close()
	if d, err := os.Open(dataDir(1)); err == nil {
		d.Sync() // the file's entry is durable; its last 5000 bytes are not
		d.Close()
	}
	if err := os.WriteFile(filepath.Join(dataDir(1), "unsynced"), []byte("gone"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := p.cut(1, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != "drop-all" || c.BytesDropped != 5000+4 || c.EntriesUndone != 1 {
		t.Errorf("cut %+v, want drop-all of 5004 bytes and 1 entry", c)
	}
	if b, err := os.ReadFile(synced); err != nil || string(b) != strings.Repeat("s", 100) {
		t.Errorf("after the cut the synced file reads %q, %v; want its 100 synced bytes", b, err)
	}
	if _, err := os.Stat(filepath.Join(dataDir(1), "unsynced")); !os.IsNotExist(err) {
		t.Errorf("the unsynced file survived the cut: %v", err)
	}
	if _, err := p.cut(3, true); err == nil {
		t.Error("a cut of a member with no mount succeeded")
	}
	r.close()
	for _, id := range []int{1, 2} {
		if mounted(t, dataDir(id)) {
			t.Errorf("%s still mounted after the run closed", dataDir(id))
		}
	}
	if b, err := os.ReadFile(filepath.Join(dataDir(1)+".backing", "synced")); err != nil || len(b) != 100 {
		t.Errorf("the backing directory holds %d bytes of the file, %v; want the 100 the cut left", len(b), err)
	}
}

// mounted says whether mountpoint is in /proc/mounts.
func mounted(t *testing.T, mountpoint string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == mountpoint {
			return true
		}
	}
	return false
}

// The verdict carries the power counts, and summary.md names them, only
// when a power family cut something.
func TestPowerCountsReachTheVerdict(t *testing.T) {
	res := &Result{Power: PowerCounts{Cuts: 3, BytesDropped: 12345}}
	v := Check(res, time.Second)
	if v.Stats.PowerCuts != 3 || v.Stats.PowerBytesDropped != 12345 {
		t.Fatalf("stats %+v, want 3 cuts and 12345 bytes", v.Stats)
	}
	var sum bytes.Buffer
	v.Summary(&sum)
	if !strings.Contains(sum.String(), "Power: 3 cuts of a member's disk, which dropped 12345 unsynced bytes") {
		t.Errorf("summary.md lacks the power line:\n%s", sum.String())
	}
	none := Check(&Result{}, time.Second)
	sum.Reset()
	none.Summary(&sum)
	if strings.Contains(sum.String(), "Power:") || none.Stats.PowerCuts != 0 {
		t.Errorf("a run without power cuts reports them:\n%s", sum.String())
	}
	// verdict.json of a run without power families is as it was.
	if b, _ := json.Marshal(none.Stats); bytes.Contains(b, []byte("power")) {
		t.Errorf("verdict stats of a run without power: %s", b)
	}
}
