package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/bench"
)

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func runBench(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", "bench [--clients 64] [--workload uncontended] [--compare etcd,redis] [--duration 10s] [--repeat 1] [--tls] [--out DIR] [--json]\n"+
		"       raftlock bench --endpoints HOST:PORT,... [--cert FILE --key FILE --ca FILE] ...\n\n"+
		"With --tls the cluster it starts runs mutual TLS 1.3 on every port: a fresh CA, member\n"+
		"certificates and a client certificate are written under the data directory, and the\n"+
		"bench's clients connect with that client certificate. Against a running secured cluster\n"+
		"(--endpoints), give the clients' --cert, --key and --ca instead.")
	nodes := fs.Int("nodes", 3, "raftlock members to start (3 or 5)")
	endpoints := fs.String("endpoints", "", "bench a running raftlock cluster instead of starting one")
	useTLS := fs.Bool("tls", false, "start the cluster with mutual TLS 1.3 (fresh CA and certificates in the data directory); with --endpoints use --cert, --key and --ca")
	var tf tlsFlags
	tf.register(fs)
	workloads := fs.String("workload", "uncontended", "workloads: uncontended, contended, mixed (comma-separated)")
	clients := fs.String("clients", "64", "closed-loop client counts (comma-separated)")
	rate := fs.Float64("rate", 0, "open loop: ops per second (latency from the intended start); 0: closed loop")
	duration := fs.Duration("duration", 10*time.Second, "measured time per run")
	repeat := fs.Int("repeat", 1, "run each point `N` times and report the median, with the lowest and highest, so a noisy machine shows its spread")
	warmup := fs.Duration("warmup", time.Second, "unmeasured time before each run")
	lease := fs.Duration("lease", 10*time.Second, "lease of every acquire")
	hotKeys := fs.Int("hot-keys", 1, "contended workload: number of hot keys")
	compare := fs.String("compare", "", "peers to run side by side: etcd (= etcd-mutex,etcd-txn), etcd-mutex, etcd-txn, redis")
	noBatch := fs.Bool("no-batch", false, "ablation: one command per log entry")
	maxInflight := fs.Int("max-inflight", 0, "ablation: raft appends in flight per follower (1: no pipelining)")
	out := fs.String("out", "", "write bench.json, bench.md and plots here")
	dir := dataFlag(fs, "", "data directory for the clusters it starts (default: a new temporary directory, removed after)")
	bin := fs.String("bin", "", "raftlock executable for the nodes (default: this one)")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	var counts []int
	for _, c := range splitList(*clients) {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			return usageErr("bad --clients %q", c)
		}
		counts = append(counts, n)
	}
	wls := splitList(*workloads)
	for _, w := range wls {
		if w != bench.Uncontended && w != bench.Contended && w != bench.Mixed {
			return usageErr("unknown workload %q", w)
		}
	}
	if len(counts) == 0 || len(wls) == 0 || *duration <= 0 {
		return usageErr("need clients, a workload and a positive --duration")
	}
	if *repeat < 1 {
		return usageErr("--repeat must be at least 1, got %d", *repeat)
	}
	if *useTLS && *endpoints != "" {
		return usageErr("--tls starts a secured cluster; against --endpoints give the client's --cert, --key and --ca")
	}
	if tf.files.Set() && *endpoints == "" {
		return usageErr("--cert, --key and --ca are for a running cluster (--endpoints); use --tls for a secured cluster of the bench's own")
	}
	clientTLS, err := tf.config()
	if err != nil {
		return err
	}
	var peers []string
	for _, p := range splitList(*compare) {
		switch p {
		case "etcd":
			peers = append(peers, "etcd-mutex", "etcd-txn")
		case "etcd-mutex", "etcd-txn", "redis":
			peers = append(peers, p)
		default:
			return usageErr("unknown peer %q", p)
		}
	}
	if *dir == "" {
		if *dir, err = os.MkdirTemp("", "raftlock-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(*dir)
	}
	if *bin == "" {
		if *bin, err = os.Executable(); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep := &bench.Report{Command: "raftlock bench " + strings.Join(args, " "),
		Machine: bench.Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()},
		TLS:     *useTLS || clientTLS != nil}
	progress := stderr
	fmt.Fprintln(progress, "bench: measuring the floor (fsync, loopback round trip)")
	if rep.Floor, err = bench.MeasureFloor(ctx, *dir); err != nil {
		return fmt.Errorf("measure floor: %w", err)
	}
	systems := append([]string{"raftlock"}, peers...)
	interrupted := func(where string) {
		rep.Partial = true
		rep.Notes = append(rep.Notes, "interrupted during "+where+"; the runs listed were measured before")
		fmt.Fprintln(progress, "bench: interrupted during "+where+": writing what was measured, marked partial")
	}
measure:
	for _, sys := range systems {
		t, err := startTarget(ctx, sys, *dir, *bin, *endpoints, *nodes, *noBatch, *maxInflight, *lease, *useTLS, clientTLS)
		if err != nil {
			if ctx.Err() != nil {
				interrupted("the start of " + sys)
				break measure
			}
			if sys == "raftlock" {
				return err
			}
			note := fmt.Sprintf("%s skipped: %v", sys, err)
			rep.Notes = append(rep.Notes, note)
			fmt.Fprintln(progress, "bench:", note)
			continue
		}
		for _, w := range wls {
			for _, c := range counts {
				spec := bench.Spec{Workload: w, Clients: c, Rate: *rate, Duration: *duration, Warmup: *warmup, HotKeys: *hotKeys}
				var reps []bench.Run
				for i := range *repeat {
					r, err := bench.Measure(ctx, t, spec, progress)
					if err != nil {
						t.Close()
						if ctx.Err() != nil {
							interrupted(fmt.Sprintf("%s %s c=%d", sys, w, c))
							if len(reps) > 0 {
								// Repeats already measured are results too.
								rep.Runs = append(rep.Runs, bench.Combine(reps))
								rep.Notes = append(rep.Notes, fmt.Sprintf("%s %s c=%d: %d of %d repeats", sys, w, c, len(reps), *repeat))
							}
							break measure
						}
						return fmt.Errorf("%s %s c=%d: %w", sys, w, c, err)
					}
					if *repeat > 1 {
						fmt.Fprintf(progress, "bench: %-11s %-11s c=%-4d run %d/%d %9.0f ops/s p50 %dµs p99 %dµs\n",
							r.System, w, c, i+1, *repeat, r.ThroughputOpsS, r.Latency.P50, r.Latency.P99)
					}
					reps = append(reps, r)
				}
				r := bench.Combine(reps)
				fmt.Fprintf(progress, "bench: %-11s %-11s c=%-4d %9.0f ops/s p50 %dµs p99 %dµs%s\n",
					r.System, w, c, r.ThroughputOpsS, r.Latency.P50, r.Latency.P99, medianNote(*repeat))
				rep.Runs = append(rep.Runs, r)
			}
		}
		t.Close()
	}
	if *out != "" {
		if err := rep.Write(*out); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.Table(stdout)
	if *out != "" {
		fmt.Fprintf(stdout, "results in %s (bench.json, bench.md, throughput.png, latency-cdf-*.png)\n", *out)
	}
	if rep.Partial {
		return withCode(exitInterrupted, errors.New("interrupted: partial results"))
	}
	return nil
}

// medianNote marks a progress line that reports a median of repeats.
func medianNote(repeat int) string {
	if repeat == 1 {
		return ""
	}
	return fmt.Sprintf(" (median of %d)", repeat)
}

func startTarget(ctx context.Context, sys, dir, bin, endpoints string, nodes int, noBatch bool, maxInflight int, lease time.Duration,
	useTLS bool, clientTLS *tls.Config) (bench.Target, error) {
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	switch sys {
	case "raftlock":
		if endpoints != "" {
			return bench.RaftlockEndpoints(sctx, splitList(endpoints), lease, clientTLS)
		}
		if nodes < 1 {
			return nil, usageErr("--nodes must be at least 1")
		}
		name := "raftlock"
		if noBatch {
			name += " --no-batch"
		}
		if maxInflight > 0 {
			name += fmt.Sprintf(" --max-inflight %d", maxInflight)
		}
		if useTLS {
			name += " --tls"
		}
		return bench.StartRaftlock(sctx, bench.RaftlockConfig{Bin: bin, Dir: dir, Nodes: nodes, NoBatch: noBatch,
			MaxInflight: maxInflight, Lease: lease, Name: name, TLS: useTLS})
	case "etcd-mutex", "etcd-txn":
		return bench.StartEtcd(sctx, bench.EtcdConfig{Dir: dir, Lease: lease, Mode: sys})
	case "redis":
		return bench.StartRedis(sctx, bench.RedisConfig{Dir: dir, Lease: lease})
	}
	return nil, errors.New("unknown system " + sys)
}
