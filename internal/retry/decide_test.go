package retry

import "testing"

// Every outcome of an attempt, for a read and for a call that changes
// state, within and past the redirect budget.
func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		o          Outcome
		idempotent bool
		redirects  int
		want       Decision
	}{
		{Answered, false, 0, Return},
		{Answered, true, 5, Return},
		{Redirected, false, 0, Follow},
		{Redirected, true, MaxRedirects - 1, Follow},
		{Redirected, false, MaxRedirects, FollowLater},
		{Redirected, true, MaxRedirects + 4, FollowLater},
		{Overloaded, false, 0, Again},
		{Overloaded, true, 0, Again},
		{Unavailable, false, 0, Next},
		{Unavailable, true, 9, Next},
		{NotSent, false, 0, Next},
		{NotSent, true, 0, Next},
		{Lost, true, 0, Next},
		{Lost, false, 0, Unknown},
		{Lost, false, MaxRedirects, Unknown},
	} {
		if got := Decide(tc.o, tc.idempotent, tc.redirects); got != tc.want {
			t.Errorf("Decide(%d, idempotent %v, %d redirects) = %d, want %d", tc.o, tc.idempotent, tc.redirects, got, tc.want)
		}
	}
}
