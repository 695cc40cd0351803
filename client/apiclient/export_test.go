package apiclient

import "context"

// SetBeforeBackoff makes c call f before each wait between two attempts of
// a call, with why the last attempt failed: a test acts there, when no
// attempt is in flight, instead of guessing the moment by the clock.
func (c *HTTP) SetBeforeBackoff(f func(ctx context.Context, lastErr error)) { c.r.beforeBackoff = f }

// SetBeforeBackoff is HTTP.SetBeforeBackoff's for the gRPC client.
func (c *GRPC) SetBeforeBackoff(f func(ctx context.Context, lastErr error)) { c.r.beforeBackoff = f }
