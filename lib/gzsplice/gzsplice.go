// Package gzsplice builds gzip streams out of deflate segments compressed
// once and spliced many times: a list's objects are compressed one by
// one, each segment is kept with the object, and every later list of them
// copies the segments instead of compressing the list again.
//
// # Why concatenating segments is a valid deflate stream
//
// A segment is the output of a fresh compressor (no back-reference
// reaches before its first byte) written with non-final blocks and ended
// by a sync flush, an empty stored block that ends on a byte boundary.
// Segments therefore concatenate into one sequence of non-final blocks
// whose back-references all stay inside their own segment; the stream
// ends with an empty final block. The gzip trailer's CRC-32 of the whole
// uncompressed data is combined from the segments' own CRCs
// (crc(A‖B) = crc(A)·x^(8|B|) ⊕ crc(B) in GF(2)[x] modulo the CRC
// polynomial), each segment carrying its CRC and x^(8|B|) so that
// splicing it costs one multiplication, not a pass over its bytes.
//
// A segment is laid out as
//
//	crc32 (4 bytes LE) | x^(8·size) mod P (4 bytes LE) | size (4 bytes LE) | deflate bytes
package gzsplice

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/klauspost/compress/flate"
)

// SegmentOverhead is the bytes a segment adds before its deflate bytes.
const SegmentOverhead = 12

// Level is the compression level of segments: the fastest, as
// kube-apiserver compresses responses.
const Level = flate.BestSpeed

// header is a gzip member's header with no name, no modification time and
// "unknown" OS, the extra flags saying the fastest level was used: what
// compress/gzip and klauspost's gzip write at BestSpeed.
const header = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\xff"

// finalBlock is an empty final block with fixed Huffman codes (BFINAL 1,
// BTYPE 01, end-of-block), starting on a byte boundary.
const finalBlock = "\x03\x00"

// Compressor compresses segments. It holds a deflate compressor's tables
// (a few hundred KiB): keep it for reuse. Not safe for concurrent use.
type Compressor struct {
	fw  *flate.Writer
	out appender
}

// NewCompressor returns a Compressor.
func NewCompressor() *Compressor {
	c := &Compressor{}
	c.fw, _ = flate.NewWriter(&c.out, Level) // the level is valid
	return c
}

// appender is an io.Writer appending to b.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// deflate appends the fresh-state, sync-flushed compression of parts'
// concatenation to dst, returning it with the CRC-32 and length of the
// uncompressed bytes.
func (c *Compressor) deflate(dst []byte, parts ...[]byte) ([]byte, uint32, int) {
	c.out.b = dst
	c.fw.Reset(&c.out)
	var crc uint32
	n := 0
	for _, p := range parts {
		_, _ = c.fw.Write(p) // appender does not fail
		crc = crc32.Update(crc, crc32.IEEETable, p)
		n += len(p)
	}
	_ = c.fw.Flush()
	dst = c.out.b
	c.out.b = nil
	return dst, crc, n
}

// AppendSegment appends the segment of parts' concatenation to dst.
func (c *Compressor) AppendSegment(dst []byte, parts ...[]byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, SegmentOverhead)...)
	dst, crc, n := c.deflate(dst, parts...)
	binary.LittleEndian.PutUint32(dst[start:], crc)
	binary.LittleEndian.PutUint32(dst[start+4:], shiftOp(n))
	binary.LittleEndian.PutUint32(dst[start+8:], uint32(n))
	return dst
}

// Stream is a gzip stream being assembled: its header, then segments
// (spliced or compressed live) in order, then its trailer. The zero value
// is a stream not yet started.
type Stream struct {
	crc  uint32
	size uint32 // modulo 2^32, as the trailer holds it
}

// AppendHeader appends the gzip header to dst.
func (s *Stream) AppendHeader(dst []byte) []byte { return append(dst, header...) }

// AppendSegment appends a segment made by AppendSegment to dst: its
// deflate bytes, its CRC and size accounted for. It returns false,
// appending nothing, when seg is not a segment.
func (s *Stream) AppendSegment(dst, seg []byte) ([]byte, bool) {
	if len(seg) < SegmentOverhead {
		return dst, false
	}
	crc := binary.LittleEndian.Uint32(seg)
	op := binary.LittleEndian.Uint32(seg[4:])
	s.crc = multModP(op, s.crc) ^ crc
	s.size += binary.LittleEndian.Uint32(seg[8:])
	return append(dst, seg[SegmentOverhead:]...), true
}

// AppendLive compresses parts' concatenation with c and appends it to dst
// as a segment of the stream, for bytes not worth keeping (a list's head,
// its first item, its tail).
func (s *Stream) AppendLive(c *Compressor, dst []byte, parts ...[]byte) []byte {
	dst, crc, n := c.deflate(dst, parts...)
	s.crc = multModP(shiftOp(n), s.crc) ^ crc
	s.size += uint32(n)
	return dst
}

// AppendTrailer appends the final block and the gzip trailer to dst.
func (s *Stream) AppendTrailer(dst []byte) []byte {
	dst = append(dst, finalBlock...)
	dst = binary.LittleEndian.AppendUint32(dst, s.crc)
	return binary.LittleEndian.AppendUint32(dst, s.size)
}

// SegmentSize is the size of seg's deflate bytes, what AppendSegment
// appends of it.
func SegmentSize(seg []byte) int { return max(len(seg)-SegmentOverhead, 0) }

// poly is the reflected CRC-32 (IEEE) polynomial.
const poly = 0xedb88320

// multModP multiplies a and b modulo the CRC polynomial, both in the
// reflected representation (x^0 is the high bit), as zlib's multmodp.
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	p := uint32(0)
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ poly
		} else {
			b >>= 1
		}
	}
	return p
}

// shiftOp is x^(8n) modulo the polynomial: multiplying a CRC by it
// appends n bytes' worth of zeros, what combining with the CRC of n more
// bytes needs (zlib's crc32_combine_gen, squaring as it goes instead of
// reading a table).
func shiftOp(n int) uint32 {
	p := uint32(1) << 31  // x^0
	sq := uint32(1) << 23 // x^8: one byte
	for u := uint64(n); u != 0; u >>= 1 {
		if u&1 != 0 {
			p = multModP(sq, p)
		}
		if u > 1 {
			sq = multModP(sq, sq)
		}
	}
	return p
}

// Metadata keys of a gRPC list call (watchfanout's StreamList) that
// returns its list gzip-compressed. The caller sends MetadataAccept
// "gzip" when its client takes a gzip-encoded response; the server may
// then answer with the response header MetadataEncoding "gzip" and send
// the chunks of one gzip stream, whose bytes the caller writes out as
// they are with Content-Encoding gzip. Without that header the chunks
// are the list's own bytes.
const (
	MetadataAccept   = "x-meridian-list-accept-encoding"
	MetadataEncoding = "x-meridian-list-encoding"
)

// Threshold is the size from which a list is sent compressed, as
// kube-apiserver compresses responses from 128 KiB: below it
// compression costs more than it saves.
const Threshold = 128 << 10
