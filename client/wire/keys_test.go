package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

// The key rule: a new key is 1..256 bytes of UTF-8 without NUL; a key the
// cluster may already hold needs only its length, so one stored before
// the rule stays nameable.
func TestKeyRule(t *testing.T) {
	for _, tc := range []struct {
		key         string
		new, stored string // the errors' messages, "" for none
	}{
		{"jobs/nightly", "", ""},
		{"ключ/µ/\U0001F512", "", ""},
		{"\uFFFD", "", ""}, // U+FFFD is text like any other
		{strings.Repeat("k", MaxKeyLen), "", ""},
		{"", "key must be 1..256 bytes, got 0", "key must be 1..256 bytes, got 0"},
		{strings.Repeat("k", MaxKeyLen+1), "key must be 1..256 bytes, got 257", "key must be 1..256 bytes, got 257"},
		{"u8/\xff\xfe", "key must be valid UTF-8 without NUL", ""},
		{"a\x00b", "key must be valid UTF-8 without NUL", ""},
		{"\xed\xa0\x80", "key must be valid UTF-8 without NUL", ""}, // a surrogate, encoded
		{strings.Repeat("\xff", MaxKeyLen+1), "key must be 1..256 bytes, got 257", "key must be 1..256 bytes, got 257"},
	} {
		if got := errText(ValidateKey(tc.key)); got != tc.new {
			t.Errorf("ValidateKey(%q) = %q, want %q", tc.key, got, tc.new)
		}
		if got := errText(ValidateStoredKey(tc.key)); got != tc.stored {
			t.Errorf("ValidateStoredKey(%q) = %q, want %q", tc.key, got, tc.stored)
		}
	}
	if err := ValidateKey("a\x00"); err != ErrKeyNotText {
		t.Errorf("ValidateKey of a NUL key: %v, want ErrKeyNotText", err)
	}
	if got := errText(ValidateOwner("ci-\xff")); got != "owner must be valid UTF-8" {
		t.Errorf("an owner that is not UTF-8: %q", got)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A key that is not UTF-8 is shown as encoding/json would write it, and
// carried whole in key_b64 beside key by a listed lock's and an event's
// JSON, which read back to the key itself; a UTF-8 key has no key_b64.
func TestJSONCarriesKeysThatAreNotText(t *testing.T) {
	const raw = "u8/\xff\xfe"
	if got := AsText(raw); got != "u8/\uFFFD\uFFFD" {
		t.Errorf("AsText(%q) = %q", raw, got)
	}
	if got, _ := json.Marshal(raw); string(got) != `"u8/\ufffd\ufffd"` {
		t.Errorf("encoding/json writes %s: AsText must agree", got)
	}
	if got := AsText("ok/µ"); got != "ok/µ" {
		t.Errorf("AsText of text: %q", got)
	}

	lock := Lock{Key: raw, Token: 7, Owner: "o", RemainingMS: 10}
	b, err := json.Marshal(lock)
	if want := `{"key":"u8/\ufffd\ufffd","token":7,"owner":"o","remaining_ms":10,"key_b64":"dTgv//4="}`; err != nil || string(b) != want {
		t.Errorf("lock JSON %s (%v), want %s", b, err, want)
	}
	var back Lock
	if err := json.Unmarshal(b, &back); err != nil || back != lock {
		t.Errorf("lock read back %+v (%v), want %+v", back, err, lock)
	}
	if b, _ := json.Marshal(Lock{Key: "k"}); strings.Contains(string(b), "key_b64") {
		t.Errorf("a text key has key_b64: %s", b)
	}

	ev := Event{Key: raw, Type: EventReleased, Token: 7, Owner: "o", LeaseMS: 100, Index: 9}
	b, err = json.Marshal(ev)
	if want := `{"key":"u8/\ufffd\ufffd","type":"released","token":7,"owner":"o","lease_ms":100,"index":9,"key_b64":"dTgv//4="}`; err != nil || string(b) != want {
		t.Errorf("event JSON %s (%v), want %s", b, err, want)
	}
	var evBack Event
	if err := json.Unmarshal(b, &evBack); err != nil || evBack != ev {
		t.Errorf("event read back %+v (%v), want %+v", evBack, err, ev)
	}
	if err := json.Unmarshal([]byte(`{"key":"x","key_b64":"!!"}`), &back); err == nil || !strings.Contains(err.Error(), "key_b64") {
		t.Errorf("bad key_b64: %v", err)
	}
}

// A number out of range is named as given, not as what it would be
// clamped to or overflow into.
func TestNumbersOutOfRangeAreNamedAsGiven(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{ValidateLeaseMS(1<<64 - 1), "lease must be 10ms..1h, got 18446744073709551615ms"},
		{ValidateLeaseMS(MaxLeaseMS + 1), "lease must be 10ms..1h, got 3600001ms"},
		{ValidateLeaseMS(5), "lease must be 10ms..1h, got 5ms"},
		{ValidateLeaseMS(MaxLeaseMS), ""},
		{ValidateListLimit(1<<64 - 1), "limit must be 1..1000, got 18446744073709551615"},
		{ValidateListLimit(0), ""},
		{ValidateListLimit(MaxListLimit), ""},
	} {
		if got := errText(tc.err); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}
