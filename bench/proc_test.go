package bench

import (
	"os"
	"syscall"
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
	// Burn 0.3 s of CPU as the kernel's own accounting (getrusage) counts
	// it, not 0.3 s of wall time: on a loaded machine the two differ.
	x := 0
	start, deadline := rusageSeconds(t), time.Now().Add(20*time.Second)
	for rusageSeconds(t)-start < 0.3 && time.Now().Before(deadline) {
		for range 1_000_000 {
			x++
		}
	}
	burned := rusageSeconds(t) - start
	after, err := cpuSeconds([]int{pid, pid})
	if err != nil {
		t.Fatal(err)
	}
	if grew := after/2 - before; grew < burned/2 || grew > burned+5 {
		t.Errorf("burned %.2f s of CPU, measured %.2f s (x=%d)", burned, grew, x)
	}
	if _, err := cpuSeconds([]int{1 << 30}); err == nil {
		t.Error("a missing process gave no error")
	}
}

// rusageSeconds is this process's user and system CPU time so far.
func rusageSeconds(t *testing.T) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
