package gctune

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live, max uint64
		min, want int
	}{
		{live: 10 << 20, max: 100 << 20, min: 10, want: 100},  // a small heap keeps Go's default
		{live: 100 << 20, max: 100 << 20, min: 10, want: 100}, // at the cap, still
		{live: 400 << 20, max: 100 << 20, min: 10, want: 25},  // a million locks
		{live: 8 << 30, max: 100 << 20, min: 10, want: 10},    // never under the floor
	} {
		if got := Percent(c.live, c.max, c.min); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB, %d) = %d, want %d", c.live>>20, c.max>>20, c.min, got, c.want)
		}
	}
}

func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// Run lowers GOGC for a live heap over the cap, and puts Go's default
// back when it ends; an operator's GOGC is left alone.
func TestRunTunesAndRestores(t *testing.T) {
	t.Setenv("GOGC", "")
	live := make([]byte, 64<<20) // 64 MiB live, against a cap of 16 MiB
	for i := range live {
		live[i] = byte(i)
	}
	runtime.GC()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{MaxGarbage: 16 << 20, MinPercent: 10, Every: 10 * time.Millisecond})
	}()
	for end := time.Now().Add(10 * time.Second); gogc() == 100; {
		if time.Now().After(end) {
			t.Fatal("GOGC still 100 with a live heap four times the cap")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p := gogc(); p < 10 || p > 30 {
		t.Errorf("GOGC %d with 64 MiB live and a 16 MiB cap, want about 25", p)
	}
	cancel()
	<-done
	if p := gogc(); p != 100 {
		t.Errorf("GOGC %d after Run ended, want 100 back", p)
	}
	runtime.KeepAlive(live)

	t.Setenv("GOGC", "77")
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	Run(ctx, Config{MaxGarbage: 1, MinPercent: 10, Every: time.Millisecond})
	if p := gogc(); p != 100 {
		t.Errorf("GOGC %d with the GOGC variable set, want Run to leave it", p)
	}
}
