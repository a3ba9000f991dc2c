package gzsplice

import (
	"bytes"
	"compress/gzip"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
)

// assemble builds a gzip stream of parts: the first and the last
// compressed live, the others as segments spliced in (made by a
// compressor that made other segments before, as a cache's would be).
func assemble(t testing.TB, parts [][]byte) []byte {
	t.Helper()
	c := NewCompressor()
	var s Stream
	out := s.AppendHeader(nil)
	for i, p := range parts {
		if i == 0 || i == len(parts)-1 {
			out = s.AppendLive(c, out, p)
			continue
		}
		seg := c.AppendSegment(nil, p[:len(p)/2], p[len(p)/2:])
		var ok bool
		if out, ok = s.AppendSegment(out, seg); !ok {
			t.Fatalf("segment %d rejected", i)
		}
	}
	return s.AppendTrailer(out)
}

// decoders read a gzip stream as compress/gzip (client-go's transport)
// and klauspost's gzip do.
func decoders(t testing.TB, gz []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if out["compress/gzip"], err = io.ReadAll(r); err != nil {
		t.Fatalf("compress/gzip: %v", err)
	}
	kr, err := kgzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if out["klauspost"], err = io.ReadAll(kr); err != nil {
		t.Fatalf("klauspost: %v", err)
	}
	return out
}

// randomPart is JSON-like text with repeats (long matches) and random
// bytes, of 0 to max bytes.
func randomPart(r *rand.Rand, max int) []byte {
	n := r.IntN(max + 1)
	b := make([]byte, 0, n)
	for len(b) < n {
		switch r.IntN(3) {
		case 0:
			b = append(b, `{"metadata":{"name":"`...)
		case 1:
			b = append(b, bytes.Repeat([]byte{'x'}, r.IntN(300))...)
		default:
			for range r.IntN(50) {
				b = append(b, byte(r.IntN(256)))
			}
		}
	}
	return b[:n]
}

// TestSplicedStreamDecodes splices random objects of random sizes (empty,
// small, and past a deflate block) into streams of random lengths; every
// decoder must give the objects' concatenation, and a checksum or size
// error would fail the read.
func TestSplicedStreamDecodes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		parts := make([][]byte, 1+r.IntN(40))
		max := []int{0, 16, 2000, 200000}[round%4]
		for i := range parts {
			parts[i] = randomPart(r, max)
		}
		want := bytes.Join(parts, nil)
		for name, got := range decoders(t, assemble(t, parts)) {
			if !bytes.Equal(got, want) {
				t.Fatalf("round %d, %s: %d bytes, want %d", round, name, len(got), len(want))
			}
		}
	}
}

// TestSegmentsCompress checks that a segment of repetitive text is much
// smaller than the text, and that a spliced stream of such segments is
// within a few bytes per segment of the segments' sizes.
func TestSegmentsCompress(t *testing.T) {
	c := NewCompressor()
	item := append([]byte(`,{"metadata":{"name":"a"},"data":{"k":"`), bytes.Repeat([]byte{'x'}, 1000)...)
	seg := c.AppendSegment(nil, item)
	if SegmentSize(seg) > len(item)/4 {
		t.Fatalf("segment of %d bytes is %d bytes", len(item), SegmentSize(seg))
	}
}

// TestCombineMatchesChecksum checks the CRC combination against the CRC
// of the concatenation, including the empty and long inputs.
func TestCombineMatchesChecksum(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		a, b := randomPart(r, 5000), randomPart(r, 70000)
		got := multModP(shiftOp(len(b)), crc32.ChecksumIEEE(a)) ^ crc32.ChecksumIEEE(b)
		if want := crc32.ChecksumIEEE(append(append([]byte{}, a...), b...)); got != want {
			t.Fatalf("combined %08x, want %08x (%d+%d bytes)", got, want, len(a), len(b))
		}
	}
}

// TestRejectsShortSegment checks that bytes too short to be a segment are
// refused rather than spliced.
func TestRejectsShortSegment(t *testing.T) {
	var s Stream
	if out, ok := s.AppendSegment([]byte("h"), []byte{1, 2, 3}); ok || string(out) != "h" {
		t.Fatalf("short segment spliced: %q, %v", out, ok)
	}
}

// FuzzSplice splits the input into parts at the given cut points and
// checks that the spliced stream decodes to the input.
func FuzzSplice(f *testing.F) {
	f.Add([]byte(`{"items":[{"a":1},{"a":2}]}`), uint64(7))
	f.Add(bytes.Repeat([]byte("abc"), 30000), uint64(1<<40|77))
	f.Fuzz(func(t *testing.T, data []byte, cuts uint64) {
		var parts [][]byte
		rest := data
		for cuts != 0 && len(rest) > 0 {
			n := int(cuts%256) % (len(rest) + 1)
			parts = append(parts, rest[:n])
			rest = rest[n:]
			cuts /= 256
		}
		parts = append(parts, rest)
		for name, got := range decoders(t, assemble(t, parts)) {
			if !bytes.Equal(got, data) {
				t.Fatalf("%s: got %d bytes, want %d", name, len(got), len(data))
			}
		}
	})
}
