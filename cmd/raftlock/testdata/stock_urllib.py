"""Acquire, renew and release a lock with Python's standard urllib alone,
against the HTTP/JSON API of whatever member is named: no redirect
handling (urllib does not follow a 307 on a POST). Usage: stock_urllib.py
HOST:PORT KEY. Prints the token; exits non-zero on any failure."""
import json
import sys
import urllib.request


def call(addr, path, body):
    req = urllib.request.Request("http://%s/v1/%s" % (addr, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


addr, key = sys.argv[1], sys.argv[2]
grant = call(addr, "acquire", {"key": key, "lease_ms": 30000})
token = grant["token"]
call(addr, "renew", {"key": key, "token": token, "lease_ms": 30000})
held = call(addr, "get", {"key": key})
assert held["held"] and held["token"] == token, held
call(addr, "release", {"key": key, "token": token})
assert not call(addr, "get", {"key": key})["held"]
print(token)
