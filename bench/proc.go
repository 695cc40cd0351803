package bench

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// cpuSeconds sums user+system CPU time of the processes, read from /proc
// by prometheus/procfs (which parses stat's fields after the command name,
// spaces and parentheses in it included, and converts clock ticks).
func cpuSeconds(pids []int) (float64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	var total float64
	for _, pid := range pids {
		p, err := fs.Proc(pid)
		if err != nil {
			return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
		}
		st, err := p.Stat()
		if err != nil {
			return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
		}
		total += st.CPUTime()
	}
	return total, nil
}

// residentBytes is a process's resident memory (VmRSS).
func residentBytes(pid int) (uint64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, fmt.Errorf("resident memory: %w", err)
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return 0, fmt.Errorf("resident memory of %d: %w", pid, err)
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, fmt.Errorf("resident memory of %d: %w", pid, err)
	}
	return st.VmRSS, nil
}
