// Package invariants says whether the build checks the code's internal
// invariants, in the style of pebble's internal/invariants: the checks
// cost time in the size of what they check, so they run only in a build
// with the tag (go test -tags invariants, as make test does; CI runs the
// simulator from such a build), and a
// violation panics.
package invariants
