package clusterstatus

import (
	"bytes"
	"strings"
	"testing"
)

// The table has a row per endpoint (dashes for one that gave no status),
// one line per refusal reason, the configuration and the members nobody
// asked; --json carries the same.
func TestWrite(t *testing.T) {
	r := report(answered(1, 1, 5, "leader", 1, 2, 3),
		Entry{Addr: "b", Role: RoleRefused, Error: "permission denied"},
		Entry{Addr: "c", Role: RoleRefused, Error: "permission denied"})
	r.Missing = notShown(r.Entries, r.Voters, r.Learners)
	var text bytes.Buffer
	if err := r.Write(&text, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ID  ADDR  ROLE     TERM  LEADER  COMMIT  APPLIED  DIGEST\n",
		"1   m     leader   1     1       5       5        \n",
		"-   b     refused  -     -       -       -        -\n",
		"refused by b, c: permission denied\n",
		"configuration: voters 1 2 3; learners none\n",
		"not asked: members 2 3 (status --cluster asks every member)\n",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := r.Write(&js, true); err != nil {
		t.Fatal(err)
	}
	if want := `"configuration":{"learners":[],"voters":[1,2,3]},"nodes":[{"id":1,"addr":"m","role":"leader"`; !strings.Contains(js.String(), want) || !strings.Contains(js.String(), `"not_asked":[2,3]`) {
		t.Errorf("JSON %s lacks %s or not_asked", js.String(), want)
	}
}
