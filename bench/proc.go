package bench

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// cpuSeconds sums user+system CPU time of the processes, read from /proc
// by prometheus/procfs (which parses stat's fields after the command name,
// spaces and parentheses in it included, and converts clock ticks).
func cpuSeconds(pids []int) (float64, error) {
	var total float64
	for _, pid := range pids {
		st, err := readProc(pid, "cpu time", procfs.Proc.Stat)
		if err != nil {
			return 0, err
		}
		total += st.CPUTime()
	}
	return total, nil
}

// residentBytes is a process's resident memory (VmRSS).
func residentBytes(pid int) (uint64, error) {
	st, err := readProc(pid, "resident memory", procfs.Proc.NewStatus)
	if err != nil {
		return 0, err
	}
	return st.VmRSS, nil
}

// readProc reads a file of pid's in /proc with read; what names the
// reading in its errors.
func readProc[T any](pid int, what string, read func(procfs.Proc) (T, error)) (T, error) {
	var zero T
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return zero, fmt.Errorf("%s of %d: %w", what, pid, err)
	}
	v, err := read(p)
	if err != nil {
		return zero, fmt.Errorf("%s of %d: %w", what, pid, err)
	}
	return v, nil
}
