package protolist_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/protolist"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/registry/registrytest"
)

// objects returns objects of every kind meridian serves, with and without
// labels, annotations, managed fields, owner references and non-ASCII
// text.
func objects(res *registry.Resource, n int) []runtime.Object {
	now := metav1.NewTime(time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC))
	var out []runtime.Object
	for i := range n {
		obj := res.New()
		acc, err := meta.Accessor(obj)
		if err != nil {
			panic(err)
		}
		registrytest.SetMeta(acc, res, i, now)
		acc.SetUID(types.UID(fmt.Sprintf("0b4d8d6c-3f3a-4c1e-9d8e-%012d", i)))
		acc.SetCreationTimestamp(now)
		if i%3 == 1 {
			acc.SetFinalizers([]string{"example.com/keep"})
		}
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			o.Data = map[string]string{"k": fmt.Sprintf("välue %d", i), "z": ""}
			if i%2 == 0 {
				o.BinaryData = map[string][]byte{"b": {0, 1, 2, 0xff}}
			}
		case *corev1.Secret:
			o.Type = corev1.SecretTypeOpaque
			o.Data = map[string][]byte{"password": []byte("s3cr3t"), "none": {}}
		case *corev1.Namespace:
			o.Status.Phase = corev1.NamespaceActive
			o.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
		case *corev1.Event:
			o.InvolvedObject = corev1.ObjectReference{Kind: "ConfigMap", Name: "x"}
			o.Reason, o.Message, o.Count = "Created", "ünïcode", int32(i)
		case *coordinationv1.Lease:
			holder, secs := fmt.Sprintf("holder-%d", i), int32(15)
			o.Spec.HolderIdentity, o.Spec.LeaseDurationSeconds = &holder, &secs
			o.Spec.RenewTime = &metav1.MicroTime{Time: now.Time}
		case *eventsv1.Event:
			o.Reason, o.Note, o.Action = "Created", "note ✓", "Create"
			o.EventTime = metav1.NewMicroTime(now.Time)
		}
		out = append(out, obj)
	}
	return out
}

// decoded is the list as the decoding path builds it: every stored value
// decoded with its resourceVersion, the typed list encoded.
func decoded(t *testing.T, c *codec.Codec, res *registry.Resource, stored [][]byte, revs []int64, lm metav1.ListMeta) (runtime.Object, []byte) {
	t.Helper()
	list := res.NewList()
	var items []runtime.Object
	for i, v := range stored {
		obj := res.New()
		if err := c.DecodeStorage(v, revs[i], obj); err != nil {
			t.Fatal(err)
		}
		items = append(items, obj)
	}
	if err := meta.SetList(list, items); err != nil {
		t.Fatal(err)
	}
	la, _ := meta.ListAccessor(list)
	la.SetResourceVersion(lm.ResourceVersion)
	la.SetContinue(lm.Continue)
	la.SetRemainingItemCount(lm.RemainingItemCount)
	data, err := c.EncodeToBytes(list, negotiation.Protobuf)
	if err != nil {
		t.Fatal(err)
	}
	return list, data
}

func spliced(t *testing.T, res *registry.Resource, stored [][]byte, revs []int64, lm metav1.ListMeta, chunkSize int) []byte {
	t.Helper()
	gvk := res.GVK()
	w := protolist.NewWriter(gvk.GroupVersion().WithKind(res.ListKind), chunkSize)
	for i, v := range stored {
		o, err := protolist.Parse(v, gvk)
		if err != nil {
			t.Fatal(err)
		}
		w.Add(&o, revs[i])
	}
	if w.Len() != len(stored) {
		t.Fatalf("Len %d, want %d", w.Len(), len(stored))
	}
	chunks, err := w.Finish(&lm)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks[1:] {
		if len(c) > max(chunkSize, 4096)+4 {
			t.Fatalf("a chunk of %d bytes, chunk size %d", len(c), chunkSize)
		}
	}
	return bytes.Join(chunks, nil)
}

