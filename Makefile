# raftlock build, test and verification targets.
GO ?= go
BIN := bin/raftlock

.PHONY: build test test-short lint fuzz chaos mutation bench bench-full peers clean

build:
	$(GO) build -o $(BIN) ./cmd/raftlock

# The test suite CI runs: unit and in-process cluster tests under the race
# detector, plus end-to-end tests against built binaries.
test:
	$(GO) test -race -timeout 9m ./...

lint:
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: files above need formatting" && false)
	$(GO) vet ./...

# A short fuzzing pass over every decoder.
fuzz:
	$(GO) test ./fsm -run XXX -fuzz FuzzDecodeBatch -fuzztime 20s
	$(GO) test ./fsm -run XXX -fuzz FuzzRestore -fuzztime 20s

clean:
	rm -rf bin
