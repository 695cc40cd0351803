package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
)

var (
	overload         = flag.Bool("overload", false, "run TestOverload (make overload): thousands of clients against three `raftlock node` processes")
	overloadClients  = flag.Int("overload-clients", 2000, "TestOverload: concurrent clients, each with its own connections")
	overloadDuration = flag.Duration("overload-duration", 30*time.Second, "TestOverload: how long the clients run")
)

// vmRSS reads a process's resident memory from /proc/PID/status.
func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// TestOverload runs --overload-clients clients (each with its own
// connections, so the leader serves that many) against three members whose
// waiter and key limits are low enough to be hit all the time. Every
// client alternates a waiting acquire of one of 20 hot keys with an
// acquire of a key of its own, and releases what it got. The members must
// all stay up with under 512 MiB resident, must have answered overloaded,
// and every client that was answered overloaded must have succeeded later.
func TestOverload(t *testing.T) {
	if !*overload {
		t.Skip("needs -overload (make overload)")
	}
	const (
		hotKeys       = 20
		waitersPerKey = 32
		maxKeys       = 500
		rssLimit      = 512 << 20
	)
	c, ctx, _ := readyProcessClusterWith(t, *overloadDuration+2*time.Minute, "--log-level", "warn",
		"--max-waiters-per-key", strconv.Itoa(waitersPerKey), "--max-keys", strconv.Itoa(maxKeys))

	// Resident memory of every member, sampled until the clients are done.
	var peak [3]atomic.Int64
	sampleDone := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampleDone)
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			for i, m := range c.members {
				if rss, err := vmRSS(m.cmd.Process.Pid); err == nil && rss > peak[i].Load() {
					peak[i].Store(rss)
				}
			}
			select {
			case <-stopSampling:
				return
			case <-tk.C:
			}
		}
	}()

	type tally struct {
		ok, held, overloaded, timedOut, failed int64
		sawOverloaded, okAfterOverload         bool
		lastErr                                error
	}
	tallies := make([]tally, *overloadClients)
	const opTimeout = 5 * time.Second
	end := time.Now().Add(*overloadDuration)
	runCtx, stop := context.WithDeadline(ctx, end)
	defer stop()
	var wg sync.WaitGroup
	for i := range tallies {
		wg.Add(1)
		go func(i int, tl *tally) {
			defer wg.Done()
			cl, err := client.New(c.endpoints(), client.Options{})
			if err != nil {
				tl.failed++
				tl.lastErr = err
				return
			}
			defer cl.Close()
			for n := 0; runCtx.Err() == nil; n++ {
				key, wait := fmt.Sprintf("hot-%d", (i+n)%hotKeys), time.Second
				if n%2 == 1 {
					key, wait = fmt.Sprintf("own-%d", i), 0
				}
				opCtx, opCancel := context.WithTimeout(runCtx, opTimeout)
				g, err := cl.Acquire(opCtx, key, 5*time.Second, wait)
				if err == nil {
					err = cl.Release(opCtx, key, g.Token)
				}
				opCancel()
				switch {
				case runCtx.Err() != nil:
				case err == nil:
					tl.ok++
					tl.okAfterOverload = tl.okAfterOverload || tl.sawOverloaded
				case errors.Is(err, client.ErrHeld):
					tl.held++
				case errors.Is(err, client.ErrOverloaded):
					tl.overloaded++
					// Only where time is left to succeed on a later try.
					tl.sawOverloaded = tl.sawOverloaded || time.Until(end) > 2*opTimeout
				case errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded):
					// Sent and not answered by the deadline, or proposed by
					// a leader that lost its leadership (a starved member
					// misses heartbeats): slow, not refused; the lease ends
					// a grant nobody saw.
					tl.timedOut++
				default:
					tl.failed++
					tl.lastErr = err
				}
			}
		}(i, &tallies[i])
	}
	wg.Wait()
	close(stopSampling)
	<-sampleDone

	var ok, held, over, timedOut, failed, sawOver, recovered int64
	var someErr error
	for _, tl := range tallies {
		ok, held, over, timedOut, failed = ok+tl.ok, held+tl.held, over+tl.overloaded, timedOut+tl.timedOut, failed+tl.failed
		if tl.sawOverloaded {
			sawOver++
			if tl.okAfterOverload {
				recovered++
			}
		}
		if tl.lastErr != nil {
			someErr = tl.lastErr
		}
	}
	var answered float64
	for _, m := range c.members {
		if !m.running() {
			t.Errorf("member %d died under load:\n%s", m.id, c.log(m))
			continue
		}
		if v, err := m.metric(ctx, "raftlock_leader_changes_total"); err == nil {
			t.Logf("member %d: leader changes %.0f", m.id, v)
		}
		n, err := overloadedAnswers(ctx, m.httpAddr)
		if err != nil {
			t.Errorf("member %d: %v", m.id, err)
		}
		answered += n
	}
	t.Logf("clients %d, %v: cycles ok %d, held %d, overloaded at the deadline %d, timed out or outcome unknown %d, failed %d; overloaded answers %.0f",
		len(tallies), *overloadDuration, ok, held, over, timedOut, failed, answered)
	t.Logf("clients that got overloaded at a deadline with %v left %d, of which succeeded later %d", 2*opTimeout, sawOver, recovered)
	for i, m := range c.members {
		t.Logf("member %d: peak VmRSS %.1f MiB", m.id, float64(peak[i].Load())/(1<<20))
		if peak[i].Load() >= rssLimit {
			t.Errorf("member %d peaked at %d MiB resident, limit 512", m.id, peak[i].Load()>>20)
		}
	}
	if answered == 0 {
		t.Error("no member answered overloaded: the limits were never hit")
	}
	if sawOver != recovered {
		t.Errorf("%d clients got overloaded and never succeeded afterwards", sawOver-recovered)
	}
	if failed > 0 {
		t.Errorf("%d cycles failed otherwise, e.g. %v", failed, someErr)
	}
}

// overloadedAnswers sums raftlock_client_requests_total{result="overloaded"}
// of the member serving metrics at addr.
func overloadedAnswers(ctx context.Context, addr string) (float64, error) {
	return labelledSum(ctx, http.DefaultClient, "http://"+addr+"/metrics", "raftlock_client_requests_total", `result="overloaded"`)
}
