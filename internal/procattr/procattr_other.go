//go:build !linux

package procattr

import "syscall"

// Child returns the attributes of a process a harness starts: a process
// group of its own. Only Linux has a parent-death signal, so elsewhere a
// child outlives a harness that is killed, and the harness stops its
// children itself on every other way out.
func Child() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
