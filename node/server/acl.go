package server

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/tlsconfig"
)

// Rights an ACL rule grants.
const (
	RightLock  = "lock"  // acquire, renew, release
	RightRead  = "read"  // get, list (on the listed prefix)
	RightAdmin = "admin" // status, release --force, and the HTTP endpoints
)

// Rule gives one identity (a client certificate's common name) rights on
// the keys that start with one of its prefixes ("" is every key).
type Rule struct {
	Identity string   `json:"identity"`
	Prefixes []string `json:"prefixes"`
	Rights   []string `json:"rights"`
}

// ACL maps identities to rights on key prefixes. A request is allowed when
// any rule of its identity grants its right on a prefix of its key; an
// identity with no rule may do nothing. Admin is scoped like the other
// rights: admin on "jobs/" forces the release of keys under "jobs/" only.
// What is about the whole cluster (status, membership, leader transfer,
// snapshot save, the HTTP port's endpoints) needs admin on the whole key
// space: a rule granting admin on the prefix "". The file format is
// {"rules":[{"identity":"batch","prefixes":["jobs/"],"rights":["lock","read"]}]}.
type ACL struct {
	Rules []Rule `json:"rules"`
}

// LoadACL reads and checks an ACL file.
func LoadACL(path string) (*ACL, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read ACL: %w", err)
	}
	return ParseACL(b, path)
}

// ParseACL parses an ACL; name is used in errors.
func ParseACL(b []byte, name string) (*ACL, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var a ACL
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("ACL %s: %w", name, err)
	}
	if a.Rules == nil {
		return nil, fmt.Errorf("ACL %s: no \"rules\" list", name)
	}
	for i, r := range a.Rules {
		if r.Identity == "" {
			return nil, fmt.Errorf("ACL %s: rule %d has no identity", name, i+1)
		}
		if len(r.Prefixes) == 0 {
			return nil, fmt.Errorf("ACL %s: rule %d (%s) has no prefixes (\"\" is every key)", name, i+1, r.Identity)
		}
		if len(r.Rights) == 0 {
			return nil, fmt.Errorf("ACL %s: rule %d (%s) grants no rights", name, i+1, r.Identity)
		}
		for _, right := range r.Rights {
			if right != RightLock && right != RightRead && right != RightAdmin {
				return nil, fmt.Errorf("ACL %s: rule %d (%s): unknown right %q (want lock, read or admin)", name, i+1, r.Identity, right)
			}
		}
	}
	return &a, nil
}

