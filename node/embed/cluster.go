package embed

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// PortRange is one of a local cluster's port ranges: member N uses
// Port+N-1. Name is what the user set it with, for messages.
type PortRange struct {
	Name string
	Port int
}

// Addr is member id's address in the range, on the loopback interface.
func (r PortRange) Addr(id int) string { return fmt.Sprintf("127.0.0.1:%d", r.Port+id-1) }

// CheckPortRanges refuses port ranges of n members that leave the port
// space or overlap: two members, or one member's two servers, cannot
// share a port.
func CheckPortRanges(ranges []PortRange, n int) error {
	for i, a := range ranges {
		if a.Port < 1 || a.Port+n-1 > 65535 {
			return fmt.Errorf("%s %d: the ports %d..%d must lie in 1..65535", a.Name, a.Port, a.Port, a.Port+n-1)
		}
		for _, b := range ranges[:i] {
			if a.Port <= b.Port+n-1 && b.Port <= a.Port+n-1 {
				return fmt.Errorf("%s %d and %s %d overlap: with --nodes %d they use %d..%d and %d..%d; move one",
					b.Name, b.Port, a.Name, a.Port, n, b.Port, b.Port+n-1, a.Port, a.Port+n-1)
			}
		}
	}
	return nil
}

// CheckPortsFree binds and releases every port n members will use, so a
// port another process holds is found before anything is started or
// written.
func CheckPortsFree(ranges []PortRange, n int) error {
	for _, r := range ranges {
		for id := 1; id <= n; id++ {
			ln, err := net.Listen("tcp", r.Addr(id))
			if err != nil {
				return fmt.Errorf("member %d cannot use %s (%s): %w; move the range with %s", id, r.Addr(id), r.Name, err, r.Name)
			}
			ln.Close()
		}
	}
	return nil
}

// LocalSize is the number of members whose data a local cluster's
// directory holds (its subdirectories 1, 2, ... that are not empty), 0
// for a new one.
func LocalSize(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("--data %s: %w", dir, err)
	}
	n := 0
	for _, e := range entries {
		if id, err := strconv.Atoi(e.Name()); err != nil || id < 1 || !e.IsDir() {
			continue
		}
		if sub, err := os.ReadDir(filepath.Join(dir, e.Name())); err == nil && len(sub) > 0 {
			n++
		}
	}
	return n, nil
}

// LocalDataDir is member id's data directory in a local cluster's dir.
func LocalDataDir(dir string, id int) string { return filepath.Join(dir, strconv.Itoa(id)) }

// StartLocal starts members 1..n of a local cluster in this process,
// each with its data directory under dir (LocalDataDir) and its settings
// from config(id). A member that fails to start takes the members started
// before it down with it, and whatever this start created on disk.
func StartLocal(dir string, n int, config func(id int) (Config, error), log *slog.Logger) (members []*Member, err error) {
	var undos []func()
	defer func() {
		if err == nil {
			return
		}
		for _, mb := range members {
			mb.Close()
		}
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
		members = nil
	}()
	dirs := []string{dir}
	for id := 1; id <= n; id++ {
		dirs = append(dirs, LocalDataDir(dir, id))
	}
	for _, d := range dirs {
		undo, err := CreateDataDir(d)
		if err != nil {
			return members, err
		}
		undos = append(undos, undo)
	}
	for id := 1; id <= n; id++ {
		cfg, err := config(id)
		if err == nil {
			var mb *Member
			if mb, err = Start(cfg, log); err == nil {
				members = append(members, mb)
				continue
			}
		}
		return members, fmt.Errorf("member %d: %w", id, err)
	}
	return members, nil
}
