package chaos

import "testing"

// The defaults `raftlock chaos` starts from make a valid run with every
// default family.
func TestDefaultsAreAValidRun(t *testing.T) {
	d := Defaults()
	d.Nemeses = Families
	if err := d.Validate(); err != nil {
		t.Fatalf("chaos.Defaults() does not validate: %v", err)
	}
}