// TestSplicedIsDecodedEncoded: for every kind served, whatever the
// objects and list metadata, the spliced list is byte for byte the encoded
// typed list, and decodes to the same list.
func TestSplicedIsDecodedEncoded(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	remaining := int64(42)
	for _, res := range registry.Standard() {
		for _, n := range []int{0, 1, 7, 300} {
			objs := objects(res, n)
			var stored [][]byte
			var revs []int64
			for i, obj := range objs {
				v, err := c.EncodeStorage(obj)
				if err != nil {
					t.Fatal(err)
				}
				stored = append(stored, v)
				// Revisions of every varint length.
				revs = append(revs, []int64{1, 127, 128, 99999, 1 << 40}[i%5])
			}
			for _, lm := range []metav1.ListMeta{
				{ResourceVersion: "1234"},
				{ResourceVersion: "1234", Continue: "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzNCwic3RhcnQiOiJvYmotMDA2XHUwMDAwIn0", RemainingItemCount: &remaining},
			} {
				for _, chunk := range []int{1, 4096, 256 << 10} {
					name := fmt.Sprintf("%s/%d/continue=%t/chunk=%d", res.GVR, n, lm.Continue != "", chunk)
					wantList, want := decoded(t, c, res, stored, revs, lm)
					got := spliced(t, res, stored, revs, lm, chunk)
					if !bytes.Equal(got, want) {
						t.Errorf("%s: spliced %d bytes differ from encoded %d bytes", name, len(got), len(want))
						continue
					}
					gotList := res.NewList()
					if err := c.Decode(got, negotiation.Protobuf, res.GVK().GroupVersion().WithKind(res.ListKind), gotList); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					gotList.GetObjectKind().SetGroupVersionKind(wantList.GetObjectKind().GroupVersionKind())
					// Protobuf items carry no apiVersion and kind.
					items, _ := meta.ExtractList(wantList)
					for _, it := range items {
						it.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
					}
					if !apiequality.Semantic.DeepEqual(gotList, wantList) {
						t.Errorf("%s: decoded lists differ:\n%v\n%v", name, gotList, wantList)
					}
				}
			}
		}
	}
}

// TestMetadata: the name, namespace and labels read from the stored bytes
// are the object's.
func TestMetadata(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range registry.Standard() {
		for _, obj := range objects(res, 6) {
			v, err := c.EncodeStorage(obj)
			if err != nil {
				t.Fatal(err)
			}
			o, err := protolist.Parse(v, res.GVK())
			if err != nil {
				t.Fatal(err)
			}
			name, ns, labels, err := o.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			acc, _ := meta.Accessor(obj)
			if name != acc.GetName() || ns != acc.GetNamespace() || !apiequality.Semantic.DeepEqual(labels, acc.GetLabels()) ||
				(len(acc.GetLabels()) > 0) != (len(labels) > 0) {
				t.Errorf("%s: read %q %q %v, want %q %q %v", res.GVR, name, ns, labels, acc.GetName(), acc.GetNamespace(), acc.GetLabels())
			}
		}
	}
}

// TestResourceVersionInserted: a stored ObjectMeta without a
// resourceVersion field (the marshalers always write it, but a value
// written otherwise might not) gets one where the marshaler would put it.
func TestResourceVersionInserted(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	res := registry.Core()[1] // configmaps
	if res.Kind != "ConfigMap" {
		t.Fatalf("registry.Core()[1] is %s", res.Kind)
	}
	for _, obj := range objects(res, 4) {
		v, err := c.EncodeStorage(obj)
		if err != nil {
			t.Fatal(err)
		}
		stripped := dropResourceVersion(t, v)
		if bytes.Equal(stripped, v) {
			t.Fatal("no resourceVersion field dropped")
		}
		want := spliced(t, res, [][]byte{v}, []int64{77}, metav1.ListMeta{ResourceVersion: "80"}, 1)
		got := spliced(t, res, [][]byte{stripped}, []int64{77}, metav1.ListMeta{ResourceVersion: "80"}, 1)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: inserted resourceVersion differs", obj.(metav1.Object).GetName())
		}
	}
}

// dropResourceVersion rewrites a stored ConfigMap without ObjectMeta's
// field 6.
func dropResourceVersion(t *testing.T, v []byte) []byte {
	t.Helper()
	var unk runtime.Unknown
	if err := unk.Unmarshal(v[4:]); err != nil {
		t.Fatal(err)
	}
	var obj []byte
	rest := unk.Raw
	for len(rest) > 0 {
		num, typ, n := protowire.ConsumeTag(rest)
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if num == 1 {
			val, _ := protowire.ConsumeBytes(rest[n:])
			var meta []byte
			for len(val) > 0 {
				fn, ft, k := protowire.ConsumeTag(val)
				l := protowire.ConsumeFieldValue(fn, ft, val[k:])
				if fn != 6 {
					meta = append(meta, val[:k+l]...)
				}
				val = val[k+l:]
			}
			obj = protowire.AppendTag(obj, 1, protowire.BytesType)
			obj = protowire.AppendBytes(obj, meta)
		} else {
			obj = append(obj, rest[:n+m]...)
		}
		rest = rest[n+m:]
	}
	unk.Raw = obj
	out, err := unk.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("k8s\x00"), out...)
}

