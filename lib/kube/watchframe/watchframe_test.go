package watchframe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/metaonly"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/registry/registrytest"
	"github.com/meridian-cp/meridian/lib/kube/table"
)

// objects returns objects of res, from bare to full metadata, with data
// of sizes around the varint length boundaries of the frame's lengths.
func objects(res *registry.Resource) []runtime.Object {
	now := metav1.NewTime(time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC))
	var out []runtime.Object
	for i, size := range []int{0, 1, 60, 100, 127, 128, 1000, 16 << 10, 70 << 10} {
		obj := res.New()
		acc, err := meta.Accessor(obj)
		if err != nil {
			panic(err)
		}
		registrytest.SetMeta(acc, res, i, now)
		if i > 0 {
			acc.SetResourceVersion(fmt.Sprint([]int64{1, 127, 128, 99999, 1 << 40}[i%5]))
			acc.SetUID(types.UID(fmt.Sprintf("0b4d8d6c-3f3a-4c1e-9d8e-%012d", i)))
			acc.SetCreationTimestamp(now)
		}
		data := strings.Repeat("x", size)
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			if size > 0 {
				o.Data = map[string]string{"k": data}
			}
		case *corev1.Secret:
			o.Type = corev1.SecretTypeOpaque
			o.Data = map[string][]byte{"password": []byte(data)}
		case *corev1.Namespace:
			o.Status.Phase = corev1.NamespaceActive
		case *corev1.Event:
			o.InvolvedObject = corev1.ObjectReference{Kind: "ConfigMap", Name: "x"}
			o.Reason, o.Message = "Created", data
		case *coordinationv1.Lease:
			holder := data
			o.Spec.HolderIdentity = &holder
		case *eventsv1.Event:
			o.Reason, o.Note = "Created", data
			o.EventTime = metav1.NewMicroTime(now.Time)
		}
		out = append(out, obj)
	}
	return out
}

// codecFrame is the protobuf frame as the codec builds it — the object
// encoded by the protobuf serializer, wrapped in a WatchEvent, marshalled,
// behind its length — which is what Frame did for every object before
// protoFrame.
func codecFrame(t *testing.T, c *codec.Codec, typ watch.EventType, obj runtime.Object) []byte {
	t.Helper()
	raw, err := c.EncodeToBytes(obj, negotiation.Protobuf)
	if err != nil {
		t.Fatal(err)
	}
	ev := &metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}
	data, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	return append(out, data...)
}

