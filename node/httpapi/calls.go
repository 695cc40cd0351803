package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
)

// call is one path of the API: how its body becomes a request, the answer
// that is its success, and the JSON that success is.
type call struct {
	op    string // its name in the member's request metrics
	parse func(io.Reader) (*wire.Request, error)
	ok    wire.Op
	body  func(req *wire.Request, resp *wire.Response) any
}

// calls are the API's paths. Their bodies and answers are fixed by
// docs/http-api.md (and by scripts written against it): change nothing,
// only add.
var calls = map[string]call{
	"/v1/acquire": {member.OpAcquire.String(), parse[acquireArgs], wire.OpGranted, func(req *wire.Request, resp *wire.Response) any {
		return leaseBody{Key: req.Key, Token: resp.Token, LeaseMS: resp.LeaseMS}
	}},
	"/v1/release": {member.OpRelease.String(), parse[tokenArgs], wire.OpReleased, func(req *wire.Request, resp *wire.Response) any {
		if req.Force {
			return releasedBody{Key: req.Key, KeyB64: wire.KeyB64(req.Key), Token: resp.Token, Released: true} // the holder's, which it ended
		}
		return releasedBody{Key: req.Key, KeyB64: wire.KeyB64(req.Key), Token: req.Token, Released: true}
	}},
	"/v1/renew": {member.OpRenew.String(), parse[renewArgs], wire.OpRenewed, func(req *wire.Request, _ *wire.Response) any {
		return leaseBody{Key: req.Key, KeyB64: wire.KeyB64(req.Key), Token: req.Token, LeaseMS: req.LeaseMS}
	}},
	"/v1/get":    {member.OpGet.String(), parse[keyArgs], wire.OpValue, getAnswer},
	"/v1/list":   {member.OpList.String(), parse[listArgs], wire.OpLocks, listAnswer},
	"/v1/status": {"status", parse[statusArgs], wire.OpStatusInfo, func(_ *wire.Request, resp *wire.Response) any { return resp.Status }},
}

// The request bodies. Tag, on the calls that change a lock, is an
// operation id recorded with the command in the member's log (the client
// protocol's Tag), for audits such as the chaos harness's. KeyB64, on the
// calls that name a lock the cluster may hold, names it instead of Key
// when it is not UTF-8 (stored before the key rule: wire.ValidateKey), as
// listings and watches give it; AfterB64 is list's after so.
type (
	acquireArgs struct {
		Key     string `json:"key"`
		LeaseMS number `json:"lease_ms"`
		WaitMS  number `json:"wait_ms"`
		Owner   string `json:"owner"`
		Tag     number `json:"tag"`
	}
	tokenArgs struct { // release's
		Key    string `json:"key"`
		KeyB64 string `json:"key_b64"`
		Token  number `json:"token"`
		// Force frees the key whatever its token (the admin right), as
		// raftlock release --force: the answer's token is the one ended.
		Force bool   `json:"force"`
		Tag   number `json:"tag"`
	}
	renewArgs struct {
		Key     string `json:"key"`
		KeyB64  string `json:"key_b64"`
		Token   number `json:"token"`
		LeaseMS number `json:"lease_ms"`
		Tag     number `json:"tag"`
	}
	keyArgs struct { // get's
		Key    string `json:"key"`
		KeyB64 string `json:"key_b64"`
	}
	listArgs struct {
		Prefix   string `json:"prefix"`
		Limit    number `json:"limit"`
		After    string `json:"after"`
		AfterB64 string `json:"after_b64"`
	}
	statusArgs struct{} // none: an empty body or {}
)

// The success answers. KeyB64 (NextB64) is the key (next) again when it
// is not UTF-8, which key shows with U+FFFD for each byte that is not
// (wire.KeyB64); a listed lock's JSON does the same (wire.Lock).
type (
	// leaseBody answers acquire and renew.
	leaseBody struct {
		Key     string `json:"key"`
		KeyB64  string `json:"key_b64,omitempty"`
		Token   uint64 `json:"token"`
		LeaseMS uint64 `json:"lease_ms"`
	}
	releasedBody struct {
		Key      string `json:"key"`
		KeyB64   string `json:"key_b64,omitempty"`
		Token    uint64 `json:"token"`
		Released bool   `json:"released"`
	}
	// getBody is get's answer, as raftlock get --json prints it: the
	// owner only when the lock is held.
	getBody struct {
		Key         string  `json:"key"`
		KeyB64      string  `json:"key_b64,omitempty"`
		Held        bool    `json:"held"`
		Token       uint64  `json:"token"`
		RemainingMS uint64  `json:"remaining_ms"`
		Owner       *string `json:"owner,omitempty"`
	}
	// listBody is a page, as raftlock list --json prints it, and Next,
	// the after of the next page when More says there is one.
	listBody struct {
		Locks   []wire.Lock `json:"locks"`
		More    bool        `json:"more"`
		Next    string      `json:"next,omitempty"`
		NextB64 string      `json:"next_b64,omitempty"`
	}
)

