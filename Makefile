# raftlock build, test and verification targets.
GO ?= go
BIN := bin/raftlock
SEED ?= 1
CHAOS_DURATION ?= 30s

.PHONY: proto proto-tools proto-check build run test release release-smoke docker test-invariants lint fuzz chaos chaos-suite sim mutation bench bench-full peers python-grpc browser clean overload rolling

build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/raftlock

# Build, then run a local three-member cluster on the default ports until
# Ctrl-C (data in ./raftlock-data): make run CLUSTER_FLAGS="--nodes 5".
CLUSTER_FLAGS ?=
run: build
	$(BIN) cluster $(CLUSTER_FLAGS)

# The test suite CI runs: unit tests, in-process clusters over loopback TCP
# and real pebble directories, and an end-to-end test against built
# `raftlock node` processes, all under the race detector. The member core's
# tests check its invariants after every step in any build. Then the Python
# client's tests (python3 only, standard library) against `raftlock node`
# processes of the binary just built. The timeout is a backstop for a hung
# test, not a budget: beside other work on 2 cores the cmd/raftlock package
# alone takes over 9 minutes.
# With the core's own invariant checks on (internal/invariants) wherever
# tests run: they cost about 4 % of the member, fsm and node tests' time.
test:
	$(GO) test -race -tags invariants -timeout 20m ./...
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/raftlock
	RAFTLOCK_BIN=$(BIN) python3 -m unittest discover -s clients/python/tests -t clients/python -v

# The member core, its drivers and the simulator's tests with the core's own
# invariant checks on (internal/invariants): after every Ready and Advance.
test-invariants:
	$(GO) test -race -tags invariants -timeout 15m ./member/... ./node/... ./chaos/sim/...

# The gRPC API's generated Go code (proto/raftlock/v1), from
# proto/raftlock/v1/locks.proto with pinned tools: protoc from Debian's
# protobuf-compiler (installed when missing, as make peers installs etcd),
# protoc-gen-go and protoc-gen-go-grpc at the versions below in .bin/. The
# line naming protoc's version is dropped, so the output depends only on
# the pinned plugins. proto-check regenerates into a temporary directory and
# fails when the committed code differs (CI runs it).
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
PROTO_BIN := $(CURDIR)/.bin
PROTO_FILES := proto/raftlock/v1/locks.proto
PROTO_OUT ?= .

