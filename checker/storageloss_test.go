package checker

import "testing"

// A member restarted over damaged data that started with less than it had
// applied fails the run; one that started whole passes; without the
// corrupt family the check is skipped and decides nothing.
func TestStorageLossDecides(t *testing.T) {
	events := syntheticHistory(50, 1)
	loss := "member 2 had applied index 900 before it stopped; after bitflip of 000004.log it started over a log ending at 132"
	if v := Check(events, Options{StorageLoss: &StorageLoss{Started: 1, Losses: []string{loss}}}); v.ExitCode != ExitViolation ||
		statusOf(v, "storage-loss") != StatusViolation {
		t.Fatalf("a storage loss: exit %d, storage-loss %s", v.ExitCode, statusOf(v, "storage-loss"))
	}
	if v := Check(events, Options{StorageLoss: &StorageLoss{Started: 3}}); v.ExitCode != ExitValid || statusOf(v, "storage-loss") != StatusOK {
		t.Fatalf("members that started whole: exit %d", v.ExitCode)
	}
	for _, r := range Check(events, Options{}).Checks {
		if r.Name == "storage-loss" && (r.Status != StatusSkipped || r.Decides) {
			t.Fatalf("no corrupt family: %s, decides %v; want skipped", r.Status, r.Decides)
		}
	}
}