// TestProtoFrameIsCodecFrame: protobuf frames laid out by hand are byte
// for byte the codec's, for every served kind, event type, size, the
// PartialObjectMetadata format, bookmarks (objects without a kind set)
// and ERROR frames; and client-go's decoding reads them back.
func TestProtoFrameIsCodecFrame(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	types := []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark}
	checked := 0
	for _, res := range registry.Standard() {
		plain := NewEncoder(c, res, Format{MediaType: negotiation.Protobuf}, nil)
		partial := NewEncoder(c, res, Format{MediaType: negotiation.Protobuf, Partial: true}, nil)
		for i := range objects(res) {
			for _, typ := range types {
				name := fmt.Sprintf("%s/%d/%s", res.GVR, i, typ)
				// Fresh objects for each path: both set the kind of an
				// object without one.
				got, err := plain.Frame(typ, objects(res)[i])
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				obj := objects(res)[i]
				if want := codecFrame(t, c, typ, obj); !bytes.Equal(got, want) {
					t.Fatalf("%s: frame differs:\n got %x\nwant %x", name, got, want)
				}
				checkDecodes(t, c, name, got, typ, obj)

				got, err = partial.Frame(typ, objects(res)[i])
				if err != nil {
					t.Fatalf("%s partial: %v", name, err)
				}
				var wantObj runtime.Object = objects(res)[i]
				if typ != watch.Bookmark {
					if wantObj, err = metaonly.Object(wantObj); err != nil {
						t.Fatal(err)
					}
				}
				if want := codecFrame(t, c, typ, wantObj); !bytes.Equal(got, want) {
					t.Fatalf("%s partial: frame differs:\n got %x\nwant %x", name, got, want)
				}
				checked += 2
			}
		}
		// A bookmark as watchfanout's cache builds it: a new object with only
		// a resourceVersion (and maybe the initial-events-end annotation).
		for _, annotate := range []bool{false, true} {
			bm := func() runtime.Object {
				obj := res.New()
				acc, _ := meta.Accessor(obj)
				acc.SetResourceVersion("12345")
				if annotate {
					acc.SetAnnotations(map[string]string{"k8s.io/initial-events-end": "true"})
				}
				return obj
			}
			got, err := plain.Frame(watch.Bookmark, bm())
			if err != nil {
				t.Fatal(err)
			}
			if want := codecFrame(t, c, watch.Bookmark, bm()); !bytes.Equal(got, want) {
				t.Fatalf("%s bookmark: frame differs:\n got %x\nwant %x", res.GVR, got, want)
			}
			checked++
		}
		// ERROR frames carry a Status.
		for _, st := range []metav1.Status{
			apierrors.NewResourceExpired("too old resource version: 1 (5)").Status(),
			apierrors.NewTooManyRequests("the watcher fell behind", 1).Status(),
			apierrors.NewInternalError(fmt.Errorf("ünïcode %s", strings.Repeat("e", 200))).Status(),
		} {
			a, b := st, st
			got, err := plain.Frame(watch.Error, &a)
			if err != nil {
				t.Fatal(err)
			}
			if want := codecFrame(t, c, watch.Error, &b); !bytes.Equal(got, want) {
				t.Fatalf("%s error: frame differs:\n got %x\nwant %x", res.GVR, got, want)
			}
			checked++
		}
	}
	if checked < 500 {
		t.Fatalf("only %d frames checked", checked)
	}
}

// codecJSONFrame is the JSON frame of obj as the codec writes the
// WatchEvent (the path Frame took before it laid JSON frames out itself).
func codecJSONFrame(t *testing.T, c *codec.Codec, typ watch.EventType, raw []byte) []byte {
	t.Helper()
	data, err := c.EncodeToBytes(&metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}, negotiation.JSON)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestJSONFrameIsCodecFrame: JSON frames laid out by hand are byte for
// byte the codec's encoding of the WatchEvent, for every served kind,
// event type and size, the PartialObjectMetadata and Table formats,
// ERROR frames, and strings the encoder escapes (<, >, &, U+2028); and
// JSONFrameObject gives back the object's own encoding.
func TestJSONFrameIsCodecFrame(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC) }
	types := []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark}
	checked := 0
	for _, res := range registry.Standard() {
		for _, f := range []Format{
			{MediaType: negotiation.JSON},
			{MediaType: negotiation.JSON, Partial: true},
			{MediaType: negotiation.JSON, Table: true, IncludeObject: metav1.IncludeObject},
		} {
			enc := NewEncoder(c, res, f, now)
			for i := range objects(res) {
				for _, typ := range types {
					name := fmt.Sprintf("%s/%+v/%d/%s", res.GVR, f, i, typ)
					obj := objects(res)[i]
					acc, _ := meta.Accessor(obj)
					acc.SetAnnotations(map[string]string{"html": "<a href=\"x\">&amp;</a>", "sep": "a\u2028b\u2029c"})
					got, err := enc.Frame(typ, obj.DeepCopyObject())
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					// What the frame holds, encoded by the codec's path.
					var raw []byte
					switch {
					case f.Table && typ != watch.Bookmark:
						tbl, err := table.Render(c, res, obj.DeepCopyObject(), f.IncludeObject, now())
						if err != nil {
							t.Fatal(err)
						}
						raw, err = c.EncodeToBytes(tbl, negotiation.JSON)
						if err != nil {
							t.Fatal(err)
						}
					case f.Partial && typ != watch.Bookmark:
						p, err := metaonly.Object(obj.DeepCopyObject())
						if err != nil {
							t.Fatal(err)
						}
						raw, _ = c.EncodeToBytes(p, negotiation.JSON)
					default:
						raw, _ = c.EncodeToBytes(obj.DeepCopyObject(), negotiation.JSON)
					}
					if want := codecJSONFrame(t, c, typ, raw); !bytes.Equal(got, want) {
						t.Fatalf("%s: frame differs:\n got %s\nwant %s", name, got, want)
					}
					x, ok := JSONFrameObject(got, typ)
					if !ok || !bytes.Equal(x, bytes.TrimSuffix(raw, []byte("\n"))) {
						t.Fatalf("%s: JSONFrameObject %v:\n got %s\nwant %s", name, ok, x, raw)
					}
					if _, ok := JSONFrameObject(got, watch.Error); ok {
						t.Fatalf("%s: JSONFrameObject read a %s frame as ERROR", name, typ)
					}
					checked++
				}
			}
		}
		plain := NewEncoder(c, res, Format{MediaType: negotiation.JSON}, now)
		for _, st := range []metav1.Status{
			apierrors.NewResourceExpired("too old resource version: 1 (5)").Status(),
			apierrors.NewInternalError(fmt.Errorf("ünïcode <%s> & \u2028", strings.Repeat("e", 200))).Status(),
		} {
			a, b := st, st
			got, err := plain.Frame(watch.Error, &a)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := c.EncodeToBytes(&b, negotiation.JSON)
			if want := codecJSONFrame(t, c, watch.Error, raw); !bytes.Equal(got, want) {
				t.Fatalf("%s error: frame differs:\n got %s\nwant %s", res.GVR, got, want)
			}
			checked++
		}
	}
	if checked < 500 {
		t.Fatalf("only %d frames checked", checked)
	}
}

