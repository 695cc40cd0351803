// Package chaos is raftlock's Jepsen-style harness: a supervisor for real
// `raftlock node` processes, per-link TCP proxies for partitions, clock-fault
// control, nemesis schedules drawn from a seed, and a contended workload
// whose every operation is recorded as a history for the checker.
package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/freeport"
)

// ClusterSpec describes the cluster a Supervisor runs.
type ClusterSpec struct {
	Bin       string   // the raftlock executable
	Dir       string   // data directories and logs go here
	Nodes     int      // 3 or 5
	ExtraArgs []string // passed to every node (e.g. --unsafe-bug NAME)
}

// Supervisor runs the members as child processes, every peer link through
// its own Proxy, every member with fault injection enabled.
type Supervisor struct {
	spec    ClusterSpec
	raft    map[int]string // real peer listen address
	clients map[int]string
	https   map[int]string
	proxies map[[2]int]*Proxy
	cl      *client.Client

	mu      sync.Mutex
	procs   map[int]*exec.Cmd
	exited  map[int]chan struct{}
	paused  map[int]bool
	clocked map[int]bool
}

// NewSupervisor picks addresses and starts the link proxies; Start runs the
// members.
func NewSupervisor(spec ClusterSpec) (*Supervisor, error) {
	if spec.Nodes < 1 {
		return nil, errors.New("need at least one node")
	}
	s := &Supervisor{spec: spec, raft: map[int]string{}, clients: map[int]string{}, https: map[int]string{},
		proxies: map[[2]int]*Proxy{}, procs: map[int]*exec.Cmd{}, exited: map[int]chan struct{}{},
		paused: map[int]bool{}, clocked: map[int]bool{}}
	for _, id := range s.IDs() {
		for _, m := range []map[int]string{s.raft, s.clients, s.https} {
			addr, err := freeport.Addr()
			if err != nil {
				return nil, err
			}
			m[id] = addr
		}
	}
	for _, i := range s.IDs() {
		for _, j := range s.IDs() {
			if i == j {
				continue
			}
			p, err := NewProxy(s.raft[j])
			if err != nil {
				s.Close()
				return nil, err
			}
			s.proxies[[2]int{i, j}] = p
		}
	}
	var err error
	if s.cl, err = client.New(s.ClientAddrs(), client.Options{}); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// IDs lists the member ids, 1..N.
func (s *Supervisor) IDs() []int {
	ids := make([]int, s.spec.Nodes)
	for i := range ids {
		ids[i] = i + 1
	}
	return ids
}

// ClientAddrs lists the members' client addresses in id order.
func (s *Supervisor) ClientAddrs() []string {
	var out []string
	for _, id := range s.IDs() {
		out = append(out, s.clients[id])
	}
	return out
}

// ClientAddr returns member id's client address.
func (s *Supervisor) ClientAddr(id int) string { return s.clients[id] }

// Start launches every member.
func (s *Supervisor) Start() error {
	for _, id := range s.IDs() {
		if err := s.StartNode(id); err != nil {
			return err
		}
	}
	return nil
}

// StartNode launches member id (again) from its data directory. Its view
// of each peer is that link's proxy.
func (s *Supervisor) StartNode(id int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, running := s.procs[id]; running {
		return nil
	}
	var peers []string
	for _, j := range s.IDs() {
		addr := s.raft[j]
		if j != id {
			addr = s.proxies[[2]int{id, j}].Addr()
		}
		peers = append(peers, fmt.Sprintf("%d=%s", j, addr))
	}
	args := append([]string{"node", "--id", strconv.Itoa(id), "--peers", strings.Join(peers, ","),
		"--listen", s.clients[id], "--http", s.https[id], "--data", filepath.Join(s.spec.Dir, fmt.Sprintf("data-%d", id)),
		"--fault-injection", "--snapshot-every", "1000000000", "--log-level", "info"}, s.spec.ExtraArgs...)
	logf, err := os.OpenFile(filepath.Join(s.spec.Dir, fmt.Sprintf("node-%d.log", id)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.spec.Bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start node %d: %w", id, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	s.procs[id], s.exited[id] = cmd, done
	delete(s.paused, id)
	return nil
}

// Kill sends SIGKILL to member id and waits for it to die.
func (s *Supervisor) Kill(id int) {
	s.mu.Lock()
	cmd, done := s.procs[id], s.exited[id]
	delete(s.procs, id)
	delete(s.paused, id)
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Running reports whether member id's process is up.
func (s *Supervisor) Running(id int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.procs[id]
	return ok
}

// Pause stops member id with SIGSTOP; Resume continues it.
func (s *Supervisor) Pause(id int) { s.signal(id, syscall.SIGSTOP, true) }

// Resume continues a paused member.
func (s *Supervisor) Resume(id int) { s.signal(id, syscall.SIGCONT, false) }

func (s *Supervisor) signal(id int, sig syscall.Signal, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cmd := s.procs[id]; cmd != nil {
		cmd.Process.Signal(sig)
		if paused {
			s.paused[id] = true
		} else {
			delete(s.paused, id)
		}
	}
}

// SetLinks lets traffic flow on link i->j only where connected(i, j).
func (s *Supervisor) SetLinks(connected func(i, j int) bool) {
	for link, p := range s.proxies {
		p.SetBlocked(!connected(link[0], link[1]))
	}
}

// Heal restores every link.
func (s *Supervisor) Heal() { s.SetLinks(func(int, int) bool { return true }) }

// SetClock sets member id's clock rate and offset through its fault
// injection endpoint.
func (s *Supervisor) SetClock(ctx context.Context, id int, rate float64, offsetMS int64) error {
	body := fmt.Sprintf(`{"rate":%g,"offset_ms":%d}`, rate, offsetMS)
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+s.https[id]+"/debug/clock", bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("set clock of node %d: %w", id, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("set clock of node %d: %s", id, resp.Status)
	}
	s.mu.Lock()
	s.clocked[id] = rate != 1 || offsetMS != 0
	s.mu.Unlock()
	return nil
}

// Status asks every member for its status; unreachable members are absent.
func (s *Supervisor) Status(ctx context.Context) map[int]wire.Status {
	out := map[int]wire.Status{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range s.IDs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			if st, err := s.cl.Status(cctx, s.clients[id]); err == nil {
				mu.Lock()
				out[id] = st
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// Leader returns the member that says it leads, or 0.
func (s *Supervisor) Leader(ctx context.Context) int {
	for id, st := range s.Status(ctx) {
		if st.Role == "leader" {
			return id
		}
	}
	return 0
}

// WaitReady waits until a leader answers a linearizable read.
func (s *Supervisor) WaitReady(ctx context.Context) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.cl.Get(cctx, "raftlock-harness-probe")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// HealAll ends every fault: resumes paused members, restarts killed ones,
// resets clocks and heals the links. It returns what it did, for the history.
func (s *Supervisor) HealAll(ctx context.Context) (resumed, started, clocks []int, err error) {
	s.mu.Lock()
	for id := range s.paused {
		resumed = append(resumed, id)
	}
	for id, c := range s.clocked {
		if c {
			clocks = append(clocks, id)
		}
	}
	s.mu.Unlock()
	sort.Ints(resumed)
	sort.Ints(clocks)
	for _, id := range resumed {
		s.Resume(id)
	}
	s.Heal()
	for _, id := range s.IDs() {
		if !s.Running(id) {
			if err := s.StartNode(id); err != nil {
				return resumed, started, clocks, err
			}
			started = append(started, id)
		}
	}
	for _, id := range clocks {
		if e := s.SetClock(ctx, id, 1, 0); e != nil && err == nil {
			err = e
		}
	}
	return resumed, started, clocks, err
}

// Close kills every member and stops the proxies.
func (s *Supervisor) Close() {
	for _, id := range s.IDs() {
		s.Resume(id)
		s.Kill(id)
	}
	for _, p := range s.proxies {
		p.Close()
	}
	if s.cl != nil {
		s.cl.Close()
	}
}
