package batchcodec

import (
	"bytes"
	"errors"
	"testing"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/batchcodec/batchcodectest"
)

// TestCodec: a Message is handed over once; other messages are marshalled
// by the proto codec; Unmarshal is the proto codec's.
func TestCodec(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	pool := batchcodectest.New(t)
	b := NewBuilder(pool, false, 0, 32<<10)
	b.Add(frame(0, 2000))
	var m Message
	b.Finish(3, &m)
	want := bytes.Clone(m.Bytes())
	data, err := c.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data.Materialize(), want) {
		t.Fatal("Marshal changed the bytes")
	}
	if m.Len() != 0 {
		t.Fatal("the message still holds its buffer after Marshal")
	}
	m.Release() // no-op: gRPC owns it
	if _, err := c.Marshal(&m); !errors.Is(err, ErrSent) {
		t.Fatalf("second Marshal: %v, want ErrSent", err)
	}
	if pool.Outstanding() != 1 {
		t.Fatal("the buffer went back before gRPC freed it")
	}
	data.Free()
	if pool.Outstanding() != 0 {
		t.Fatal("Free did not give the buffer back")
	}

	plain, err := c.Marshal(&watchv1.WatchResponse{Frames: []byte("x"), ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	var got watchv1.WatchResponse
	if err := c.Unmarshal(plain, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.GetFrames()) != "x" || got.GetResourceVersion() != "1" {
		t.Fatalf("round trip: %v", &got)
	}
	if _, err := c.Marshal(struct{}{}); err == nil {
		t.Fatal("Marshal of a non-message succeeded")
	}
}