// number is a uint64 field of a request body: a JSON number, or a
// decimal number in a string, as proto3's JSON mapping writes a uint64
// (a gRPC-gateway-style client, or one whose JSON numbers are doubles
// and so cannot carry every token exactly, sends "5" for 5). Answers
// always write numbers.
type number uint64

func (n *number) UnmarshalJSON(b []byte) error {
	s := string(b)
	kind := "number"
	switch {
	case s == "null":
		return nil // as for a uint64: left as it was
	case len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"':
		s, kind = s[1:len(s)-1], "string"
	case s == "true" || s == "false":
		kind = "bool"
	case s[0] == '{':
		kind = "object"
	case s[0] == '[':
		kind = "array"
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		// Named as encoding/json names a value it cannot take.
		return &json.UnmarshalTypeError{Value: kind + " " + string(b), Type: reflect.TypeFor[uint64]()}
	}
	*n = number(v)
	return nil
}

// args is a call's request body: the request it asks for, or why it is
// refused.
type args interface{ request() (*wire.Request, error) }

// parse is a call's parser: its body decoded into an A (decodeBody), then
// the request the A asks for.
func parse[A any, P interface {
	*A
	args
}](body io.Reader) (*wire.Request, error) {
	var a A
	if err := decodeBody(body, &a); err != nil {
		return nil, err
	}
	return P(&a).request()
}

// keyed is req, unless its key is one no lock can have: refused on any
// member (the leader checks again), so a follower answers 400 rather than
// a redirect. A new key (an acquire's) must keep the key rule; any other
// call may name a key stored before it, which only needs its length.
func keyed(req *wire.Request) (*wire.Request, error) {
	check := wire.ValidateStoredKey
	if req.Op == wire.OpAcquire {
		check = wire.ValidateKey
	}
	if err := check(req.Key); err != nil {
		return nil, err
	}
	req.ID = 1
	return req, nil
}

// bytesOf is the key (or after) a body names: text, or when b64 is given,
// the bytes it holds; giving both is refused, as ambiguous.
func bytesOf(field, text, b64 string) (string, error) {
	if b64 == "" {
		return text, nil
	}
	if text != "" {
		return "", fmt.Errorf("give %s or %s_b64, not both", field, field)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", fmt.Errorf("%s_b64 must be standard base64: %v", field, err)
	}
	return string(b), nil
}

func (a *acquireArgs) request() (*wire.Request, error) {
	if err := wire.ValidateOwner(a.Owner); err != nil {
		return nil, err
	}
	return keyed(&wire.Request{Op: wire.OpAcquire, Key: a.Key, LeaseMS: uint64(a.LeaseMS), WaitMS: uint64(a.WaitMS), Owner: a.Owner, Tag: uint64(a.Tag)})
}

func (a *tokenArgs) request() (*wire.Request, error) {
	if a.Force && a.Token != 0 {
		return nil, errors.New("a forced release takes no token: it ends the holder's, whatever it is")
	}
	key, err := bytesOf("key", a.Key, a.KeyB64)
	if err != nil {
		return nil, err
	}
	return keyed(&wire.Request{Op: wire.OpRelease, Key: key, Token: uint64(a.Token), Force: a.Force, Tag: uint64(a.Tag)})
}

func (a *renewArgs) request() (*wire.Request, error) {
	key, err := bytesOf("key", a.Key, a.KeyB64)
	if err != nil {
		return nil, err
	}
	return keyed(&wire.Request{Op: wire.OpRenew, Key: key, Token: uint64(a.Token), LeaseMS: uint64(a.LeaseMS), Tag: uint64(a.Tag)})
}

func (a *keyArgs) request() (*wire.Request, error) {
	key, err := bytesOf("key", a.Key, a.KeyB64)
	if err != nil {
		return nil, err
	}
	return keyed(&wire.Request{Op: wire.OpGet, Key: key})
}

func (a *listArgs) request() (*wire.Request, error) {
	after, err := bytesOf("after", a.After, a.AfterB64)
	if err != nil {
		return nil, err
	}
	return &wire.Request{ID: 1, Op: wire.OpList, Prefix: a.Prefix, After: after, Limit: uint64(a.Limit)}, nil
}

func (a *statusArgs) request() (*wire.Request, error) {
	return &wire.Request{ID: 1, Op: wire.OpStatus}, nil
}

func getAnswer(req *wire.Request, resp *wire.Response) any {
	b := getBody{Key: req.Key, KeyB64: wire.KeyB64(req.Key), Held: resp.Held, Token: resp.Token, RemainingMS: resp.RemainingMS}
	if resp.Held {
		b.Owner = &resp.Owner
	}
	return b
}

func listAnswer(_ *wire.Request, resp *wire.Response) any {
	b := listBody{Locks: resp.Locks, More: resp.More}
	if b.Locks == nil {
		b.Locks = []wire.Lock{} // an empty page is [], not null
	}
	if resp.More && len(resp.Locks) > 0 {
		b.Next = resp.Locks[len(resp.Locks)-1].Key
		b.NextB64 = wire.KeyB64(b.Next)
	}
	return b
}
