//go:build !linux

package procattr

import "syscall"

// DieWithParent returns no attributes: only Linux has a parent-death
// signal, so elsewhere a child outlives a harness that is killed, and the
// harness stops its children itself on every other way out.
func DieWithParent() *syscall.SysProcAttr { return nil }
