"""Acquire, renew and release a lock with a stock grpcio stub (the
messages protoc generated from locks.proto, on PYTHONPATH), against
whatever member is named: no leader-following code. Usage: stock_grpc.py
HOST:PORT KEY. Prints the token; exits non-zero on any failure."""
import sys

import grpc
from raftlock.v1 import locks_pb2 as pb

addr, key = sys.argv[1], sys.argv[2]
channel = grpc.insecure_channel(addr)


def rpc(name, req, resp):
    # What a generated stub does: one unary method of raftlock.v1.Locks.
    return channel.unary_unary("/raftlock.v1.Locks/" + name, request_serializer=req.SerializeToString,
                               response_deserializer=resp.FromString)(req, timeout=10)


grant = rpc("Acquire", pb.AcquireRequest(key=key, lease_ms=30000), pb.AcquireResponse)
rpc("Renew", pb.RenewRequest(key=key, token=grant.token, lease_ms=30000), pb.RenewResponse)
held = rpc("Get", pb.GetRequest(key=key), pb.GetResponse)
assert held.held and held.token == grant.token, held
rpc("Release", pb.ReleaseRequest(key=key, token=grant.token), pb.ReleaseResponse)
assert not rpc("Get", pb.GetRequest(key=key), pb.GetResponse).held
print(grant.token)
