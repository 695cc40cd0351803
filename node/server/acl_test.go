package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const exampleACL = `{"rules":[
 {"identity":"batch","prefixes":["jobs/"],"rights":["lock","read"]},
 {"identity":"batch","prefixes":["reports/"],"rights":["read"]},
 {"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]}]}`

// A request is allowed when any rule of its identity grants its right on
// a prefix of its key; an identity without a rule may do nothing.
func TestACLAllows(t *testing.T) {
	a, err := ParseACL([]byte(exampleACL), "example")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who, right, key string
		want            bool
	}{
		{"batch", RightLock, "jobs/x", true},
		{"batch", RightRead, "jobs/x", true},
		{"batch", RightLock, "jobs/", true},
		{"batch", RightLock, "jobs", false},
		{"batch", RightLock, "other/x", false},
		{"batch", RightRead, "reports/q1", true},  // the second rule
		{"batch", RightLock, "reports/q1", false}, // read only there
		{"batch", RightAdmin, "", false},
		{"admin", RightLock, "anything", true},
		{"admin", RightAdmin, "", true},
		{"nobody", RightRead, "jobs/x", false},
		{"", RightRead, "jobs/x", false},
		{"Batch", RightLock, "jobs/x", false}, // identities are exact
	} {
		if got := a.Allows(c.who, c.right, c.key); got != c.want {
			t.Errorf("%q %s %q: %v, want %v", c.who, c.right, c.key, got, c.want)
		}
	}
}

func TestACLRejectsBadFiles(t *testing.T) {
	for name, body := range map[string]string{
		"not json":        `{"rules":`,
		"no rules":        `{}`,
		"unknown field":   `{"rules":[],"extra":1}`,
		"no identity":     `{"rules":[{"prefixes":[""],"rights":["lock"]}]}`,
		"no prefixes":     `{"rules":[{"identity":"a","rights":["lock"]}]}`,
		"no rights":       `{"rules":[{"identity":"a","prefixes":[""]}]}`,
		"unknown right":   `{"rules":[{"identity":"a","prefixes":[""],"rights":["write"]}]}`,
		"misspelt fields": `{"rules":[{"identity":"a","prefix":[""],"rights":["lock"]}]}`,
	} {
		if _, err := ParseACL([]byte(body), name); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParseACL([]byte(`{"rules":[]}`), "empty"); err != nil {
		t.Errorf("an empty rule list (nobody may do anything) was refused: %v", err)
	}
}

// LoadACL reads the file anew each time: a reload sees the new rules, and
// a broken file is an error the caller keeps its old ACL on.
func TestACLReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acl.json")
	os.WriteFile(path, []byte(exampleACL), 0o644)
	a, err := LoadACL(path)
	if err != nil {
		t.Fatal(err)
	}
	if a.Allows("batch", RightLock, "other/x") {
		t.Fatal("batch may lock other/x before the change")
	}
	os.WriteFile(path, []byte(strings.Replace(exampleACL, `"jobs/"]`, `"jobs/","other/"]`, 1)), 0o644)
	b, err := LoadACL(path)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Allows("batch", RightLock, "other/x") {
		t.Fatal("the reloaded ACL does not let batch lock other/x")
	}
	os.WriteFile(path, []byte(`{"rules":[{"identity":"batch"}]}`), 0o644)
	if _, err := LoadACL(path); err == nil {
		t.Fatal("a broken ACL file loaded")
	}
}
