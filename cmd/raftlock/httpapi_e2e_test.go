package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The curl examples of docs/http-api.md run as printed against real
// `raftlock cluster` processes, in their order, and answer what the page
// shows: the same status lines and redirects, the same JSON fields, and
// the same values wherever a run cannot change them (tokens, times and
// digests can).
func TestHTTPAPIDocExamplesRunAsPrinted(t *testing.T) {
	startsProcesses(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed: the examples of docs/http-api.md are curl commands")
	}
	examples := docExamples(t, filepath.Join("..", "..", "docs", "http-api.md"))
	bin := buildBinary(t)
	var ranges [4]int
	for i := range ranges {
		ranges[i] = freeRange(t, 3)
	}
	startLocalCluster(t, bin, t.TempDir(), "--peer-port", strconv.Itoa(ranges[0]), "--client-port", strconv.Itoa(ranges[1]),
		"--http-port", strconv.Itoa(ranges[2]), "--api-port", strconv.Itoa(ranges[3]))
	api := func(id int) string { return "127.0.0.1:" + strconv.Itoa(ranges[3]+id-1) }
	var endpoints []string
	for id := 1; id <= 3; id++ {
		endpoints = append(endpoints, "127.0.0.1:"+strconv.Itoa(ranges[1]+id-1))
	}
	// The page's examples ran with member 1 leading. The bound is only a
	// backstop: beside other work a transfer can take many tries.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitUntil(ctx, t, "member 1 to lead", func() bool {
		if apiRole(api(1)) == "leader" {
			return true
		}
		exec.Command(bin, "leader", "transfer", "--to", "1", "--endpoints", strings.Join(endpoints, ","), "--timeout", "2s").Run()
		return false
	})
	ports := strings.NewReplacer("127.0.0.1:10001", api(1), "127.0.0.1:10002", api(2), "127.0.0.1:10003", api(3))
	var streams []*docStream
	for _, ex := range examples {
		if strings.HasPrefix(ex.command, "curl -sN ") {
			// A watch: it streams while the examples after it run.
			streams = append(streams, startDocStream(t, ports.Replace(ex.command), ex))
			continue
		}
		run := exec.Command("sh", "-c", ports.Replace(ex.command))
		out, err := run.Output()
		if err != nil {
			t.Fatalf("%s: %v", ex.command, err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(got) != len(ex.output) {
			t.Fatalf("%s:\ngot  %q\nwant %q", ex.command, got, ex.output)
		}
		for i, want := range ex.output {
			if msg := sameAnswer(got[i], ports.Replace(want)); msg != "" {
				t.Errorf("%s: %s\ngot  %s\nwant %s", ex.command, msg, got[i], want)
			}
		}
	}
	for _, st := range streams {
		st.check(t, ports)
	}
}

// docStream is a streaming example (curl -N) running in the background.
type docStream struct {
	ex    example
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
}

// startDocStream starts command and waits for its first line (a watch's
// opening comment, written once the watch began), so the examples after
// it run while it watches.
func startDocStream(t *testing.T, command string, ex example) *docStream {
	t.Helper()
	st := &docStream{ex: ex, cmd: exec.Command("sh", "-c", command)}
	sc := startScanning(t, st.cmd, st.cmd.StdoutPipe)
	go func() {
		for sc.Scan() {
			st.mu.Lock()
			st.lines = append(st.lines, sc.Text())
			st.mu.Unlock()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitUntil(ctx, t, ex.command+" to start", func() bool { return len(st.got()) > 0 })
	return st
}

func (st *docStream) got() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.lines)
}

// check waits for the lines the page shows, stops the stream and compares
// them.
func (st *docStream) check(t *testing.T, ports *strings.Replacer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitUntil(ctx, t, st.ex.command+" to print what the page shows", func() bool { return len(st.got()) >= len(st.ex.output) })
	st.cmd.Process.Kill()
	got := st.got()
	for i, want := range st.ex.output {
		if msg := sameAnswer(got[i], ports.Replace(want)); msg != "" {
			t.Errorf("%s: %s\ngot  %s\nwant %s", st.ex.command, msg, got[i], want)
		}
	}
}

// example is one command of a page and the output it shows.
type example struct {
	command string
	output  []string
}

// docExamples are the curl commands against raftlock cluster's API ports
// in the console blocks of the page at path, with their outputs.
func docExamples(t *testing.T, path string) []example {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var exs []example
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "```console":
			in = true
		case line == "```":
			in = false
		case !in:
		case strings.HasPrefix(line, "$ "):
			exs = append(exs, example{command: strings.TrimPrefix(line, "$ ")})
		case len(exs) > 0:
			exs[len(exs)-1].output = append(exs[len(exs)-1].output, line)
		}
	}
	exs = slices.DeleteFunc(exs, func(e example) bool {
		return !strings.HasPrefix(e.command, "curl ") || !strings.Contains(e.command, "http://127.0.0.1:1000")
	})
	if len(exs) < 10 {
		t.Fatalf("%s shows %d curl examples against raftlock cluster", path, len(exs))
	}
	return exs
}

