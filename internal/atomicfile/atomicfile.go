// Package atomicfile writes a file so that it is either absent (or its
// old content) or the whole of the new content, durably, whatever
// moment a crash comes at.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data to name with permissions perm: a temporary file in
// the same directory, synced, renamed over name, and the directory
// synced. A directory that cannot take the file is named in the error.
func Write(name string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(name)
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) { // name the directory, not the temporary file
			return fmt.Errorf("write %s: directory %s: %w", name, dir, pe.Err)
		}
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename, nothing to remove
	if err := write(f, data, perm); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// write fills f, syncs and closes it.
func write(f *os.File, data []byte, perm os.FileMode) error {
	err := f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
