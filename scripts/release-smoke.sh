#!/usr/bin/env bash
# Checks a release archive as a user would use it: unpack the linux/amd64
# tarball of VERSION from dist/, verify it against SHA256SUMS, and run its
# binary: `raftlock version` must print VERSION, and `raftlock cluster` must
# come up and take a lock.
#
#   scripts/release-smoke.sh v0.1.0
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/release-smoke.sh VERSION}
name=raftlock-$version-linux-amd64
work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

(cd dist && grep " $name.tar.gz\$" SHA256SUMS | sha256sum --check --strict)
tar -xzf "dist/$name.tar.gz" -C "$work"
bin=$work/$name/raftlock
for f in README.md LICENSE deploy/raftlock.service; do
  test -f "$work/$name/$f" || { echo "release-smoke: $name lacks $f" >&2; exit 1; }
done
"$bin" version | tee "$work/version.txt"
head -1 "$work/version.txt" | grep -qx "raftlock $version" || { echo "release-smoke: version does not say $version" >&2; exit 1; }

# A cluster on ports away from the defaults, so a cluster a developer runs is not in the way.
(cd "$work" && exec "$bin" cluster --client-port 18701 --peer-port 18801 --http-port 18901 --api-port 18601 --data "$work/data" >"$work/cluster.log" 2>&1) &
pid=$!
eps=127.0.0.1:18701,127.0.0.1:18702,127.0.0.1:18703
for _ in $(seq 1 100); do
  if "$bin" acquire --endpoints "$eps" release-smoke-key --lease 5s >"$work/token" 2>/dev/null; then
    echo "release-smoke: $name's cluster granted token $(cat "$work/token")"
    exit 0
  fi
  sleep 0.2
done
echo "release-smoke: $name's cluster did not grant a lock within 20 s; its log:" >&2
tail -20 "$work/cluster.log" >&2
exit 1