// checkDecodes decodes a protobuf frame as client-go does (the length, a
// WatchEvent, its object through the protobuf serializer) and compares it
// with obj.
func checkDecodes(t *testing.T, c *codec.Codec, name string, frame []byte, typ watch.EventType, obj runtime.Object) {
	t.Helper()
	if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-4 {
		t.Fatalf("%s: length prefix %d, frame %d bytes", name, n, len(frame)-4)
	}
	var ev metav1.WatchEvent
	if err := ev.Unmarshal(frame[4:]); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if ev.Type != string(typ) {
		t.Fatalf("%s: type %q", name, ev.Type)
	}
	got := obj.DeepCopyObject()
	gvk := obj.GetObjectKind().GroupVersionKind()
	if err := c.Decode(ev.Object.Raw, negotiation.Protobuf, gvk, got); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	got.GetObjectKind().SetGroupVersionKind(gvk)
	if !equalJSON(t, c, got, obj) {
		t.Fatalf("%s: decoded object differs", name)
	}
}

func equalJSON(t *testing.T, c *codec.Codec, a, b runtime.Object) bool {
	t.Helper()
	x, err := c.EncodeToBytes(a, negotiation.JSON)
	if err != nil {
		t.Fatal(err)
	}
	y, err := c.EncodeToBytes(b, negotiation.JSON)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

// TestProtoFrameAllocatesOnce: a protobuf frame is one allocation (the
// frame itself); the codec's path made four.
func TestProtoFrameAllocatesOnce(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	res := registry.Core()[1] // configmaps
	enc := NewEncoder(c, res, Format{MediaType: negotiation.Protobuf}, nil)
	obj := objects(res)[6]
	if err := c.SetKind(obj); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := enc.Frame(watch.Added, obj); err != nil {
			t.Fatal(err)
		}
	})
	// The frame, and the apiVersion string of the envelope's TypeMeta.
	if allocs > 2 {
		t.Fatalf("%v allocations per frame", allocs)
	}
}

func BenchmarkFrame(b *testing.B) {
	c, err := codec.New()
	if err != nil {
		b.Fatal(err)
	}
	res := registry.Core()[1]
	obj := objects(res)[6] // 1000 bytes of data
	if err := c.SetKind(obj); err != nil {
		b.Fatal(err)
	}
	for _, f := range []Format{{MediaType: negotiation.Protobuf}, {MediaType: negotiation.JSON}} {
		enc := NewEncoder(c, res, f, nil)
		b.Run(f.MediaType, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := enc.Frame(watch.Added, obj); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
