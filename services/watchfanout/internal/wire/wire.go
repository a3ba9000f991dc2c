// Package wire encodes watch responses by hand, straight into buffers from
// a gRPC buffer pool, and sends them through a gRPC codec that passes the
// bytes on as they are.
//
// Why: in a relist storm the tier sends hundreds of thousands of batches.
// Marshalling each through the proto codec costs a WatchResponse, a
// WatchManyResponse and a resourceVersion string per batch (garbage that
// set the pace of the garbage collector, whose headroom was most of the
// storm's peak memory) and a copy of every batch. With this package a
// batch's frames are copied once, into the buffer gRPC writes to the
// socket, and nothing is allocated per message.
//
// # Encoding
//
// A batch is a meridian.watch.v1.WatchResponse (Watch) or a
// WatchManyResponse carrying one (WatchMany), in canonical field order:
//
//	WatchManyResponse  08 <id>  12 <len(WatchResponse)>  WatchResponse
//	WatchResponse      0a <len(frames)> frames  [12 <len(rv)> rv]
//
// The builder reserves room for the header in front of the frames, sized
// for 3-byte lengths (batches of 16 KiB to 2 MiB, the storm's), and writes
// it in place when the batch is that size. Other batches are copied into
// a buffer of their own size, so that a small message queued in gRPC does
// not pin a 32 KiB buffer.
//
// # Buffer lifetime
//
// gRPC's SendMsg on a server stream returns once the message is queued for
// the connection's writer, before its bytes reach the socket: the
// transport takes a reference to the encoded buffers (http2Server.write
// calls Ref) and its writer frees them once written (or when the stream is
// reset); SendMsg frees its own reference on return. A buffer handed to
// gRPC through Codec therefore goes back to its pool only when both are
// done with it — the builder never touches it again.
package wire

