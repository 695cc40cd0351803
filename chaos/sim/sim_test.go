package sim

import (
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	start := time.Now()
	res, err := Run(Config{Seed: 1, Duration: 10 * time.Second, Faults: Families})
	if err != nil {
		t.Fatal(err)
	}
	v := Check(res, 10*time.Second)
	t.Logf("wall %v stats %+v verdict %s first %q crashes %v safety %v", time.Since(start), res.Stats, v.Verdict, FailingCheck(v), res.Crashes, res.Safety)
}