proto: proto-tools
	PATH="$(PROTO_BIN):$$PATH" protoc -I . \
	  --go_out=$(PROTO_OUT) --go_opt=paths=source_relative \
	  --go-grpc_out=$(PROTO_OUT) --go-grpc_opt=paths=source_relative \
	  $(PROTO_FILES)
	sed -i -e '/^\/\/ \tprotoc  *v/d' -e '/^\/\/ - protoc  *v/d' $(PROTO_OUT)/proto/raftlock/v1/*.pb.go

proto-tools:
	@command -v protoc >/dev/null || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y protobuf-compiler)
	@test -x $(PROTO_BIN)/protoc-gen-go && $(PROTO_BIN)/protoc-gen-go --version | grep -q ' $(PROTOC_GEN_GO_VERSION)$$' || \
	  GOBIN=$(PROTO_BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@test -x $(PROTO_BIN)/protoc-gen-go-grpc && $(PROTO_BIN)/protoc-gen-go-grpc --version | grep -q ' $(patsubst v%,%,$(PROTOC_GEN_GO_GRPC_VERSION))$$' || \
	  GOBIN=$(PROTO_BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

proto-check: proto-tools
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  $(MAKE) --no-print-directory proto PROTO_OUT=$$tmp >/dev/null && \
	  diff -ru proto/raftlock/v1 $$tmp/proto/raftlock/v1 -x '*.proto' -x doc.go || \
	  (echo "proto-check: the generated code in proto/raftlock/v1 is stale: run make proto and commit it" && false)

lint:
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: files above need formatting" && false)
	$(GO) vet ./...

# 2000 clients, each with its own connections, against three `raftlock node`
# processes with low waiter and key limits (about a minute): every member
# stays up under 512 MiB resident, and clients answered overloaded succeed
# later. Then issue 37's cases, one client against everyone (about four
# minutes more): idle and greeted connection floods, one identity's
# watches, a member out of file descriptors, slow HTTP bodies and gRPC
# keep-alives, each beside another identity's calls. Figures:
# results/overload.md.
overload:
	$(GO) test -count=1 -run TestOverload -v -timeout 15m ./cmd/raftlock -args -overload

# A SIGTERM rolling restart under 16 clients, five times: the numbers of
# results/rolling-restart.md.
rolling:
	$(GO) test -count=5 -run TestRollingRestartWithSIGTERMFailsNoCall -v -timeout 10m ./cmd/raftlock | grep -E 'rolling restart:|^(---|ok|FAIL)'

# A short fuzzing pass over every decoder.
fuzz:
	$(GO) test ./fsm -run XXX -fuzz FuzzDecodeBatch -fuzztime 20s
	$(GO) test ./fsm -run XXX -fuzz FuzzRestore -fuzztime 20s
	$(GO) test ./client/wire -run XXX -fuzz FuzzDecodeRequest -fuzztime 20s
	$(GO) test ./client/wire -run XXX -fuzz FuzzDecodeResponse -fuzztime 20s
	$(GO) test ./member -run XXX -fuzz 'FuzzStep$$' -fuzztime 20s
	$(GO) test ./member -run XXX -fuzz FuzzStepUnknownSender -fuzztime 20s
	$(GO) test ./member -run XXX -fuzz FuzzDecodeBackup -fuzztime 20s
	$(GO) test ./node/peer -run XXX -fuzz FuzzDecodeSnapshotHeader -fuzztime 20s
	$(GO) test ./node/peer -run XXX -fuzz FuzzDecodeChunk -fuzztime 20s
	$(GO) test ./node/peer -run XXX -fuzz FuzzDecodeReply -fuzztime 20s
	$(GO) test ./node/peer -run XXX -fuzz FuzzReadAPIAnnouncement -fuzztime 20s
	$(GO) test ./node/httpapi -run XXX -fuzz FuzzParseBody -fuzztime 20s
	$(GO) test ./node/grpcapi -run XXX -fuzz FuzzRequests -fuzztime 20s
	$(GO) test ./internal/procstat -run XXX -fuzz FuzzParse -fuzztime 20s
	$(GO) test ./node/logstore -run XXX -fuzz FuzzDecodeSeal -fuzztime 20s

# One seeded chaos run: make chaos SEED=7 CHAOS_DURATION=60s
chaos: build
	$(BIN) chaos --seed $(SEED) --duration $(CHAOS_DURATION)

# The short suite CI runs: three seeds, every nemesis family (kill, pause,
# partition, clock, net, snapshot), snapshots on (--snapshot-every 100).
chaos-suite: build
	for s in 101 102 103; do $(BIN) chaos --seed $$s --duration $(CHAOS_DURATION) --out chaos-out/suite-$$s || exit $$?; done

# The deterministic simulator: a swarm of seeds (SIM_SEEDS, default
# 1..1000), each 10 s of simulated time of a three-member cluster under
# every fault family, in subprocesses on every CPU; about 2 minutes on 2
# cores (results/sim.md). Replay a failing seed with the command it prints.
SIM_SEEDS ?= 1..1000
SIM_DURATION ?= 10s
sim: build
	$(BIN) sim --seeds $(SIM_SEEDS) --duration $(SIM_DURATION)

# Every planted bug over a fixed set of seeds: each must be caught.
mutation: build
	scripts/mutation.sh $(BIN)

clean:
	rm -rf bin chaos-out mutation-out sim-out dist

# Debian's etcd-server (3.4) and redis-server (7.0), the benchmark's peers,
# and nats-server (2.9.10), chaos --target nats's. Debian's nats-server has
# no sync_interval (chaos --nats-sync always needs it) and races two updates
# at one revision of a replicated key-value bucket, so NATS_SERVER_VERSION
# (the release Jepsen analysed in December 2025) is built from the Go module
# proxy into bin/peers/nats-server too: chaos --nats-server bin/peers/nats-server.
NATS_SERVER_VERSION := v2.12.1
peers:
	command -v etcd >/dev/null && command -v redis-server >/dev/null && command -v nats-server >/dev/null || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server redis-server nats-server)
	@test -x bin/peers/nats-server && bin/peers/nats-server --version | grep -q ' $(NATS_SERVER_VERSION)$$' || \
	  GOBIN=$(CURDIR)/bin/peers $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)

# Debian's grpcio and protobuf for Python, and protoc: a stock grpcio stub's
# test (cmd/raftlock TestStockClientsThroughAFollower) calls a follower with
# them; without them that half skips, saying so.
python-grpc:
	/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null && command -v protoc >/dev/null || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-grpcio python3-protobuf protobuf-compiler)

# Debian's chromium, in which the web console's test (node/console
# TestConsoleInABrowser) loads a cluster's console; without it that test
# skips. Its screenshot goes to $RAFTLOCK_SCREENSHOT_DIR, else
# node/console/testdata/out/.
browser:
	command -v chromium >/dev/null || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

# A quick benchmark (about 4 minutes): raftlock against etcd and Redis at 1,
# 64 and 256 clients. Peers that are not installed are skipped with a note. The
# second line is the TLS-on point (mutual TLS 1.3 on every port, fresh
# certificates), to compare with latest/'s 64-client uncontended run.
bench: build
	$(BIN) bench --clients 1,64,256 --workload uncontended,contended --compare etcd,redis \
	  --duration 5s --out results/bench/latest
	$(BIN) bench --clients 64 --tls --duration 5s --out results/bench/latest-tls

# Everything: clients 1..256, every workload, every peer, and the ablations.
bench-full: build
	$(BIN) bench --clients 1,4,16,64,256 --workload uncontended,contended,mixed --compare etcd,redis \
	  --duration 10s --out results/bench/full
	$(BIN) bench --clients 64 --no-batch --duration 10s --out results/bench/ablation-no-batch
	$(BIN) bench --clients 64 --max-inflight 1 --duration 10s --out results/bench/ablation-max-inflight-1
	$(BIN) bench --clients 64 --workload contended --no-handoff --duration 10s --out results/bench/ablation-no-handoff
	$(BIN) bench --clients 64 --no-write-overlap --duration 10s --out results/bench/ablation-no-write-overlap

# Release archives: make release VERSION=v0.1.0 writes dist/raftlock-VERSION-OS-ARCH.tar.gz
# (static binaries, CGO off, for RELEASE_TARGETS: linux/amd64 linux/arm64
# darwin/arm64 darwin/amd64 by default) with the README, the LICENSE and
# deploy/, and dist/SHA256SUMS. release-smoke unpacks the linux/amd64 one,
# checks its sum and runs its `version` and `cluster`.
VERSION ?=
release:
	scripts/release.sh $(VERSION)

release-smoke:
	scripts/release-smoke.sh $(VERSION)

# The container image (static binary on distroless); only where docker is
# installed, never in CI.
docker:
	@command -v docker >/dev/null || (echo "docker: not installed; the image is built only where docker exists" && false)
	docker build -t raftlock:$(or $(VERSION),dev) --build-arg VERSION=$(VERSION) .
