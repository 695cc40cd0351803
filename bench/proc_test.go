package bench

import (
	"os"
	"testing"
	"time"
)

// CPU time is read through procfs: this process's grows by about what it
// burns, and a process that does not exist is an error, not zero.
func TestCPUSeconds(t *testing.T) {
	pid := os.Getpid()
	before, err := cpuSeconds([]int{pid})
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		x++
	}
	after, err := cpuSeconds([]int{pid, pid})
	if err != nil {
		t.Fatal(err)
	}
	if grew := after/2 - before; grew < 0.1 || grew > 5 {
		t.Errorf("burned 0.3 s of CPU, measured %.2f s (x=%d)", grew, x)
	}
	if _, err := cpuSeconds([]int{1 << 30}); err == nil {
		t.Error("a missing process gave no error")
	}
}
