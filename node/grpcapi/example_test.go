package grpcapi_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	raftlockv1 "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// A Go program's calls to a member's gRPC API (docs/grpc-api.md prints
// this code and its output against raftlock cluster --api-port 21301):
// an acquire, the error of a second one, a keep-alive ended by the
// client, a release.
func Example_client() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("127.0.0.1:21301", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	locks := raftlockv1.NewLocksClient(conn)

	got, err := locks.Acquire(ctx, &raftlockv1.AcquireRequest{Key: "jobs/nightly", LeaseMs: 30000, Owner: "ci-42"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired", got.Key, "token", got.Token)

	// A second acquire: held.
	_, err = locks.Acquire(ctx, &raftlockv1.AcquireRequest{Key: "jobs/nightly", LeaseMs: 30000})
	st := status.Convert(err)
	fmt.Println(st.Code(), st.Message())
	for _, d := range st.Details() {
		if e, ok := d.(*raftlockv1.Error); ok {
			fmt.Println("name:", e.Name) // and e.LeaderApi when a follower answered
		}
	}

	// Keep the lock alive while the job runs: Recv fails the moment it is lost.
	ka, err := locks.KeepAlive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	ka.Send(&raftlockv1.KeepAliveRequest{Key: got.Key, Token: got.Token, LeaseMs: 30000})
	r, err := ka.Recv()
	fmt.Println("renewed", r.GetKey(), "for", r.GetLeaseMs(), "ms", err)
	ka.CloseSend() // the job is done: stop renewing
	for err == nil {
		_, err = ka.Recv()
	}
	fmt.Println("keep-alive ended:", err) // io.EOF: ended by us

	_, err = locks.Release(ctx, &raftlockv1.ReleaseRequest{Key: got.Key, Token: got.Token})
	fmt.Println("released:", err)
}
