package wire

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// A key stored before the key rule (ValidateKey) may not be UTF-8, and a
// JSON string cannot carry it: encoding/json writes each byte that is not
// UTF-8 as U+FFFD, so the key shown names another lock. The JSON of a
// listed lock and of a lock event (the HTTP/JSON API's, raftlock list and
// watch --json) therefore carries such a key a second time, losslessly,
// in key_b64 (standard base64), which reading the JSON back prefers.

// MarshalJSON writes the lock with key_b64 beside key when its key is not
// UTF-8.
func (l Lock) MarshalJSON() ([]byte, error) {
	type plain Lock // without the methods: no recursion
	return json.Marshal(struct {
		plain
		KeyB64 string `json:"key_b64,omitempty"`
	}{plain(l), KeyB64(l.Key)})
}

// UnmarshalJSON reads a lock, its key from key_b64 when it has one.
func (l *Lock) UnmarshalJSON(b []byte) error {
	type plain Lock
	var v struct {
		plain
		KeyB64 string `json:"key_b64"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = Lock(v.plain)
	return keyFromB64(&l.Key, v.KeyB64)
}

// MarshalJSON writes the event with key_b64 beside key when its key is
// not UTF-8.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	return json.Marshal(struct {
		plain
		KeyB64 string `json:"key_b64,omitempty"`
	}{plain(e), KeyB64(e.Key)})
}

// UnmarshalJSON reads an event, its key from key_b64 when it has one.
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	var v struct {
		plain
		KeyB64 string `json:"key_b64"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = Event(v.plain)
	return keyFromB64(&e.Key, v.KeyB64)
}

// keyFromB64 sets *key to what b64 holds, when it holds anything.
func keyFromB64(key *string, b64 string) error {
	if b64 == "" {
		return nil
	}
	k, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return fmt.Errorf("key_b64: %w", err)
	}
	*key = string(k)
	return nil
}
