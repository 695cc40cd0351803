package chaos

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/node/peer"
)

// A gateway carries each stream on the directed link its hello names: a
// cut link (1 -> 3) swallows member 1's messages while member 2's, sent to
// the same address, arrive; a stream that opens with no hello is closed.
func TestGatewayRoutesByHelloSender(t *testing.T) {
	sink := newFrameSink(t)
	links := map[int]*Proxy{1: newLink(sink.addr, 1), 2: newLink(sink.addr, 2)}
	g, err := NewGateway(3, func(from int) *Proxy { return links[from] })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, p := range links {
		defer p.Close()
	}
	links[1].SetBlocked(true)
	dial := func(from uint64) net.Conn {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		writeFrame(t, c, peer.EncodeHello(from, 3, "127.0.0.1:1"))
		writeFrame(t, c, []byte{byte(from), 'm', 's', 'g'})
		return c
	}
	dial(1)
	dial(2)
	if a := sink.next(t); !bytes.HasPrefix(a.payload, []byte("RLP1\x02")) {
		t.Fatalf("first frame through the gateway %q, want member 2's hello", a.payload)
	}
	if a := sink.next(t); !bytes.Equal(a.payload, []byte{2, 'm', 's', 'g'}) {
		t.Fatalf("second frame %q, want member 2's message", a.payload)
	}
	waitFor(t, func() bool { return links[1].Counts().Blackholed > 0 })
	select {
	case a := <-sink.frames:
		t.Fatalf("a frame of the cut link 1->3 arrived: %q", a.payload)
	case <-time.After(100 * time.Millisecond):
	}
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	writeFrame(t, c, []byte("GET / HTTP/1.1"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a stream without a hello was not closed")
	}
}

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
