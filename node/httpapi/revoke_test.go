package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node/nodetest"
)

// An open watch whose identity the ACL no longer lets read its prefix
// ends with a permission-denied error event within a second of the
// reload (issue 37, finding 7: alice's watches went on receiving events
// after she was removed).
func TestWatchEndsWhenTheACLRevokesIt(t *testing.T) {
	m := nodetest.StartTLSMember(t, `{"rules":[
		{"identity":"alice","prefixes":["a/"],"rights":["lock","read"]},
		{"identity":"bob","prefixes":["b/"],"rights":["lock","read"]}]}`, "alice", "bob")
	alice := &http.Client{Transport: &http.Transport{TLSClientConfig: m.ClientTLS(t, "alice"), ForceAttemptHTTP2: true}}
	url := "https://" + m.API
	nodetest.WaitFor(t, 10*time.Second, "the member to lead", func() bool {
		return post(t, alice, url+"/v1/acquire", `{"key":"a/x","lease_ms":10000}`).code == http.StatusOK
	})
	s := openWatch(t, alice, url+"/v1/watch?prefix=a/")
	post(t, alice, url+"/v1/acquire", `{"key":"a/y","lease_ms":10000}`).expect(t, "acquire by alice", 200, nil, nil)
	if name, ev := s.next(t); name != "" || ev["key"] != "a/y" {
		t.Fatalf("alice's watch: %q %v, want the acquire of a/y", name, ev)
	}
	stop := time.AfterFunc(10*time.Second, func() { s.resp.Body.Close() }) // a stream that never ends fails the test
	defer stop.Stop()
	start := time.Now()
	m.SetACL(t, `{"rules":[{"identity":"bob","prefixes":["b/"],"rights":["lock","read"]}]}`)
	name, ev := s.next(t)
	if took := time.Since(start); name != "error" || ev["error"] != "permission-denied" || ev["message"] == "" || took > time.Second {
		t.Fatalf("alice's watch after the ACL removed her: %q %v after %v, want a permission-denied error event within 1s", name, ev, took)
	}
}
