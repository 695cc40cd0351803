package checker

import (
	"fmt"

	"github.com/anishathalye/porcupine"

	"github.com/raftlock/raftlock/checker/history"
)

// lockState is the model's view of one key: whether it is held, by which
// token (0: by a grant whose token nobody saw), and the highest token seen
// granted on the key.
type lockState struct {
	Held  bool
	Token uint64
	Max   uint64
}

type lockInput struct {
	F     string
	Token uint64 // release, renew: the caller's token
	Force bool   // a forced release: frees whatever token holds the key
}

type outKind uint8

const (
	outUnknown   outKind = iota // info: may or may not have happened
	outNoop                     // failed with an error that means nothing happened
	outGranted                  // acquire ok
	outHeld                     // acquire fail held
	outOK                       // release/renew ok
	outNotFound                 // release/renew fail not-found
	outFree                     // get: not held
	outHeldBy                   // get: held by Token
	outFreedSome                // a forced release found applied in the log: it freed a holder whose token nobody saw
)

type lockOutput struct {
	Kind  outKind
	Token uint64
}

func opInput(o *Op) lockInput {
	if o.Forced() {
		return lockInput{F: o.F, Force: true}
	}
	return lockInput{F: o.F, Token: o.Token()}
}

func opOutput(o *Op) lockOutput {
	switch {
	case o.Resolved != nil:
		return lockOutput{Kind: outGranted, Token: *o.Resolved}
	case o.Applied && o.Forced():
		return lockOutput{Kind: outFreedSome}
	case o.Applied:
		return lockOutput{Kind: outOK}
	case o.Forced() && o.Type == history.OK:
		return lockOutput{Kind: outOK, Token: o.Token()}
	case o.Type == history.Info:
		return lockOutput{Kind: outUnknown}
	}
	switch o.Type {
	case history.Fail:
		switch {
		case o.F == history.OpAcquire && o.Error() == "held":
			return lockOutput{Kind: outHeld}
		case (o.F == history.OpRelease || o.F == history.OpRenew) && o.Error() == "not-found":
			return lockOutput{Kind: outNotFound}
		}
		return lockOutput{Kind: outNoop}
	}
	switch o.F {
	case history.OpAcquire:
		return lockOutput{Kind: outGranted, Token: o.Token()}
	case history.OpGet:
		if o.Done.Value.Held != nil && *o.Done.Value.Held {
			var t uint64
			if o.Done.Value.Token != nil {
				t = *o.Done.Value.Token
			}
			return lockOutput{Kind: outHeldBy, Token: t}
		}
		return lockOutput{Kind: outFree}
	}
	return lockOutput{Kind: outOK}
}

// stepLock is the lock's sequential specification, with one twist: a held
// lock may silently expire at any point (its lease ran out), so every step
// is tried from the current state and from the state after an expiry.
func stepLock(state, input, output any) []any {
	s := state.(lockState)
	in := input.(lockInput)
	out := output.(lockOutput)
	starts := []lockState{s}
	if s.Held {
		starts = append(starts, lockState{Max: s.Max})
	}
	var next []any
	for _, c := range starts {
		heldByCaller := c.Held && c.Token == in.Token && in.Token != 0
		switch in.F {
		case history.OpAcquire:
			next = append(next, stepAcquire(c, out)...)
		case history.OpRelease:
			if in.Force {
				next = append(next, stepForced(c, out)...)
				continue
			}
			next = append(next, stepOwned(c, out, heldByCaller, lockState{Max: c.Max})...)
		case history.OpRenew:
			next = append(next, stepOwned(c, out, heldByCaller, c)...)
		case history.OpGet:
			next = append(next, stepGet(c, out)...)
		}
	}
	return next
}

// stepAcquire: a grant needs the key free and a token above every one
// before; held needs it held; unknown may have granted it or not.
func stepAcquire(c lockState, out lockOutput) []any {
	switch out.Kind {
	case outUnknown:
		if !c.Held {
			return []any{c, lockState{Held: true, Max: c.Max}}
		}
		return []any{c}
	case outNoop:
		return []any{c}
	case outGranted:
		if !c.Held && out.Token > c.Max {
			return []any{lockState{Held: true, Token: out.Token, Max: out.Token}}
		}
	case outHeld:
		if c.Held {
			return []any{c}
		}
	}
	return nil
}

