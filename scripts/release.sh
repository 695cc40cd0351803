#!/usr/bin/env bash
# Builds the release archives of raftlock VERSION into dist/: for each
# target a static binary (CGO off) in raftlock-VERSION-OS-ARCH.tar.gz with
# the README, the LICENSE and deploy/, then SHA256SUMS over the archives.
#
#   scripts/release.sh v0.1.0
#   RELEASE_TARGETS="linux/amd64" scripts/release.sh v0.1.0   # one target
#
# The archives are reproducible from the same commit and Go version: the
# binaries are built with -trimpath, and the tarballs carry fixed owners,
# sorted names and the commit's time.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:-}
if ! [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: VERSION must look like v1.2.3 or v1.2.3-rc.1, got '${version}' (make release VERSION=v0.1.0)" >&2
  exit 2
fi
targets=${RELEASE_TARGETS:-linux/amd64 linux/arm64 darwin/arm64 darwin/amd64}
GO=${GO:-go}
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p dist
rm -f dist/raftlock-"$version"-*.tar.gz dist/SHA256SUMS

for target in $targets; do
  os=${target%/*} arch=${target#*/}
  name=raftlock-$version-$os-$arch
  echo "release: building $name"
  mkdir -p "$stage/$name"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -buildvcs=auto \
    -ldflags "-s -w -X main.releaseVersion=$version" -o "$stage/$name/raftlock" ./cmd/raftlock
  cp README.md LICENSE "$stage/$name/"
  cp -r deploy "$stage/$name/deploy"
  tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    -C "$stage" -cf - "$name" | gzip -n > "dist/$name.tar.gz"
done

(cd dist && sha256sum raftlock-"$version"-*.tar.gz > SHA256SUMS)
echo "release: dist/SHA256SUMS"
cat dist/SHA256SUMS
