// Package sim is raftlock's deterministic cluster simulator: the member
// core (package member) of every member driven by one single-threaded event
// loop over a simulated network, simulated clocks and simulated disks, with
// the chaos harness's workload and fault families, and the history checked
// by the same checker. One seed decides everything, so a failing run
// replays byte for byte.
package sim
