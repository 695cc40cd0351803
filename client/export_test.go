package client

import "context"

// SetBeforeBackoff makes c call f before each wait between two attempts of
// a call, with why the last attempt failed: a test acts there, when no
// attempt is in flight, instead of guessing the moment by the clock.
func SetBeforeBackoff(c *Client, f func(ctx context.Context, lastErr error)) { c.beforeBackoff = f }
