package lockrule

import (
	"strings"
	"testing"
)

// Each check at and around its bounds.
func TestBounds(t *testing.T) {
	for _, tc := range []struct {
		what string
		err  error
		ok   bool
	}{
		{"empty key", ValidateStoredKey(""), false},
		{"longest key", ValidateKey(strings.Repeat("k", MaxKeyLen)), true},
		{"key one too long", ValidateStoredKey(strings.Repeat("k", MaxKeyLen+1)), false},
		{"stored key not UTF-8", ValidateStoredKey("\xff"), true},
		{"new key not UTF-8", ValidateKey("\xff"), false},
		{"new key with NUL", ValidateKey("a\x00"), false},
		{"longest owner", ValidateOwner(strings.Repeat("o", MaxOwnerLen)), true},
		{"owner one too long", ValidateOwner(strings.Repeat("o", MaxOwnerLen+1)), false},
		{"owner not UTF-8", ValidateOwner("\xff"), false},
		{"shortest lease", ValidateLease(MinLeaseMS), true},
		{"lease one too short", ValidateLease(MinLeaseMS - 1), false},
		{"longest lease", ValidateLeaseMS(MaxLeaseMS), true},
		{"lease past int64", ValidateLeaseMS(1 << 63), false},
		{"list limit", ValidateListLimit(MaxListLimit), true},
		{"list limit one too many", ValidateListLimit(MaxListLimit + 1), false},
	} {
		if (tc.err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.what, tc.err, tc.ok)
		}
	}
	if err := ValidateLeaseMS(1 << 63); err == nil || !strings.Contains(err.Error(), "got 9223372036854775808ms") {
		t.Errorf("a lease past int64 is named as given: %v", err)
	}
}