import (
	"errors"
	"strconv"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec Codec defers to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// ErrSent: a Message was marshalled twice, or after it was released.
var ErrSent = errors.New("wire: message already sent or released")

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
		return nil, errors.New("wire: gRPC's proto codec is not registered")
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

// Field tags (field number << 3 | wire type) of the messages built.
const (
	tagManyID       = 1<<3 | byte(protowire.VarintType) // WatchManyResponse.id
	tagManyResponse = 2<<3 | byte(protowire.BytesType)  // WatchManyResponse.response
	tagFrames       = 1<<3 | byte(protowire.BytesType)  // WatchResponse.frames
	tagRV           = 2<<3 | byte(protowire.BytesType)  // WatchResponse.resource_version
)

// maxRVField bounds the resource_version field: tag, length, 19 digits.
const maxRVField = 1 + 1 + 19

// Builder encodes one watch's batches. The zero value is not usable; see
// NewBuilder. A Builder belongs to one goroutine at a time.
type Builder struct {
	pool    mem.BufferPool
	many    bool
	id      int64
	reserve int // header room in front of the frames in buf
	hint    int // bytes of frames a batch usually grows to

	first  []byte  // the only frame so far, not copied yet
	buf    *[]byte // from pool, once there are two frames: header room, then the frames
	frames int     // frames added
	n      int     // bytes of frames
}

// NewBuilder returns a builder of WatchResponses (many false: a Watch
// stream) or of WatchManyResponses of watch id, with buffers from pool.
// hint is the bytes of frames a batch usually grows to (the batch limit):
// the buffer a batch of several frames is built in has room for that
// many, so that it never grows in between.
func NewBuilder(pool mem.BufferPool, many bool, id int64, hint int) Builder {
	b := Builder{pool: pool, many: many, id: id, hint: hint}
	b.reserve = b.headerLen(1<<14, 1<<14) // lengths of 3 bytes
	return b
}

// Len is the bytes of frames added since the last Finish.
func (b *Builder) Len() int { return b.n }

// Add appends a frame. The frame is not retained past Finish or Reset.
func (b *Builder) Add(frame []byte) {
	if b.frames == 0 {
		b.first = frame
	} else {
		b.grow(len(frame))
		*b.buf = append(*b.buf, frame...)
	}
	b.frames++
	b.n += len(frame)
}

// errFrameSize: AddAppend's appendFrame did not append the size given.
var errFrameSize = errors.New("wire: frame not of the size given")

// AddAppend appends a frame of n bytes that appendFrame appends to the
// slice it is given (and returns, as append does): a frame written
// straight into the batch (spliced from an object's stored bytes), copied
// once and kept nowhere else. appendFrame must append exactly n bytes;
// otherwise nothing is added and AddAppend returns an error.
func (b *Builder) AddAppend(n int, appendFrame func([]byte) []byte) error {
	b.grow(n)
	before := len(*b.buf)
	out := appendFrame(*b.buf)
	if len(out)-before != n {
		*b.buf = (*b.buf)[:before]
		return errFrameSize
	}
	*b.buf = out
	b.frames++
	b.n += n
	return nil
}

// grow makes room in buf for a frame of n bytes (and the resourceVersion
// field), moving a first frame there.
func (b *Builder) grow(n int) {
	switch {
	case b.buf == nil:
		b.buf = b.get(b.reserve + max(b.hint, b.n+n) + maxRVField)
		*b.buf = append((*b.buf)[:b.reserve], b.first...)
		b.first = nil
	case len(*b.buf)+n+maxRVField > cap(*b.buf):
		nb := b.get(max(len(*b.buf)+n+maxRVField, 2*cap(*b.buf)))
		*nb = append((*nb)[:0], *b.buf...)
		b.pool.Put(b.buf)
		b.buf = nb
	}
}

// get is a buffer of at least n bytes' capacity, empty.
func (b *Builder) get(n int) *[]byte {
	p := b.pool.Get(n)
	*p = (*p)[:0]
	return p
}

// Finish encodes the frames added, with resourceVersion rv (none when
// rv <= 0), into m, and empties the builder; a buffer m still held (never
// sent) goes back to its pool first. Without frames m is left as it is.
func (b *Builder) Finish(rv int64, m *Message) {
	if b.frames == 0 {
		return
	}
	m.Release()
	rvField := 0
	if rv > 0 {
		d := digits(rv)
		rvField = 1 + protowire.SizeVarint(uint64(d)) + d
	}
	inner := 1 + protowire.SizeVarint(uint64(b.n)) + b.n + rvField
	h := b.headerLen(b.n, inner)
	if b.buf != nil && h == b.reserve {
		// In place: the header fills the room left for it.
		out := b.appendHeader((*b.buf)[:0], inner)
		out = appendRV(out[:h+b.n], rv)
		*b.buf = out
		m.buf, m.pool = b.buf, b.pool
		b.buf, b.frames, b.n = nil, 0, 0
		return
	}
	frames := b.first
	if b.buf != nil {
		frames = (*b.buf)[b.reserve : b.reserve+b.n]
	}
	p := b.get(h + b.n + rvField)
	out := b.appendHeader(*p, inner)
	out = append(out, frames...)
	*p = appendRV(out, rv)
	m.buf, m.pool = p, b.pool
	b.Reset()
}

// Reset drops the frames added and gives the builder's buffer back.
func (b *Builder) Reset() {
	if b.buf != nil {
		b.pool.Put(b.buf)
		b.buf = nil
	}
	b.first, b.frames, b.n = nil, 0, 0
}

// headerLen is the size of what precedes the frames: for n bytes of
// frames in a WatchResponse of inner bytes.
func (b *Builder) headerLen(n, inner int) int {
	h := 1 + protowire.SizeVarint(uint64(n))
	if b.many {
		if b.id != 0 {
			h += 1 + protowire.SizeVarint(uint64(b.id))
		}
		h += 1 + protowire.SizeVarint(uint64(inner))
	}
	return h
}

func (b *Builder) appendHeader(dst []byte, inner int) []byte {
	if b.many {
		if b.id != 0 {
			dst = append(dst, tagManyID)
			dst = protowire.AppendVarint(dst, uint64(b.id))
		}
		dst = append(dst, tagManyResponse)
		dst = protowire.AppendVarint(dst, uint64(inner))
	}
	dst = append(dst, tagFrames)
	return protowire.AppendVarint(dst, uint64(b.n))
}

func appendRV(dst []byte, rv int64) []byte {
	if rv <= 0 {
		return dst
	}
	dst = append(dst, tagRV)
	dst = protowire.AppendVarint(dst, uint64(digits(rv)))
	return strconv.AppendInt(dst, rv, 10)
}

// digits is the decimal length of v > 0.
func digits(v int64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}