// TestParseRejects: values the splice could not reproduce exactly are
// ErrNotSpliceable, for the caller to decode instead.
func TestParseRejects(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	res := registry.Core()[1]
	obj := objects(res, 2)[1]
	good, err := c.EncodeStorage(obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := protolist.Parse(good, res.GVK()); err != nil {
		t.Fatalf("the stored form: %v", err)
	}
	envelope := func(f func(u *runtime.Unknown)) []byte {
		var unk runtime.Unknown
		if err := unk.Unmarshal(good[4:]); err != nil {
			t.Fatal(err)
		}
		f(&unk)
		out, err := unk.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte("k8s\x00"), out...)
	}
	metaTwice := func(u *runtime.Unknown) {
		u.Raw = protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), u.Raw...), 1, protowire.BytesType), []byte{0x0a, 1, 'x'})
	}
	rvTwice := func(u *runtime.Unknown) {
		_, _, n := protowire.ConsumeTag(u.Raw)
		m, k := protowire.ConsumeBytes(u.Raw[n:])
		m = append(append([]byte(nil), m...), 0x32, 1, '5')
		raw := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), m)
		u.Raw = append(raw, u.Raw[n+k:]...)
	}
	for name, v := range map[string][]byte{
		"json":             []byte(`{"apiVersion":"v1","kind":"ConfigMap"}`),
		"empty":            nil,
		"truncated":        good[:len(good)-3],
		"other kind":       envelope(func(u *runtime.Unknown) { u.Kind = "Secret" }),
		"other version":    envelope(func(u *runtime.Unknown) { u.APIVersion = "v2" }),
		"content encoding": envelope(func(u *runtime.Unknown) { u.ContentEncoding = "gzip" }),
		"content type":     envelope(func(u *runtime.Unknown) { u.ContentType = "application/json" }),
		"no raw":           envelope(func(u *runtime.Unknown) { u.Raw = nil }),
		"no metadata":      envelope(func(u *runtime.Unknown) { u.Raw = []byte{0x12, 0} }),
		"metadata twice":   envelope(metaTwice),
		"rv twice":         envelope(rvTwice),
	} {
		if _, err := protolist.Parse(v, res.GVK()); !errors.Is(err, protolist.ErrNotSpliceable) {
			t.Errorf("%s: %v, want ErrNotSpliceable", name, err)
		}
	}
}

func BenchmarkSplice(b *testing.B) {
	c, err := codec.New()
	if err != nil {
		b.Fatal(err)
	}
	res := registry.Core()[1]
	var stored [][]byte
	for i := range 1000 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Namespace: "loadtest", UID: "0b4d8d6c-3f3a-4c1e-9d8e-000000000000"},
			Data: map[string]string{"v": string(bytes.Repeat([]byte("x"), 1000))}}
		v, err := c.EncodeStorage(cm)
		if err != nil {
			b.Fatal(err)
		}
		stored = append(stored, v)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w := protolist.NewWriter(res.GVK().GroupVersion().WithKind(res.ListKind), 256<<10)
		for _, v := range stored {
			o, err := protolist.Parse(v, res.GVK())
			if err != nil {
				b.Fatal(err)
			}
			w.Add(&o, 123456)
		}
		if _, err := w.Finish(&metav1.ListMeta{ResourceVersion: "123456"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEnvelopeIsDecodedEncoded: for every kind served, an object's
// envelope spliced from its stored bytes is byte for byte the object
// decoded (with its resourceVersion) and encoded by the protobuf
// serializer, and Size is its size.
func TestEnvelopeIsDecodedEncoded(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range registry.Standard() {
		gvk := res.GVK()
		for i, obj := range objects(res, 7) {
			v, err := c.EncodeStorage(obj)
			if err != nil {
				t.Fatal(err)
			}
			rev := []int64{1, 127, 128, 99999, 1 << 40}[i%5]
			dec := res.New()
			if err := c.DecodeStorage(v, rev, dec); err != nil {
				t.Fatal(err)
			}
			want, err := c.EncodeToBytes(dec, negotiation.Protobuf)
			if err != nil {
				t.Fatal(err)
			}
			o, err := protolist.Parse(v, gvk)
			if err != nil {
				t.Fatal(err)
			}
			env := o.Envelope(gvk.GroupVersion().String(), gvk.Kind, rev)
			got := env.AppendTo([]byte("x"))
			if !bytes.Equal(got[1:], want) || got[0] != 'x' {
				t.Errorf("%s/%d: spliced envelope differs from the encoded object:\n%q\n%q", res.GVR, i, got[1:], want)
			}
			if n := env.Size(); n != len(want) {
				t.Errorf("%s/%d: Size %d, encoded %d bytes", res.GVR, i, n, len(want))
			}
		}
	}
}
