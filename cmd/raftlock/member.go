package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/node/embed"
)

func waitForSignal() os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(ch)
	return <-ch
}

func runNode(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("node", "node --id N --peers 1=HOST:PORT,... --listen HOST:PORT --http HOST:PORT --data DIR")
	var m embed.Flags
	m.RegisterFlags(fs)
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	log, err := m.Logger(stderr)
	if err != nil {
		return err
	}
	peers, join, err := m.Peers(context.Background(), log)
	if err != nil {
		return clientErr(err)
	}
	cfg, err := m.MemberConfig(peers, join)
	if err != nil {
		return err
	}
	mb, err := embed.Start(cfg, log)
	if err != nil {
		return err
	}
	mlog := log.With("member", cfg.Node.ID)
	mlog.Info("member running", "raft", peers[cfg.Node.ID], "client", cfg.Listen, "http", cfg.HTTP, "data", cfg.Node.DataDir, "tls", mb.TLS())
	hupCtx, stopHUP := context.WithCancel(context.Background())
	defer stopHUP()
	reloadOnHUP(hupCtx, []*embed.Member{mb})
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	select {
	case sig := <-sigc:
		mlog.Info("stopping", "signal", sig.String())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := mb.Shutdown(ctx); err != nil {
			mlog.Warn("member stopped with an error", "err", err)
		}
		return nil
	case <-mb.Node().Done():
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return mb.Stopped(ctx)
	}
}

// defaultClusterData is where `raftlock cluster` keeps its members' data
// unless told otherwise, as etcd keeps default.etcd: in the current
// directory, so a restart finds the same locks and tokens.
const defaultClusterData = "raftlock-data"

// dataFlag registers the data-directory flag every command names --data,
// with --dir accepted as an alias.
func dataFlag(fs *flag.FlagSet, def, usage string) *string {
	dir := fs.String("data", def, usage)
	fs.StringVar(dir, "dir", def, "alias of --data")
	return dir
}

func runCluster(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster", "cluster [--nodes 3] [--data DIR]")
	nodes := fs.Int("nodes", 3, "number of members (1..9)")
	dir := dataFlag(fs, defaultClusterData, "data directory, one subdirectory per member, reused on restart")
	peerPort := fs.Int("peer-port", 7001, "raft port of member 1 (member N uses this + N-1)")
	clientPort := fs.Int("client-port", 8001, "client port of member 1")
	httpPort := fs.Int("http-port", 9001, "HTTP port of member 1")
	var m embed.Flags
	m.RegisterTuningFlags(fs)
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	if *nodes < 1 || *nodes > 9 {
		return usageErr("--nodes must be 1..9")
	}
	if *dir == "" {
		return usageErr("--data must name a directory")
	}
	log, err := m.Logger(stderr)
	if err != nil {
		return err
	}
	ports := []embed.PortRange{{Name: "--peer-port", Port: *peerPort}, {Name: "--client-port", Port: *clientPort}, {Name: "--http-port", Port: *httpPort}}
	reused, err := checkCluster(*dir, *nodes, ports)
	if err != nil {
		return err
	}
	peers := map[uint64]string{}
	for i := 1; i <= *nodes; i++ {
		peers[uint64(i)] = ports[0].Addr(i)
	}
	// The members share every tuning flag: checking member 1's checks all,
	// before anything is created.
	first := m
	first.Config.Node.ID, first.Config.Node.DataDir = 1, embed.LocalDataDir(*dir, 1)
	if err := first.Validate(peers); err != nil {
		return err
	}
	members, err := embed.StartLocal(*dir, *nodes, func(id int) (embed.Config, error) {
		mf := m
		mf.Config.Node.ID, mf.Config.Listen, mf.Config.HTTP, mf.Config.Node.DataDir = uint64(id), ports[1].Addr(id), ports[2].Addr(id), embed.LocalDataDir(*dir, id)
		return mf.MemberConfig(peers, nil)
	}, log)
	if err != nil {
		return err
	}
	defer func() {
		for _, mb := range members {
			mb.Close()
		}
	}()
	printCluster(stdout, *dir, *nodes, reused, ports)
	waitForSignal()
	fmt.Fprintln(stdout, "stopping")
	return nil
}

// checkCluster checks cluster's ports and data directory before anything
// starts; reused says the directory holds the cluster's data already.
func checkCluster(dir string, nodes int, ports []embed.PortRange) (reused bool, err error) {
	if err := embed.CheckPortRanges(ports, nodes); err != nil {
		return false, withCode(exitUsage, err)
	}
	size, err := embed.LocalSize(dir)
	if err != nil {
		return false, err
	}
	if size > 0 && size != nodes {
		return false, usageErr("%s holds a %d-member cluster; run with --nodes %d, or give another --data", dir, size, size)
	}
	return size > 0, embed.CheckPortsFree(ports, nodes)
}

// printCluster says where the cluster's data and endpoints are.
func printCluster(stdout io.Writer, dir string, nodes int, reused bool, ports []embed.PortRange) {
	var endpoints []string
	for id := 1; id <= nodes; id++ {
		endpoints = append(endpoints, ports[1].Addr(id))
	}
	sort.Strings(endpoints)
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	state := "new"
	if reused {
		state = "reused: locks and tokens carry on; remove it for a fresh cluster"
	}
	http := ports[2].Port
	fmt.Fprintf(stdout, "raftlock cluster: %s, data in %s (%s)\n", plural(nodes, "member", "members"), abs, state)
	fmt.Fprintf(stdout, "endpoints: %s\n", strings.Join(endpoints, ","))
	fmt.Fprintf(stdout, "metrics:   http://127.0.0.1:%d/metrics (%d..%d)\n", http, http, http+nodes-1)
	fmt.Fprintln(stdout, "Ctrl-C to stop.")
}

// plural is "1 member", "3 members".
func plural(n int, one, many string) string { return cliflag.Plural(n, one, many) }
