package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/client/wire"
)

// raftlock acquire refuses a key that breaks the key rule before it asks
// anyone (nothing listens here), as every entry does, with the rule's
// message: $'u8/\xff\xfe' could once be taken here and then not named by
// the APIs.
func TestAcquireRefusesAKeyBreakingTheKeyRule(t *testing.T) {
	code, _, stderr := cli(t, "acquire", "u8/\xff\xfe", "--endpoints", "127.0.0.1:1")
	if code != exitError || !strings.Contains(stderr, wire.ErrKeyNotText.Error()) {
		t.Errorf("acquire of a key that is not UTF-8: exit %d, stderr %q", code, stderr)
	}
	code, out, _ := cli(t, "acquire", "u8/\xff\xfe", "--json", "--endpoints", "127.0.0.1:1")
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != exitError || got["error"] != "invalid-argument" ||
		!strings.Contains(got["message"].(string), wire.ErrKeyNotText.Error()) {
		t.Errorf("acquire --json of a key that is not UTF-8: exit %d, %q", code, out)
	}
}
