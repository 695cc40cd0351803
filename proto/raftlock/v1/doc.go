// Package raftlockv1 is the generated Go code of raftlock's gRPC API,
// service raftlock.v1.Locks (locks.proto beside it; docs/grpc-api.md says
// how to call it): the messages (locks.pb.go) and the client and server
// stubs (locks_grpc.pb.go). Do not edit the generated files: change
// locks.proto and run make proto, which regenerates them with pinned
// tools; make proto-check (run by CI) fails when they are stale.
package raftlockv1
