//go:build invariants

package invariants

// Enabled: this build checks invariants.
const Enabled = true
