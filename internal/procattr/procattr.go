// Package procattr gives the process attributes of the members, servers
// and clients the chaos harness and the benchmark start: each in a process
// group of its own, so that a terminal's Ctrl-C, which goes to the whole
// foreground group, reaches only the harness, which then stops them in
// its own order (a member that took the signal itself would exit before
// the harness healed the cluster, and read as a crash); and, where the
// system allows it, dying with the harness that started it, so a harness
// killed mid-run leaves no member running on its ports.
package procattr
