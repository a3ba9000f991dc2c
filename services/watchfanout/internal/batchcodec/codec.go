package batchcodec

import (
	"errors"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec Codec defers to
	"google.golang.org/grpc/mem"
)

// ErrSent: a Message was marshalled twice, or after it was released.
var ErrSent = errors.New("batchcodec: message already sent or released")

// Message is one pre-encoded message: Codec hands its buffer to gRPC,
// which returns it to its pool once written. A Message is reusable:
// Builder.Finish fills it again after the send.
type Message struct {
	buf  *[]byte
	pool mem.BufferPool
}

// Len is the encoded size; 0 once sent.
func (m *Message) Len() int {
	if m.buf == nil {
		return 0
	}
	return len(*m.buf)
}

// Bytes are the encoded message (for tests); nil once sent.
func (m *Message) Bytes() []byte {
	if m.buf == nil {
		return nil
	}
	return *m.buf
}

// Release returns the buffer to its pool when the message was never
// marshalled (the send failed before gRPC took it); after a marshal it
// does nothing.
func (m *Message) Release() {
	if m.buf != nil {
		m.pool.Put(m.buf)
		m.buf = nil
	}
}

// take hands the buffer over: the message is empty afterwards.
func (m *Message) take() (mem.BufferSlice, error) {
	if m.buf == nil {
		return nil, ErrSent
	}
	b := m.buf
	m.buf = nil
	// Below gRPC's pooling threshold NewBuffer wraps the slice without
	// the pool; the buffer is then left to the garbage collector.
	return mem.BufferSlice{mem.NewBuffer(b, m.pool)}, nil
}

// Codec is the gRPC codec of the watchfanout server: a *Message is sent
// as it is encoded; every other message (requests, List and Get
// responses, health) goes through gRPC's proto codec. Install it with
// grpc.ForceServerCodecV2; clients need nothing, the bytes are ordinary
// protobuf.
type Codec struct {
	proto encoding.CodecV2
}

var _ encoding.CodecV2 = (*Codec)(nil)

// NewCodec returns the codec.
func NewCodec() (*Codec, error) {
	c := encoding.GetCodecV2("proto")
	if c == nil {
		return nil, errors.New("batchcodec: gRPC's proto codec is not registered")
	}
	return &Codec{proto: c}, nil
}

// Marshal hands a *Message's buffer to gRPC (without a copy) or marshals
// any other message with the proto codec.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*Message); ok {
		return m.take()
	}
	return c.proto.Marshal(v)
}

// Unmarshal is the proto codec's.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// Name is "proto": what is on the wire is protobuf.
func (c *Codec) Name() string { return "proto" }
