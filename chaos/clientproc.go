package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
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
)

// Client processes (raftlock chaos --client-procs N) are workload clients
// the harness can stop with SIGSTOP (the client-pause family), as a GC
// pause or a stalled VM stops a real client: `raftlock chaos-client`
// processes running one worker of the same workload (Workload, the plan's
// stream after the harness's own clients'). A client process owns nothing
// the checker reads: its every history event and store access is a
// request on its stdout, one JSON line, answered on its stdin. The
// harness records the event (its process ids are the harness's, so the
// history has one numbering) or accesses its one store, and answers; the
// client waits for the answer, so an invocation is in the history before
// the call leaves, as the in-process clients' are, and a client stopped
// mid-request stops with its answer unread.

// pipeRequest is one request of a client process. Op is "proc" (a new
// history process id), "record" (an event: Proc, Type, F, Key, Value),
// "read" or "write" (the store: Proc, Key, Token, and the written V).
type pipeRequest struct {
	Op    string          `json:"op"`
	Proc  history.Process `json:"proc"`
	Type  string          `json:"type,omitempty"`
	F     string          `json:"f,omitempty"`
	Key   string          `json:"key,omitempty"`
	Value history.Value   `json:"value"`
	Token uint64          `json:"token,omitempty"`
	V     int64           `json:"v,omitempty"`
}

// pipeReply answers a pipeRequest: the process id, the recorded event,
// or the store's answer (V, OK).
type pipeReply struct {
	Proc  history.Process `json:"proc"`
	Event history.Event   `json:"event"`
	V     int64           `json:"v"`
	OK    bool            `json:"ok"`
}

// pipe is a client process's end: requests out, answers in, one at a
// time. It is the worker's Recorder, Store and process numbering. A
// broken pipe (the harness gone) ends the client: stop is called and
// every later request answers zero.
type pipe struct {
	mu   sync.Mutex
	enc  *json.Encoder
	dec  *json.Decoder
	stop context.CancelFunc
	err  error
}

func (p *pipe) call(req pipeRequest) pipeReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	var rep pipeReply
	if p.err != nil {
		return rep
	}
	if err := p.enc.Encode(req); err != nil {
		p.err = err
	} else if err := p.dec.Decode(&rep); err != nil {
		p.err = err
	}
	if p.err != nil {
		p.stop()
	}
	return rep
}

func (p *pipe) Record(proc history.Process, typ, f, key string, v history.Value) history.Event {
	return p.call(pipeRequest{Op: "record", Proc: proc, Type: typ, F: f, Key: key, Value: v}).Event
}

func (p *pipe) Read(proc history.Process, key string, token uint64) (int64, bool) {
	rep := p.call(pipeRequest{Op: "read", Proc: proc, Key: key, Token: token})
	return rep.V, rep.OK
}

func (p *pipe) Write(proc history.Process, key string, token uint64, v int64) bool {
	return p.call(pipeRequest{Op: "write", Proc: proc, Key: key, Token: token, V: v}).OK
}

func (p *pipe) newProcess() history.Process { return p.call(pipeRequest{Op: "proc"}).Proc }

// ClientFlags are raftlock chaos-client's flags: what the harness tells
// the client process it starts.
type ClientFlags struct {
	Endpoints string
	Spare     string
	Keys      string
	Seed      uint64
	Index     int
	LeaseMin  time.Duration
	LeaseMax  time.Duration
	Target    string
}

// ClientSynopsis is raftlock chaos-client's usage line.
const ClientSynopsis = "chaos-client --endpoints A,B,C --keys k1,k2 --seed N --index I [--spare D,E] [--lease-min 200ms] [--lease-max 1s]" +
	" (started by raftlock chaos --client-procs; speaks JSON lines on stdin and stdout)"

// RegisterFlags defines raftlock chaos-client's flags on fs.
func (f *ClientFlags) RegisterFlags(fs *flag.FlagSet) {
	d := Defaults()
	fs.StringVar(&f.Endpoints, "endpoints", "", "the members' client addresses (comma-separated)")
	fs.StringVar(&f.Spare, "spare", "", "client addresses of members the run may add (comma-separated)")
	fs.StringVar(&f.Keys, "keys", "", "the keys the workload contends on (comma-separated)")
	fs.Uint64Var(&f.Seed, "seed", 0, "the run's seed")
	fs.IntVar(&f.Index, "index", 0, "which of the workload's random streams this client draws from")
	fs.DurationVar(&f.LeaseMin, "lease-min", d.LeaseMin, "shortest lease the client asks for")
	fs.DurationVar(&f.LeaseMax, "lease-max", d.LeaseMax, "longest lease the client asks for")
	fs.StringVar(&f.Target, "target", string(TargetRaftlock), "the lock service the endpoints are: "+joinTargets())
}

// RunClient runs one workload client until ctx ends or the harness hangs
// up, its events and store accesses requests on out answered on in.
func (f *ClientFlags) RunClient(ctx context.Context, in io.Reader, out io.Writer) error {
	if f.Endpoints == "" || f.Keys == "" {
		return errors.New("--endpoints and --keys are required")
	}
	if f.LeaseMin < 10*time.Millisecond || f.LeaseMax < f.LeaseMin {
		return errors.New("leases must satisfy 10ms <= --lease-min <= --lease-max")
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	bw := bufio.NewWriter(out)
	p := &pipe{enc: json.NewEncoder(flushWriter{bw}), dec: json.NewDecoder(bufio.NewReader(in)), stop: stop}
	var spare []string
	if f.Spare != "" {
		spare = strings.Split(f.Spare, ",")
	}
	w := &Workload{Clients: 1, First: f.Index, Keys: strings.Split(f.Keys, ","), LeaseMin: f.LeaseMin, LeaseMax: f.LeaseMax,
		Endpoints: strings.Split(f.Endpoints, ","), Spare: spare, Seed: f.Seed, Rec: p, Store: p, NewProcess: p.newProcess}
	if t := Target(f.Target); t != TargetRaftlock && t != "" {
		w.Dial = func(_ int, endpoints []string) (LockClient, error) { return dialPeer(t, endpoints) }
	}
	if err := w.Run(ctx); err != nil {
		return err
	}
	if p.err != nil && !errors.Is(p.err, io.EOF) {
		return fmt.Errorf("the harness's pipe: %w", p.err)
	}
	return nil
}

// flushWriter flushes each request as it is written: the client waits
// for its answer.
type flushWriter struct{ w *bufio.Writer }

func (f flushWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if err == nil {
		err = f.w.Flush()
	}
	return n, err
}

// clientProc is one chaos-client process as the harness runs it.
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
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			return false
		}
		// The state follows the command's name, in parentheses that the
		// name itself may contain: after the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
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
