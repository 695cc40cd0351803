package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/internal/procattr"
	"github.com/raftlock/raftlock/internal/procstat"
)

// clientProc is one chaos-client process as the harness runs it: the
// harness's end of the pipe whose client end is clientpipe.go's.
type clientProc struct {
	id    int // 1..N, for the logs
	cmd   *exec.Cmd
	rec   *history.Recorder
	wl    *Workload
	store workload.Store
	log   *slog.Logger
	done  chan struct{} // closed when the process's stdout closed and it was waited for

	mu        sync.Mutex
	proc      history.Process // the history process it runs now
	armed     chan struct{}   // non-nil: stop it at its next store read, then close this
	paused    bool
	stoppedAt time.Time
}

// startClientProcs starts n client processes of the run's workload.
func startClientProcs(cfg Config, wl *Workload, rec *history.Recorder, logs string) ([]*clientProc, error) {
	var procs []*clientProc
	for k := range cfg.ClientProcs {
		args := []string{"chaos-client", "--endpoints", strings.Join(wl.Endpoints, ","), "--keys", strings.Join(wl.Keys, ","),
			"--seed", strconv.FormatUint(cfg.Seed, 10), "--index", strconv.Itoa(cfg.Clients + k),
			"--lease-min", cfg.LeaseMin.String(), "--lease-max", cfg.LeaseMax.String()}
		if len(wl.Spare) > 0 {
			args = append(args, "--spare", strings.Join(wl.Spare, ","))
		}
		if t := cfg.target(); t != TargetRaftlock {
			args = append(args, "--target", string(t))
		}
		cp := &clientProc{id: k + 1, cmd: exec.Command(cfg.Bin, args...), rec: rec, wl: wl, store: wl.Store, log: cfg.Log,
			done: make(chan struct{}), proc: -1}
		cp.cmd.SysProcAttr = procattr.Child()
		if err := cp.start(filepath.Join(logs, fmt.Sprintf("client-%d.log", k+1))); err != nil {
			stopClientProcs(procs)
			return nil, fmt.Errorf("client process %d: %w", k+1, err)
		}
		procs = append(procs, cp)
	}
	return procs, nil
}

// start starts the process, its stderr to logFile, and serves its
// requests until its stdout closes.
func (cp *clientProc) start(logFile string) error {
	lf, err := os.Create(logFile)
	if err != nil {
		return err
	}
	cp.cmd.Stderr = lf
	stdin, err := cp.cmd.StdinPipe()
	if err != nil {
		lf.Close()
		return err
	}
	stdout, err := cp.cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return err
	}
	if err := cp.cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	go func() {
		defer close(cp.done)
		defer lf.Close()
		cp.serve(stdout, stdin)
		stdin.Close()
		if err := cp.cmd.Wait(); err != nil {
			cp.log.Warn("client process ended badly", "client", cp.id, "err", err, "log", logFile)
		}
	}()
	return nil
}

// serve answers the process's requests until its stdout closes.
func (cp *clientProc) serve(r io.Reader, w io.Writer) {
	dec := json.NewDecoder(bufio.NewReader(r))
	enc := json.NewEncoder(w)
	for {
		var req pipeRequest
		if err := dec.Decode(&req); err != nil {
			return
		}
		if err := enc.Encode(cp.answer(req)); err != nil {
			return
		}
	}
}

// answer carries out one request. A read is where an armed pause lands:
// after the store answered, before the client has the answer, so the
// client stops holding its lock between its read and its write.
func (cp *clientProc) answer(req pipeRequest) pipeReply {
	switch req.Op {
	case "proc":
		p := cp.wl.newProcess()
		cp.setProc(p)
		return pipeReply{Proc: p}
	case "record":
		e := cp.rec.Record(req.Proc, req.Type, req.F, req.Key, req.Value)
		cp.wl.count(req.Type)
		return pipeReply{Event: e}
	case "read":
		v, ok := cp.store.Read(req.Proc, req.Key, req.Token)
		cp.mu.Lock()
		if cp.armed != nil {
			cp.stopLocked()
		}
		cp.mu.Unlock()
		return pipeReply{V: v, OK: ok}
	case "write":
		return pipeReply{OK: cp.store.Write(req.Proc, req.Key, req.Token, req.V)}
	}
	return pipeReply{}
}

func (cp *clientProc) setProc(p history.Process) {
	cp.mu.Lock()
	cp.proc = p
	cp.mu.Unlock()
}

// pause stops the process at its next store read (between its read and
// its write, holding its lock) or, if none comes within bound, wherever
// it is, and records the pause. It says whether the pause landed in a
// critical section.
func (cp *clientProc) pause(ctx context.Context, bound time.Duration) bool {
	landed := make(chan struct{})
	cp.mu.Lock()
	cp.armed = landed
	cp.mu.Unlock()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-landed:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-cp.done:
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.armed == nil {
		return true // it landed as the bound passed
	}
	cp.stopLocked()
	return false
}

// stopLocked stops the process and records it; cp.mu is held.
func (cp *clientProc) stopLocked() {
	close(cp.armed)
	cp.armed = nil
	if err := cp.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		cp.log.Warn("client pause not applied", "client", cp.id, "err", err)
		return
	}
	// SIGSTOP is asynchronous: a client running on another CPU may take
	// its answer and send its write before the stop lands (seen within a
	// millisecond on a loaded VM). Wait until the kernel says it stopped.
	if !waitStopped(cp.cmd.Process.Pid, time.Second) {
		cp.log.Warn("client pause: the process is not seen stopped", "client", cp.id)
	}
	cp.paused, cp.stoppedAt = true, time.Now()
	fault.ClientPause{Processes: []history.Process{cp.proc}}.Record(cp.rec)
}

// waitStopped polls the state of process pid (/proc/PID/stat) until it is
// stopped, for up to bound. Where /proc cannot be read it waits 10 ms.
func waitStopped(pid int, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for {
		st, err := procstat.Read(pid)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			return false
		}
		if st.Stopped() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// resume continues a paused process once it has been stopped for at least
// at least, and records it.
func (cp *clientProc) resume(atLeast time.Duration) {
	cp.mu.Lock()
	paused, at := cp.paused, cp.stoppedAt
	cp.mu.Unlock()
	if !paused {
		return
	}
	if d := time.Until(at.Add(atLeast)); d > 0 {
		time.Sleep(d)
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	// Recorded first: what the client does once it runs again comes after.
	fault.ClientResume{Processes: []history.Process{cp.proc}}.Record(cp.rec)
	if err := cp.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		cp.log.Warn("client resume not applied", "client", cp.id, "err", err)
	}
	cp.paused = false
}

// stopClientProcs asks every client process to end (SIGTERM: its call in
// flight ends as the in-process clients' do when the run's time is up)
// and waits for each, killing one that does not end within 15 s. A paused
// one ends once the nemesis resumed it: that heal comes first.
func stopClientProcs(procs []*clientProc) {
	for _, cp := range procs {
		cp.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cp := range procs {
		select {
		case <-cp.done:
		case <-time.After(15 * time.Second):
			cp.cmd.Process.Signal(syscall.SIGCONT)
			cp.cmd.Process.Kill()
			<-cp.done
		}
	}
}

// killClientProcs kills every client process still running: a run that
// ended early must leave none behind.
func killClientProcs(procs []*clientProc) {
	for _, cp := range procs {
		select {
		case <-cp.done:
		default:
			cp.cmd.Process.Kill()
			<-cp.done
		}
	}
}
