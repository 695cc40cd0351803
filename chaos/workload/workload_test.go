package workload

import (
	"io"
	"testing"
	"time"

	"github.com/raftlock/raftlock/checker/history"
)

func TestFencedStoreRefusesStaleTokens(t *testing.T) {
	r, _ := history.NewRecorder(io.Discard, nil)
	s := NewFencedStore(r)
	if v, ok := s.Read(1, "k1", 5); !ok || v != 0 {
		t.Fatalf("first read: %d %v", v, ok)
	}
	if !s.Write(1, "k1", 5, 1) {
		t.Fatal("write with the highest token refused")
	}
	if _, ok := s.Read(2, "k1", 4); ok {
		t.Fatal("read with a stale token accepted")
	}
	if s.Write(2, "k1", 4, 7) {
		t.Fatal("write with a stale token accepted")
	}
	if v, ok := s.Read(3, "k1", 6); !ok || v != 1 {
		t.Fatalf("read after the stale write: %d %v, want 1", v, ok)
	}
	fails := 0
	for _, e := range r.Events() {
		if e.Type == history.Fail {
			fails++
			if e.Value.Error != "stale-token" {
				t.Errorf("fail %+v without stale-token", e)
			}
		}
	}
	if fails != 2 || len(r.Events()) != 10 {
		t.Fatalf("%d events, %d failures; want 10 and 2", len(r.Events()), fails)
	}
}

func TestPlanDrawsWithinItsBounds(t *testing.T) {
	p := Plan{Keys: Keys(3), LeaseMin: 200 * time.Millisecond, LeaseMax: time.Second}
	rng := Rand(1, 0)
	kinds := map[Kind]int{}
	for range 10000 {
		k, key := p.Next(rng)
		kinds[k]++
		if key != "k1" && key != "k2" && key != "k3" {
			t.Fatalf("key %q", key)
		}
		lease, wait := p.Acquire(rng)
		if lease < p.LeaseMin || lease > p.LeaseMax || lease%time.Millisecond != 0 || wait < 0 || wait >= MaxWait {
			t.Fatalf("lease %v wait %v", lease, wait)
		}
		if _, limit := p.Page(rng); limit < 1 || limit > 4 {
			t.Fatalf("limit %d", limit)
		}
	}
	for _, k := range []Kind{Get, ForceRelease, List, Cycle} {
		if kinds[k] == 0 {
			t.Errorf("kind %d never drawn", k)
		}
	}
	h := Header{Seed: 1, Keys: p.Keys, LeaseMin: p.LeaseMin, Time: 10 * time.Second}.Map(map[string]any{"simulated": true})
	if h["lease_min_ms"] != int64(200) || h["time_s"] != 10.0 || h["simulated"] != true {
		t.Fatalf("header %v", h)
	}
}

// The unfenced register accepts every token: a stale write lands, and the
// history records it as the fenced store records an accepted one, so the
// fenced-resource check sees it.
func TestUnfencedStoreAcceptsStaleTokens(t *testing.T) {
	r, _ := history.NewRecorder(io.Discard, nil)
	s := NewResource(r, Unfenced)
	if !s.Write(1, "k1", 5, 1) {
		t.Fatal("write refused")
	}
	if v, ok := s.Read(2, "k1", 4); !ok || v != 1 {
		t.Fatalf("read with a stale token: %d %v, want 1 true", v, ok)
	}
	if !s.Write(2, "k1", 4, 7) {
		t.Fatal("write with a stale token refused by the unfenced store")
	}
	for _, e := range r.Events() {
		if e.Type == history.Fail {
			t.Errorf("unfenced store failed an access: %+v", e)
		}
	}
	if len(r.Events()) != 6 {
		t.Fatalf("%d events, want 6", len(r.Events()))
	}
}
