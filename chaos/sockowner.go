package chaos

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// socketOwner finds which of pids holds the loopback TCP socket whose
// local port is port (the far end of a connection the harness accepted),
// from /proc: the socket's inode in /proc/net/tcp, then the process with
// a descriptor on it. 0 when none does or /proc cannot tell (not Linux).
// The gateways use it for peer connections that do not name their
// sender, such as etcd's lease renewals forwarded to the leader.
func socketOwner(addr net.Addr, pids map[int]int) int {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return 0
	}
	inode := socketInode(ta.Port)
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	for pid, id := range pids {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && l == want {
				return id
			}
		}
	}
	return 0
}

// socketInode is the inode of the IPv4 TCP socket bound to local port
// port, "" if none is listed.
func socketInode(port int) string {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	suffix := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || !strings.HasSuffix(fields[1], suffix) {
			continue
		}
		if _, err := strconv.ParseUint(fields[9], 10, 64); err == nil && fields[9] != "0" {
			return fields[9]
		}
	}
	return ""
}
