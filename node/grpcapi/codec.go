package grpcapi

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/raftlock/raftlock/client/wire"
)

// A request message that does not decode (not protobuf, or a string field
// that is not UTF-8, which proto3 refuses: a key breaking the key rule
// sent by a client that does not check it) would be answered by grpc-go
// itself, INTERNAL and without the Error detail, before any handler or
// interceptor runs. The API's codec instead leaves such a message empty
// but for a mark, an unknown field numbered refusalField holding why, and
// every handler first asks refused: INVALID_ARGUMENT with the detail, as
// any bad input is answered.

// refusalField is the number of the mark's field: the highest a field
// may have, which no message of the schema will use.
const refusalField = protowire.MaxValidNumber

// codec is the proto codec, but for the mark above. A message that
// decodes has its unknown fields dropped (the API reads none), so that the
// only mark a handler sees is the codec's own.
type codec struct{ encoding.CodecV2 }

// newCodec is the codec around grpc-go's registered proto codec.
func newCodec() codec { return codec{encoding.GetCodecV2(protoenc.Name)} }

// Unmarshal decodes data into v, or marks v with why it does not decode.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		why := undecodable(data.Materialize(), m.ProtoReflect().Descriptor(), err)
		proto.Reset(m)
		mark := protowire.AppendTag(nil, refusalField, protowire.BytesType)
		m.ProtoReflect().SetUnknown(protowire.AppendString(mark, why))
		return nil
	}
	m.ProtoReflect().SetUnknown(nil)
	return nil
}

// undecodable says why b does not decode as a message of md, which failed
// with err: the first string field that is not UTF-8 (for a key, the key
// rule's own message), or the decoder's error.
func undecodable(b []byte, md protoreflect.MessageDescriptor, err error) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			break
		}
		if fd := md.Fields().ByNumber(num); typ == protowire.BytesType && fd != nil && fd.Kind() == protoreflect.StringKind {
			if v, _ := protowire.ConsumeBytes(b); !utf8.Valid(v) {
				if fd.Name() == "key" {
					return wire.ErrKeyNotText.Error()
				}
				return fmt.Sprintf("%s must be valid UTF-8", fd.Name())
			}
		}
		b = b[n:]
	}
	return "malformed request message: " + err.Error()
}

// refused is why the codec could not decode m, nil when it did.
func refused(m proto.Message) error {
	for u := m.ProtoReflect().GetUnknown(); len(u) > 0; {
		num, typ, n := protowire.ConsumeTag(u)
		if n < 0 {
			return nil
		}
		u = u[n:]
		if num == refusalField && typ == protowire.BytesType {
			why, _ := protowire.ConsumeBytes(u)
			return errors.New(string(why))
		}
		if n = protowire.ConsumeFieldValue(num, typ, u); n < 0 {
			return nil
		}
		u = u[n:]
	}
	return nil
}
