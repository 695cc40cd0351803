package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/raftlock/raftlock/internal/gctune"
	"github.com/raftlock/raftlock/node/embed"
)

func runNode(args []string, stdout, stderr io.Writer) error {
	var m embed.Flags
	if _, err := packageFlags("node", "node --id N --peers 1=HOST:PORT,... --listen HOST:PORT --http HOST:PORT --data DIR", m.RegisterFlags, parseNoArgs, args, stderr); err != nil {
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
	defer gctune.Start(gctune.DefaultConfig())()
	mlog := log.With("member", cfg.Node.ID)
	mlog.Info("member running", "raft", peers[cfg.Node.ID], "client", cfg.Listen, "http", cfg.HTTP, "data", cfg.Node.DataDir, "tls", mb.TLS())
	hupCtx, stopHUP := context.WithCancel(context.Background())
	defer stopHUP()
	reloadOnHUP(hupCtx, []*embed.Member{mb})
	sigc, stop := notify(stopSignals()...)
	defer stop()
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

func runCluster(args []string, stdout, stderr io.Writer) error {
	var l embed.LocalFlags
	if _, err := packageFlags("cluster", "cluster [--nodes 3] [--data DIR]", l.RegisterFlags, parseNoArgs, args, stderr); err != nil {
		return err
	}
	if err := l.Check(); err != nil {
		return err
	}
	log, err := l.Logger(stderr)
	if err != nil {
		return err
	}
	members, reused, err := l.Start(log)
	if err != nil {
		return err
	}
	defer gctune.Start(gctune.DefaultConfig())()
	defer func() {
		for _, mb := range members {
			mb.Close()
		}
	}()
	l.WriteSummary(stdout, reused)
	waitForSignal()
	fmt.Fprintln(stdout, "stopping")
	return nil
}