// Allows reports whether identity has right on key: a rule of identity
// grants right on a prefix of key.
func (a *ACL) Allows(identity, right, key string) bool {
	for _, r := range a.Rules {
		if r.Identity != identity || !contains(r.Rights, right) {
			continue
		}
		for _, p := range r.Prefixes {
			if strings.HasPrefix(key, p) {
				return true
			}
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// auth is a server's access control: the ACL in force, swapped by SetACL.
// With none, every client that got through the TLS handshake may do
// everything.
type auth struct {
	acl atomic.Pointer[ACL]
}

// SetACL puts a in force for every request from now on (nil: none).
// Open watches it no longer allows end with a permission error.
func (s *Server) SetACL(a *ACL) {
	s.auth.acl.Store(a)
	s.recheckWatches(a)
}

// identity is a connection's client identity (Identity), "" over plain
// TCP.
func identity(c net.Conn) string {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return ""
	}
	cs := tc.ConnectionState()
	return Identity(&cs)
}

// Identity is the client identity the ACL knows a TLS client by: its
// certificate's (tlsconfig.Identity), "" without TLS (cs nil) or without a
// certificate. The client port and every HTTP port derive it here.
func Identity(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return ""
	}
	return tlsconfig.Identity(cs.PeerCertificates[0])
}

// refuse answers a request the ACL does not allow, nil when it may go on.
// A client that did not announce FeaturePermissionDenied gets OpError,
// which every client version prints.
func (s *Server) refuse(who string, features uint64, req *wire.Request) *wire.Response {
	a := s.auth.acl.Load()
	if a == nil {
		return nil
	}
	right, what, key := permission(req)
	if req.Op == wire.OpAdmin || req.Op == wire.OpStatus {
		// About the whole cluster: admin on every key (ACL), whatever
		// the command's name, which is not a key.
		key = ""
	}
	if a.Allows(who, right, key) || (req.Op == wire.OpStatus && isMember(who)) {
		return nil
	}
	return s.refusal(who, features, req.ID, right, what, req.Key)
}

// refusal is the answer to request id, refused by the ACL: who may not
// what, which needs right on key.
func (s *Server) refusal(who string, features, id uint64, right, what, key string) *wire.Response {
	reason := fmt.Sprintf("identity %q may not %s", who, what)
	s.log.Info("request refused by the ACL", "identity", who, "right", right, "key", key)
	s.node.Metrics().ClientRequests.WithLabelValues(right, "permission_denied").Inc()
	if features&wire.FeaturePermissionDenied != 0 {
		return &wire.Response{ID: id, Op: wire.OpPermissionDenied, Reason: reason}
	}
	return &wire.Response{ID: id, Op: wire.OpError, Reason: "permission denied: " + reason}
}

// permission names the right req needs, on which key (a list's prefix),
// and what it does, for a refusal's reason.
func permission(req *wire.Request) (right, what, key string) {
	switch req.Op {
	case wire.OpRelease:
		if req.Force {
			return RightAdmin, fmt.Sprintf("force the release of %q", req.Key), req.Key
		}
		return RightLock, fmt.Sprintf("lock %q", req.Key), req.Key
	case wire.OpAcquire, wire.OpRenew:
		return RightLock, fmt.Sprintf("lock %q", req.Key), req.Key
	case wire.OpGet:
		return RightRead, fmt.Sprintf("read %q", req.Key), req.Key
	case wire.OpList:
		return RightRead, fmt.Sprintf("list %q", req.Prefix), req.Prefix
	case wire.OpAdmin:
		return RightAdmin, fmt.Sprintf("run %q", req.Key), req.Key
	}
	return RightAdmin, "ask for status", req.Key
}

// isMember says whether who is a member certificate's identity
// (member-N). A member may ask another for its status without an ACL rule,
// as a member's console does for the members table: members already trust
// each other with the whole log, and a status carries no key.
func isMember(who string) bool {
	n, ok := strings.CutPrefix(who, "member-")
	id, err := strconv.ParseUint(n, 10, 64)
	return ok && err == nil && id > 0
}

// MayRead says whether identity who may read key (get, list, watch), as
// the client port judges it: always when no ACL is in force.
func (s *Server) MayRead(who, key string) bool {
	a := s.auth.acl.Load()
	return a == nil || a.Allows(who, RightRead, key)
}

// ReadPrefixes are the key prefixes identity who may read, nil when no
// ACL is in force (every key). A console offers them to an identity that
// may not read every key.
func (s *Server) ReadPrefixes(who string) []string {
	a := s.auth.acl.Load()
	if a == nil {
		return nil
	}
	ps := []string{}
	for _, r := range a.Rules {
		if r.Identity == who && contains(r.Rights, RightRead) {
			ps = append(ps, r.Prefixes...)
		}
	}
	return ps
}

// RequireAdmin lets through only HTTP requests whose client certificate's
// identity has the admin right, when an ACL is in force: on some prefix
// for the console, /metrics, /status and /healthz (they show no key the
// identity may not read: the console filters its locks by the read
// right), on the whole key space for /debug/ (profiles, and the audit
// journal under fault injection, show every key).
func (s *Server) RequireAdmin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := s.auth.acl.Load(); a != nil {
			who := Identity(r.TLS)
			if strings.HasPrefix(r.URL.Path, "/debug/") {
				if !a.Allows(who, RightAdmin, "") {
					http.Error(w, fmt.Sprintf("permission denied: identity %q has no admin right on the whole key space (a rule with the prefix \"\")", who), http.StatusForbidden)
					return
				}
			} else if !a.grants(who, RightAdmin) {
				http.Error(w, fmt.Sprintf("permission denied: identity %q has no admin right", who), http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// grants says whether any rule of identity grants right, on any prefix.
func (a *ACL) grants(identity, right string) bool {
	for _, r := range a.Rules {
		if r.Identity == identity && contains(r.Rights, right) {
			return true
		}
	}
	return false
}

// tellTLSRequired answers, in plain text, a client that sent its greeting
// to a TLS port without TLS, so it says so at once instead of retrying.
func tellTLSRequired(err error) {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) && rh.Conn != nil {
		rh.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(rh.Conn, wire.TLSRequired)
	}
}
