package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

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
		w.Dial = peerDialer(t, f.LeaseMax)
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