// sameAnswer says how got differs from the page's want ("": it does
// not): a JSON answer in its fields and the values a run cannot change,
// any other line exactly.
func sameAnswer(got, want string) string {
	if g, ok := strings.CutPrefix(got, "data: "); ok && strings.HasPrefix(want, "data: ") {
		// An event of a stream: its JSON.
		got, want = g, strings.TrimPrefix(want, "data: ")
	}
	if strings.HasPrefix(want, ": ") || strings.HasPrefix(want, "id: ") {
		// A stream's comment or event id: the same but for its numbers
		// (an index, a revision).
		digits := regexp.MustCompile(`[0-9]+`)
		got, want = digits.ReplaceAllString(got, "N"), digits.ReplaceAllString(want, "N")
	}
	if !strings.HasPrefix(want, "{") {
		if got != want {
			return "a different line"
		}
		return ""
	}
	var g, w map[string]any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		return "no JSON object"
	}
	json.Unmarshal([]byte(want), &w)
	if gk, wk := slices.Sorted(maps.Keys(g)), slices.Sorted(maps.Keys(w)); !slices.Equal(gk, wk) {
		return fmt.Sprintf("fields %v, want %v", gk, wk)
	}
	for _, k := range []string{"key", "error", "message", "held", "released", "more", "next", "lease_ms", "owner", "role", "id", "leader", "type"} {
		if fmt.Sprint(g[k]) != fmt.Sprint(w[k]) {
			return fmt.Sprintf("%s is %v, want %v", k, g[k], w[k])
		}
	}
	gl, _ := g["locks"].([]any)
	wl, _ := w["locks"].([]any)
	if len(gl) != len(wl) {
		return fmt.Sprintf("%d locks, want %d", len(gl), len(wl))
	}
	for i := range gl {
		a, b := gl[i].(map[string]any), wl[i].(map[string]any)
		if a["key"] != b["key"] || a["owner"] != b["owner"] {
			return fmt.Sprintf("lock %d is %v, want %v", i, a, b)
		}
	}
	return ""
}

// apiRole is the role the member whose API is at addr reports, "" when it
// does not answer.
func apiRole(addr string) string {
	cl := &http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Post("http://"+addr+"/v1/status", "application/json", nil)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st struct {
		Role string `json:"role"`
	}
	json.NewDecoder(resp.Body).Decode(&st)
	return st.Role
}

// freeRange is the first of n consecutive loopback ports that are free,
// as raftlock cluster's port flags take them.
func freeRange(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base, _ := strconv.Atoi(freePort(t))
		if base+n-1 > 65535 {
			continue
		}
		free := true
		for p := base; p < base+n && free; p++ {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if free = err == nil; free {
				ln.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatal("no range of free ports")
	return 0
}
