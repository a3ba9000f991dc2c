package batchcodec

import (
	"errors"
	"strconv"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field tags (field number << 3 | wire type) of the messages built.
const (
	tagManyID       = 1<<3 | byte(protowire.VarintType) // WatchManyResponse.id
	tagManyResponse = 2<<3 | byte(protowire.BytesType)  // WatchManyResponse.response
	tagManyAlso     = 5<<3 | byte(protowire.BytesType)  // WatchManyResponse.also, packed
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
var errFrameSize = errors.New("batchcodec: frame not of the size given")

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
func (b *Builder) Finish(rv int64, m *Message) { b.FinishShared(rv, nil, m) }

// FinishShared is Finish for a WatchManyResponse that also goes to the
// watches also names (its field also); also must be empty for a
// WatchResponse.
func (b *Builder) FinishShared(rv int64, also []int64, m *Message) {
	if b.frames == 0 {
		return
	}
	m.Release()
	rvField := 0
	if rv > 0 {
		d := digits(rv)
		rvField = 1 + protowire.SizeVarint(uint64(d)) + d
	}
	alsoField := 0
	if len(also) > 0 {
		n := alsoLen(also)
		alsoField = 1 + protowire.SizeVarint(uint64(n)) + n
	}
	inner := 1 + protowire.SizeVarint(uint64(b.n)) + b.n + rvField
	h := b.headerLen(b.n, inner)
	if b.buf != nil && h == b.reserve && alsoField == 0 {
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
	p := b.get(h + b.n + rvField + alsoField)
	out := b.appendHeader(*p, inner)
	out = append(out, frames...)
	out = appendRV(out, rv)
	*p = appendAlso(out, also)
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

// alsoLen is the size of ids as packed varints.
func alsoLen(ids []int64) int {
	n := 0
	for _, id := range ids {
		n += protowire.SizeVarint(uint64(id))
	}
	return n
}

// appendAlso appends WatchManyResponse.also holding ids (nothing for
// none), packed.
func appendAlso(dst []byte, ids []int64) []byte {
	if len(ids) == 0 {
		return dst
	}
	dst = append(dst, tagManyAlso)
	dst = protowire.AppendVarint(dst, uint64(alsoLen(ids)))
	for _, id := range ids {
		dst = protowire.AppendVarint(dst, uint64(id))
	}
	return dst
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
