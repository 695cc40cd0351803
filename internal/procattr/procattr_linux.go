package procattr

import "syscall"

// Child returns the attributes of a process a harness starts: a process
// group of its own, and SIGKILL when the thread that started it exits
// (Linux's parent-death signal).
func Child() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
