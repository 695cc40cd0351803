package sim

import (
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker"
)

// With the unfenced register, a simulated holder that stalled past its
// lease overwrites the next holder's update: the fenced-resource check
// finds it, and the header names the mode; the default header does not.
func TestUnfencedResourceLosesUpdates(t *testing.T) {
	cfg := Config{Seed: 1, Duration: 20 * time.Second, Faults: Families, Resource: workload.Unfenced}
	cfg.Defaults()
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Header["resource"] != "unfenced" {
		t.Fatalf("header %v does not name the resource", res.Header)
	}
	v := Check(res, 0)
	found := false
	for _, r := range v.Checks {
		found = found || (r.Name == "fenced-resource" && r.Status == checker.StatusViolation)
	}
	if v.Valid || !found {
		t.Fatalf("unfenced run: verdict %s; want fenced-resource violated", v.Verdict)
	}
	cfg.Resource = ""
	res, err = Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Header["resource"]; ok {
		t.Fatalf("default header names the resource: %v", res.Header)
	}
}
