package procgroup

import (
	"io"
	"os"
	"strings"
)

// ExitReason returns what the process whose output is at logPath died of,
// from the log's tail: the last "panic:" or "fatal error:" line, else the
// error line a raftlock command exits with ("raftlock node: ..."), as when
// a member cannot restart or finds its port taken; "" when the log says
// neither or cannot be read.
func ExitReason(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 256 << 10
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		f.Seek(st.Size()-tail, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	var died, exited string
	for line := range strings.Lines(string(b)) {
		switch {
		case strings.HasPrefix(line, "panic: "), strings.HasPrefix(line, "fatal error: "):
			died = strings.TrimSpace(line)
		case strings.HasPrefix(line, "raftlock node: "):
			exited = strings.TrimSpace(line)
		}
	}
	if died != "" {
		return died
	}
	return exited
}
