package batchcodec

import (
	"bytes"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/batchcodec/batchcodectest"
)

func frame(i, size int) []byte {
	f := bytes.Repeat([]byte{byte('a' + i%26)}, size)
	copy(f, strconv.Itoa(i)+":")
	return f
}

// TestBuilderEncoding: what the builder writes is byte for byte what the
// proto codec marshals for the same message, for every header size, with
// frames added as they are (Add), written into the batch (AddAppend), or
// both, and with the other watches a shared message names (also).
func TestBuilderEncoding(t *testing.T) {
	for _, mode := range []string{"Add", "AddAppend", "both"} {
		t.Run(mode, func(t *testing.T) { builderEncoding(t, mode) })
	}
}

func builderEncoding(t *testing.T, mode string) {
	for _, tc := range []struct {
		name   string
		many   bool
		id     int64
		frames []int // sizes
		rv     int64
		also   []int64
	}{
		{"watch one small frame", false, 0, []int{100}, 7, nil},
		{"watch no rv", false, 0, []int{100, 200}, 0, nil},
		{"watch large batch", false, 0, []int{16000, 16000}, 123456789, nil},
		{"many small", true, 3, []int{10, 20, 30}, 42, nil},
		{"many id 0", true, 0, []int{20000, 5000}, 1, nil},
		{"many negative id", true, -5, []int{30000}, 99, nil},
		{"many large batch", true, 1 << 40, []int{16 << 10, 16 << 10}, 1 << 62, nil},
		{"many just under 16 KiB", true, 9, []int{8000, 8300}, 10, nil},
		{"many above 2 MiB", true, 9, []int{1 << 20, 1 << 20, 1 << 10}, 10, nil},
		{"many one giant frame", true, 2, []int{3 << 20}, 11, nil},
		{"many shared one frame", true, 3, []int{1300}, 42, []int64{4, 5, 1 << 40}},
		{"many shared batch", true, 3, []int{1300, 200, 7000}, 43, []int64{1, 2}},
		{"many shared no rv", true, 3, []int{10, 20}, 0, []int64{9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := batchcodectest.New(t)
			b := NewBuilder(pool, tc.many, tc.id, 32<<10)
			var want []byte
			for i, n := range tc.frames {
				f := frame(i, n)
				if mode == "AddAppend" || mode == "both" && i%2 == 1 {
					if err := b.AddAppend(len(f), func(dst []byte) []byte { return append(dst, f...) }); err != nil {
						t.Fatal(err)
					}
				} else {
					b.Add(f)
				}
				want = append(want, f...)
			}
			if b.Len() != len(want) {
				t.Fatalf("Len %d, want %d", b.Len(), len(want))
			}
			var m Message
			b.FinishShared(tc.rv, tc.also, &m)
			resp := &watchv1.WatchResponse{Frames: want}
			if tc.rv > 0 {
				resp.ResourceVersion = strconv.FormatInt(tc.rv, 10)
			}
			var msg proto.Message = resp
			if tc.many {
				msg = &watchv1.WatchManyResponse{Id: tc.id, Response: resp, Also: tc.also}
			}
			exp, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Bytes(), exp) {
				t.Fatalf("encoding differs from proto.Marshal: got %d bytes, want %d (head %x vs %x)", m.Len(), len(exp), head(m.Bytes()), head(exp))
			}
			m.Release()
			b.Reset()
			if n := pool.Outstanding(); n != 0 {
				t.Fatalf("%d buffers not given back", n)
			}
		})
	}
}

func head(b []byte) []byte { return b[:min(len(b), 24)] }

// TestAddAppendWrongSize: a frame that is not of the size given is not
// added, and the batch goes on as if it had not been tried.
func TestAddAppendWrongSize(t *testing.T) {
	pool := batchcodectest.New(t)
	b := NewBuilder(pool, false, 0, 32<<10)
	b.Add(frame(0, 100))
	if err := b.AddAppend(50, func(dst []byte) []byte { return append(dst, frame(1, 49)...) }); err == nil {
		t.Fatal("a frame of 49 bytes added as 50")
	}
	if err := b.AddAppend(30, func(dst []byte) []byte { return append(dst, frame(2, 30)...) }); err != nil {
		t.Fatal(err)
	}
	var m Message
	b.Finish(0, &m)
	exp, err := proto.Marshal(&watchv1.WatchResponse{Frames: append(frame(0, 100), frame(2, 30)...)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Bytes(), exp) {
		t.Fatalf("got %q, want %q", m.Bytes(), exp)
	}
	m.Release()
	if n := pool.Outstanding(); n != 0 {
		t.Fatalf("%d buffers not given back", n)
	}
}

// TestBuilderInPlace: a batch of 16 KiB or more is sent in the buffer it
// was built in (one Get, no copy); a smaller one is copied into a buffer
// of its size, and the builder's goes back.
func TestBuilderInPlace(t *testing.T) {
	pool := batchcodectest.New(t)
	b := NewBuilder(pool, true, 12, 32<<10)
	b.Add(frame(0, 10<<10))
	b.Add(frame(1, 10<<10))
	var m Message
	b.Finish(5, &m)
	if pool.Gets() != 1 {
		t.Fatalf("%d Gets for a large batch, want 1 (built in place)", pool.Gets())
	}
	if cap(m.Bytes()) < 32<<10 {
		t.Fatalf("message buffer cap %d: not the builder's", cap(m.Bytes()))
	}
	if pool.Outstanding() != 1 {
		t.Fatalf("outstanding %d, want 1 (the message's)", pool.Outstanding())
	}
	m.Release()

	b.Add(frame(2, 100))
	b.Add(frame(3, 100))
	b.Finish(6, &m)
	if got := cap(m.Bytes()); got > 1024 {
		t.Fatalf("small message in a buffer of %d bytes", got)
	}
	if pool.Outstanding() != 1 {
		t.Fatalf("outstanding %d, want 1: the builder's buffer goes back", pool.Outstanding())
	}
	m.Release()
}