// stepOwned is a call only the key's holder may make, a release (after:
// the key free) or a renewal (after: as it was): ok needs the caller to
// hold the key and leaves after; not-found needs the caller not to hold
// it; unknown may have done it or not; any other outcome changed nothing.
func stepOwned(c lockState, out lockOutput, heldByCaller bool, after lockState) []any {
	switch {
	case out.Kind == outOK && heldByCaller:
		return []any{after}
	case out.Kind == outNotFound && !heldByCaller:
		return []any{c}
	case out.Kind == outOK, out.Kind == outNotFound:
		return nil
	case out.Kind == outUnknown && heldByCaller && after != c:
		return []any{c, after}
	}
	return []any{c}
}

// stepGet: free needs the key free; held by a token needs it held by that
// token, or by a grant nobody saw answered, whose token it tells.
func stepGet(c lockState, out lockOutput) []any {
	switch out.Kind {
	case outFree:
		if !c.Held {
			return []any{c}
		}
	case outHeldBy:
		switch {
		case c.Held && c.Token == out.Token:
			return []any{c}
		case c.Held && c.Token == 0 && out.Token > c.Max:
			// The grant nobody saw answered: now we know its token.
			return []any{lockState{Held: true, Token: out.Token, Max: out.Token}}
		}
	default:
		return []any{c}
	}
	return nil
}

// stepForced is a forced release from state c: ok frees the key held by
// exactly the token it names (or by a grant nobody saw, which then had
// that token); not-found needs the key free; unknown may do either.
func stepForced(c lockState, out lockOutput) []any {
	free := lockState{Max: c.Max}
	switch out.Kind {
	case outOK:
		switch {
		case out.Token == 0:
		case c.Held && c.Token == out.Token:
			return []any{free}
		case c.Held && c.Token == 0 && out.Token > c.Max:
			return []any{lockState{Max: out.Token}}
		}
		return nil
	case outNotFound:
		if !c.Held {
			return []any{c}
		}
		return nil
	case outFreedSome:
		if c.Held {
			return []any{free}
		}
		return nil
	case outUnknown:
		if c.Held {
			return []any{c, free}
		}
		return []any{c}
	}
	return []any{c}
}

// lockModel is the porcupine model; callers partition by key themselves.
func lockModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{lockState{}} },
		Step: stepLock,
		Hash: func(state any) uint64 {
			s := state.(lockState)
			h := s.Token*0x9e3779b97f4a7c15 ^ s.Max*0xbf58476d1ce4e5b9
			if s.Held {
				h ^= 1
			}
			return h
		},
		DescribeOperation: describeOp,
		DescribeState: func(state any) string {
			s := state.(lockState)
			switch {
			case !s.Held:
				return fmt.Sprintf("free (max token %d)", s.Max)
			case s.Token == 0:
				return fmt.Sprintf("held by an unseen grant (max token %d)", s.Max)
			}
			return fmt.Sprintf("held by %d", s.Token)
		},
	}
	return nm.ToModel()
}

// outWords name the outcomes in porcupine's visualisation; a grant and a
// holder are named with their token.
var outWords = map[outKind]string{outUnknown: "?", outNoop: "failed", outHeld: "held", outOK: "ok",
	outNotFound: "not-found", outFree: "free", outFreedSome: "released (found in the log)"}

func describeOp(input, output any) string {
	in := input.(lockInput)
	out := output.(lockOutput)
	res := outWords[out.Kind]
	switch out.Kind {
	case outGranted:
		res = fmt.Sprintf("token %d", out.Token)
	case outHeldBy:
		res = fmt.Sprintf("held by %d", out.Token)
	}
	switch {
	case in.Force && out.Kind == outOK:
		return fmt.Sprintf("release(force) -> released %d", out.Token)
	case in.Force:
		return "release(force) -> " + res
	case in.F == history.OpRelease, in.F == history.OpRenew:
		return fmt.Sprintf("%s(%d) -> %s", in.F, in.Token, res)
	}
	return fmt.Sprintf("%s() -> %s", in.F, res)
}
