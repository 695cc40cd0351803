# raftlock's container image: the static binary (CGO off) on distroless,
# running as a non-root user. Built only where docker exists (make docker);
# CI does not build it.
#
#   docker build -t raftlock --build-arg VERSION=v0.1.0 .
#   docker run --rm raftlock version
FROM golang:1.26 AS build
ARG VERSION=
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.releaseVersion=${VERSION}" -o /raftlock ./cmd/raftlock

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /raftlock /usr/local/bin/raftlock
# Client, peer, HTTP and API ports of `raftlock node` as the README runs it.
EXPOSE 8001 7001 9001 10001
VOLUME ["/data"]
ENTRYPOINT ["/usr/local/bin/raftlock"]
CMD ["--help"]
