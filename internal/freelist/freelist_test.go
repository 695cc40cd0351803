package freelist

import "testing"

// A freed place is taken again, last freed first, before the slice grows.
func TestTakeReusesFreedPlacesFirst(t *testing.T) {
	var all []string
	var free []int32
	for want := int32(0); want < 3; want++ {
		if i := Take(&all, &free); i != want {
			t.Fatalf("Take = %d, want %d", i, want)
		}
	}
	free = append(free, 0, 2)
	for _, want := range []int32{2, 0, 3} {
		if i := Take(&all, &free); i != want {
			t.Fatalf("Take = %d, want %d", i, want)
		}
	}
	if len(all) != 4 || len(free) != 0 {
		t.Fatalf("%d places and %d free, want 4 and 0", len(all), len(free))
	}
}
