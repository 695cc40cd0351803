package grpcapi

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Decode decodes data into m as the API's codec does: an error only for
// what is no message at all; a message that does not decode is marked,
// for the handlers to refuse.
func Decode(data []byte, m proto.Message) error {
	return newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, m)
}
