package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"
)

// Floor is the physical floor of a commit on this machine.
type Floor struct {
	FsyncUS float64 `json:"fsync_us"` // median fdatasync of a 4 KiB append
	RTTUS   float64 `json:"rtt_us"`   // median loopback TCP round trip
}

// MeasureFloor measures, in dir (the data directory's file system), the
// median fsync of a small append and the median loopback round trip.
func MeasureFloor(ctx context.Context, dir string) (Floor, error) {
	fsync, err := medianFsync(ctx, dir, 200)
	if err != nil {
		return Floor{}, err
	}
	rtt, err := medianRTT(ctx, 2000)
	if err != nil {
		return Floor{}, err
	}
	return Floor{FsyncUS: us(fsync), RTTUS: us(rtt)}, nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func medianFsync(ctx context.Context, dir string, n int) (time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(dir, "fsync-floor-*")
	if err != nil {
		return 0, fmt.Errorf("fsync floor: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	return medianTime(ctx, n, func() error {
		if _, err := f.Write(block); err != nil {
			return err
		}
		return f.Sync()
	})
}

func medianRTT(ctx context.Context, n int) (time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, 1)
	return medianTime(ctx, n, func() error {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	})
}

// medianTime times op n times, or until ctx ends, and returns the median;
// an error of op's ends the measure.
func medianTime(ctx context.Context, n int, op func() error) (time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		start := time.Now()
		if err := op(); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	if len(ds) == 0 {
		return 0, ctx.Err()
	}
	return median(ds), nil
}
