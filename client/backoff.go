package client

import (
	"math/rand/v2"
	"time"
)

// jitter draws a retry delay between d/2 and d. Without it, every client
// that lost the leader at the same moment (an election, a member killed)
// retries in lockstep, 10, 20, 40 ms later, and the new leader meets each
// wave at once; spreading the waits spreads the load, and the half kept
// fixed still lets the cluster settle before the next try.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
