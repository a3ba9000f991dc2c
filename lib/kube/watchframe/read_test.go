package watchframe

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
)

// TestReadFramesBack: for every format, a batch of frames of every event
// type (objects of every size, bookmarks, an ERROR) splits into its last
// frame and the frames before it, each frame's type reads back, and an
// ERROR frame's Status decodes to the one encoded.
func TestReadFramesBack(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	res, ok := registry.New(registry.Standard()...).Lookup(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if !ok {
		t.Fatal("no configmaps")
	}
	now := func() time.Time { return time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC) }
	gone := apierrors.NewResourceExpired("too old resource version: 5 (9)").Status()
	for _, f := range []Format{
		{MediaType: negotiation.JSON},
		{MediaType: negotiation.JSON, Partial: true},
		{MediaType: negotiation.JSON, Table: true, IncludeObject: metav1.IncludeMetadata},
		{MediaType: negotiation.Protobuf},
		{MediaType: negotiation.Protobuf, Partial: true},
	} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			enc := NewEncoder(c, res, f, now)
			var frames [][]byte
			var types []watch.EventType
			for i, obj := range objects(res) {
				typ := []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark}[i%4]
				frame, err := enc.Frame(typ, obj)
				if err != nil {
					t.Fatal(err)
				}
				frames, types = append(frames, frame), append(types, typ)
			}
			errFrame, err := enc.Frame(watch.Error, &gone)
			if err != nil {
				t.Fatal(err)
			}
			frames, types = append(frames, errFrame), append(types, watch.Error)

			for i, frame := range frames {
				if typ, ok := Type(frame, f.MediaType); !ok || typ != types[i] {
					t.Fatalf("frame %d: type %q %v, want %q", i, typ, ok, types[i])
				}
				// A relay asks once per message: no allocation.
				if n := testing.AllocsPerRun(10, func() { Type(frame, f.MediaType) }); n != 0 {
					t.Errorf("frame %d: Type allocates %v times", i, n)
				}
			}
			// Every prefix of the batch splits at its last frame.
			var batch []byte
			for i, frame := range frames {
				prev := len(batch)
				batch = append(batch, frame...)
				before, last, ok := Last(batch, f.MediaType)
				if !ok || !bytes.Equal(last, frame) || len(before) != prev {
					t.Fatalf("batch of %d frames: last %d bytes %v, before %d bytes, want %d and %d", i+1, len(last), ok, len(before), len(frame), prev)
				}
			}
			st, err := ErrorStatus(errFrame, f.MediaType)
			if err != nil {
				t.Fatal(err)
			}
			if st.Code != gone.Code || st.Reason != gone.Reason || st.Message != gone.Message {
				t.Fatalf("status %+v, want %+v", st, gone)
			}
			if _, err := ErrorStatus(frames[0], f.MediaType); err == nil {
				t.Fatal("ErrorStatus of an ADDED frame succeeded")
			}
			// A cut batch has no last frame.
			if _, _, ok := Last(batch[:len(batch)-1], f.MediaType); ok {
				t.Fatal("a cut batch split")
			}
		})
	}
}

// TestReadCodecFrames: frames the codec wrote (an object without a typed
// marshaller goes through it) read back the same.
func TestReadCodecFrames(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	st := apierrors.NewTooManyRequests("slow", 1).Status()
	raw, err := c.EncodeToBytes(&st, negotiation.JSON)
	if err != nil {
		t.Fatal(err)
	}
	ev := &metav1.WatchEvent{Type: string(watch.Error), Object: runtime.RawExtension{Raw: raw}}
	frame, err := c.EncodeToBytes(ev, negotiation.JSON)
	if err != nil {
		t.Fatal(err)
	}
	if typ, ok := Type(frame, negotiation.JSON); !ok || typ != watch.Error {
		t.Fatalf("type %q %v", typ, ok)
	}
	got, err := ErrorStatus(frame, negotiation.JSON)
	if err != nil || got.Code != st.Code || got.Reason != st.Reason {
		t.Fatalf("status %+v, %v; want %+v", got, err, st)
	}
	pf := codecFrame(t, c, watch.Error, &st)
	got, err = ErrorStatus(pf, negotiation.Protobuf)
	if err != nil || got.Code != st.Code || got.Reason != st.Reason {
		t.Fatalf("protobuf status %+v, %v; want %+v", got, err, st)
	}
}
