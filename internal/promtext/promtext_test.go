package promtext

import (
	"strings"
	"testing"
)

// What a hand-rolled "name value" split got wrong: a sample with a
// timestamp, an exponent, an escaped label value holding a space, a
// labelled sample of the same name, and a name that is another's prefix;
// and a histogram's and a summary's sum and count.
func TestParse(t *testing.T) {
	const exposition = `# HELP raftlock_snapshots_total Snapshots taken.
# TYPE raftlock_snapshots_total counter
raftlock_snapshots_total 12 1700000000000
# TYPE raftlock_first_index gauge
raftlock_first_index 1.2345e+06
raftlock_applied_index 1234599
# TYPE raftlock_client_requests_total counter
raftlock_client_requests_total{op="acquire",result="a \"b\" c"} 99
raftlock_snapshots_total_bogus 7
# TYPE raftlock_request_seconds histogram
raftlock_request_seconds_bucket{le="+Inf"} 3
raftlock_request_seconds_sum 0.5
raftlock_request_seconds_count 3
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 0.001
go_gc_duration_seconds_sum 0.25
go_gc_duration_seconds_count 40
`
	got, err := Parse(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"raftlock_snapshots_total": 12, "raftlock_first_index": 1234500,
		"raftlock_applied_index": 1234599, "raftlock_snapshots_total_bogus": 7,
		"raftlock_request_seconds_sum": 0.5, "raftlock_request_seconds_count": 3,
		"go_gc_duration_seconds_sum": 0.25, "go_gc_duration_seconds_count": 40}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
	if _, ok := got["raftlock_client_requests_total"]; ok {
		t.Error("a labelled sample was read as the unlabelled value")
	}
	if _, err := Parse(strings.NewReader("raftlock_x{op=\"unterminated} 1\n")); err == nil {
		t.Error("a malformed exposition was accepted")
	}
}
