// Package procstat reads what Linux's /proc/PID/stat says of a process:
// its state and its process group. raftlock exec uses it to see what is
// left of its command's group, the chaos harness to see a client process
// stopped, and the tests to check that nothing outlived exec. Elsewhere
// than Linux every read fails, and the callers fall back on what they do
// without /proc.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Stat is a process's state and process group.
type Stat struct {
	// State is the state letter: R running, S sleeping, T stopped by a
	// signal, t stopped by a tracer, Z zombie, X dead, and so on.
	State byte
	PGID  int
}

// Running reports whether the process runs anything: a zombie, or one
// already dead, does not.
func (s Stat) Running() bool { return s.State != 'Z' && s.State != 'X' }

// Stopped reports whether the process is stopped, by a signal (SIGSTOP)
// or a tracer.
func (s Stat) Stopped() bool { return s.State == 'T' || s.State == 't' }

// Read reads process pid's stat; an error when the process is gone or
// /proc cannot be read.
func Read(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return parse(b)
}

// parse reads "pid (comm) state ppid pgrp ...". The command's name may
// hold anything, ')' and spaces too, so the fields start after the last ')'.
func parse(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("procstat: no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("procstat: too few fields in %q", b)
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return Stat{}, fmt.Errorf("procstat: process group: %w", err)
	}
	return Stat{State: f[0][0], PGID: pgid}, nil
}

// Group lists, sorted, the processes of group pgid that run (Running).
func Group(pgid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := Read(pid)
		if err != nil {
			continue // gone meanwhile
		}
		if st.PGID == pgid && st.Running() {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}
