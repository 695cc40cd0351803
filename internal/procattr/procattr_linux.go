package procattr

import "syscall"

// DieWithParent returns attributes under which the child is sent SIGKILL
// when the thread that started it exits (Linux's parent-death signal).
func DieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
