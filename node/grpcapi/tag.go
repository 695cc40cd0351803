package grpcapi

import (
	"context"
	"strconv"

	"google.golang.org/grpc/metadata"
)

// TagHeader is the metadata key with which a caller tags a call that
// changes a lock (Acquire, Renew, Release) with an operation id, which
// the member records with the command in its log (GET /debug/log), as
// the HTTP/JSON API's "tag" field and the client protocol's Tag do: for
// audits such as the chaos harness's, which finds each call of its
// history in the log by it. The schema leaves it out (it describes no
// lock); a value that is not a decimal uint64 is ignored.
const TagHeader = "raftlock-tag"

// tagOf is the tag of the call whose incoming context is ctx, 0 for none.
func tagOf(ctx context.Context) uint64 {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(TagHeader); len(v) == 1 {
		if tag, err := strconv.ParseUint(v[0], 10, 64); err == nil {
			return tag
		}
	}
	return 0
}
