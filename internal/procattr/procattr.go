// Package procattr gives the process attributes of the members and clients
// the chaos harness and the benchmark start: where the system allows it,
// a child dies with the harness that started it, so a harness killed
// mid-run leaves no member running on its ports.
package procattr
