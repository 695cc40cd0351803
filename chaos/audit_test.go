package chaos

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/raftlock/raftlock/checker"
)

// The post-run audit's choice of the committed log it checks (audit.go).

// A removed member's journal, read from disk: the first copy of an index
// counts, a torn last line is skipped, and a gap means not complete.
func TestReadJournalFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := write("full.jsonl", `{"index":1,"term":1}
{"index":2,"term":1,"commands":[{"index":2,"term":1,"op":"grant","key":"k","tag":5,"status":"ok","token":7}]}
{"index":2,"term":1,"commands":[{"index":2,"term":1,"op":"grant","key":"other","status":"ok","token":9}]}
{"index":3,"term":2,"commands":[{"index":3,"term":2,"op":"release","key":"k","tag":9,"status":"ok","token":7}]}
{"index":4,"te`)
	l, err := readJournalFile(full)
	if err != nil {
		t.Fatal(err)
	}
	want := []checker.LogCommand{{Index: 2, Op: "grant", Key: "k", Tag: 5, Status: "ok", Token: 7}, {Index: 3, Op: "release", Key: "k", Tag: 9, Status: "ok", Token: 7}}
	if !l.Complete || len(l.Commands) != 2 || l.Commands[0] != want[0] || l.Commands[1] != want[1] {
		t.Fatalf("journal read as %+v, want complete with %+v", l, want)
	}
	gap := write("gap.jsonl", "{\"index\":40,\"term\":3}\n{\"index\":41,\"term\":3}\n")
	if l, err := readJournalFile(gap); err != nil || l.Complete {
		t.Fatalf("a journal that starts at 40 (joined by snapshot): %+v, %v; want not complete", l, err)
	}
}

func TestPickAuditLog(t *testing.T) {
	long := auditLog{Commands: make([]checker.LogCommand, 9)}
	short := auditLog{Commands: make([]checker.LogCommand, 3)}
	complete := auditLog{Complete: true, Commands: make([]checker.LogCommand, 5)}
	for _, tc := range []struct {
		logs map[int]auditLog
		want int
	}{
		{map[int]auditLog{}, 0},
		{map[int]auditLog{1: long, 2: complete, 3: short}, 2},
		{map[int]auditLog{1: short, 2: long, 3: long}, 2},
		{map[int]auditLog{3: complete, 2: complete}, 2},
	} {
		if got := pickAuditLog(tc.logs); got != tc.want {
			t.Errorf("pickAuditLog(%v logs) = %d, want %d", len(tc.logs), got, tc.want)
		}
	}
}

// The audit's choice when membership changed: a removed member's journal
// is complete from index 1 but ends at its removal, so it is not complete
// (absence from it proves nothing); a newcomer's starts late. A member
// complete to the end wins; without one, the longest, marked incomplete.
func TestPickAuditLogWithRemovedAndNewMembers(t *testing.T) {
	cmds := func(from, to uint64) []checker.LogCommand {
		var out []checker.LogCommand
		for i := from; i <= to; i++ {
			out = append(out, checker.LogCommand{Index: i, Op: "grant"})
		}
		return out
	}
	removed := auditLog{Complete: true, Commands: cmds(1, 30)}
	newcomer := auditLog{Commands: cmds(25, 60)}
	current := auditLog{Complete: true, Commands: cmds(1, 60)}
	logs := map[int]auditLog{1: removed, 2: current, 4: newcomer}
	if got := pickAuditLog(logs); got != 2 {
		t.Fatalf("picked %d, want 2 (complete to the end)", got)
	}
	if logs[1].Complete {
		t.Fatal("the removed member's log, which ends early, still says complete")
	}
	logs = map[int]auditLog{1: removed, 4: newcomer}
	if got := pickAuditLog(logs); got != 4 || logs[4].Complete || logs[1].Complete {
		t.Fatalf("picked %d (%+v), want 4, the longest, and nothing complete", got, logs[got].Complete)
	}
}
