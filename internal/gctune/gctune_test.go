package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
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
		{live: 8 << 30, max: 100 << 20, min: 0, want: 1},      // nor under 1
		{live: 1 << 62, max: 1 << 61, min: 10, want: 50},      // no overflow
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

// Run (through Start) lowers GOGC for a live heap over the cap, and puts
// back the GOGC it found when it ends; with GOGC or GOMEMLIMIT set it returns at once and
// leaves GOGC alone.
func TestRunTunesAndRestores(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	orig := debug.SetGCPercent(60)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	live := make([]byte, 64<<20) // 64 MiB live, against a cap of 16 MiB
	for i := range live {
		live[i] = byte(i)
	}
	runtime.GC()
	stop := Start(Config{MaxGarbage: 16 << 20, MinPercent: 10, Every: 10 * time.Millisecond})
	defer stop()
	for end := time.Now().Add(10 * time.Second); gogc() == 60; {
		if time.Now().After(end) {
			t.Fatal("GOGC still 60 with a live heap four times the cap")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p := gogc(); p < 10 || p > 30 {
		t.Errorf("GOGC %d with 64 MiB live and a 16 MiB cap, want about 25", p)
	}
	stop()
	if p := gogc(); p != 60 {
		t.Errorf("GOGC %d after Run ended, want the 60 it found", p)
	}
	runtime.KeepAlive(live)

	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, map[string]string{"GOGC": "77", "GOMEMLIMIT": "1GiB"}[env])
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				Run(ctx, Config{MaxGarbage: 1, MinPercent: 10, Every: time.Millisecond})
			}()
			select {
			case <-returned:
			case <-time.After(10 * time.Second):
				t.Fatalf("Run still tuning with %s set", env)
			}
			if p := gogc(); p != 60 {
				t.Errorf("GOGC %d with %s set, want Run to leave the 60 there", p, env)
			}
		})
	}
}
