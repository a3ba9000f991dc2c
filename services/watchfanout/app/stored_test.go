package app_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/watchframe"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// watchfanout keeps objects as the store holds them and writes protobuf
// frames, lists and gets from those bytes; the tests below check them
// against what decoding the stored objects and encoding them gives, byte
// for byte, for every kind it serves.

// richObject is an object of res with labels, annotations, managed
// fields, owner references and non-ASCII text; gen varies them (and a
// ConfigMap's size).
func richObject(res *registry.Resource, ns, name string, gen int) runtime.Object {
	now := metav1.NewTime(time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC))
	obj := res.New()
	acc, err := meta.Accessor(obj)
	if err != nil {
		panic(err)
	}
	acc.SetName(name)
	if res.Namespaced {
		acc.SetNamespace(ns)
	}
	acc.SetUID(types.UID("0b4d8d6c-3f3a-4c1e-9d8e-" + name))
	acc.SetCreationTimestamp(now)
	acc.SetLabels(map[string]string{"app": "démo", "gen": strconv.Itoa(gen)})
	acc.SetAnnotations(map[string]string{"note": "日本語 ✓", "empty": ""})
	acc.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: res.GVR.GroupVersion().String(),
		Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:app":{}}}}`)},
	}})
	acc.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "u-1"}})
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		// Of sizes across the varint lengths of the frame's lengths.
		cm.Data = map[string]string{"k": fmt.Sprintf("välue %d %0*d", gen, 200*gen, 0)}
	}
	return obj
}

// putObject writes obj of res as the gateway does; it returns the
// revision.
func (e *env) putObject(res *registry.Resource, obj runtime.Object) int64 {
	e.t.Helper()
	val, err := e.codec.EncodeStorage(obj)
	if err != nil {
		e.t.Fatal(err)
	}
	acc, _ := meta.Accessor(obj)
	resp, err := e.kv.Txn(e.t.Context(), &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{
		Key: []byte(res.Key(acc.GetNamespace(), acc.GetName())), Value: val}}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.GetHeader().GetRevision()
}

// deleteObject deletes an object of res; it returns the revision.
func (e *env) deleteObject(res *registry.Resource, ns, name string) int64 {
	e.t.Helper()
	resp, err := e.kv.Txn(e.t.Context(), &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestDeleteRange{RequestDeleteRange: &storev1.DeleteRangeRequest{
		Key: []byte(res.Key(ns, name))}}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.GetHeader().GetRevision()
}

// decodedAt is obj as a reader of the store decodes it at rev: the
// stored bytes decoded, resourceVersion rev.
func (e *env) decodedAt(res *registry.Resource, obj runtime.Object, rev int64) runtime.Object {
	e.t.Helper()
	val, err := e.codec.EncodeStorage(obj)
	if err != nil {
		e.t.Fatal(err)
	}
	out := res.New()
	if err := e.codec.DecodeStorage(val, rev, out); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// readFrames reads the frames of a watch, as they came (not decoded),
// until it has n of them; with an error, those that arrived.
func (e *env) readFrames(ctx context.Context, req *watchv1.WatchRequest, n int) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := e.watch.Watch(ctx, req)
	if err != nil {
		return nil, err
	}
	var frames [][]byte
	for len(frames) < n {
		resp, err := cl.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return frames, fmt.Errorf("after %d of %d frames: %w", len(frames), n, err)
		}
		b := resp.GetFrames()
		if req.GetEncoding() != watchv1.Encoding_ENCODING_PROTOBUF {
			for _, line := range bytes.SplitAfter(b, []byte("\n")) {
				if len(line) > 0 {
					frames = append(frames, line)
				}
			}
			continue
		}
		for len(b) > 0 {
			if len(b) < 4 || int(binary.BigEndian.Uint32(b))+4 > len(b) {
				return frames, fmt.Errorf("bad protobuf frame: %q", b)
			}
			n := int(binary.BigEndian.Uint32(b)) + 4
			frames = append(frames, b[:n])
			b = b[n:]
		}
	}
	return frames, nil
}

// rawFrames is readFrames that fails the test on an error.
func (e *env) rawFrames(req *watchv1.WatchRequest, n int) [][]byte {
	e.t.Helper()
	frames, err := e.readFrames(e.t.Context(), req, n)
	if err != nil {
		e.t.Fatal(err)
	}
	return frames
}

// want is one frame expected: the event type and the object, decoded.
type want struct {
	typ watch.EventType
	obj runtime.Object
}

// checkFrames compares frames with the encoder's frames of want.
func checkFrames(t *testing.T, name string, enc *watchframe.Encoder, got [][]byte, wants []want) {
	t.Helper()
	if len(got) != len(wants) {
		t.Fatalf("%s: %d frames, want %d", name, len(got), len(wants))
	}
	for i, w := range wants {
		exp, err := enc.Frame(w.typ, w.obj)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[i], exp) {
			t.Errorf("%s: frame %d (%s) differs from the decoded object's encoding:\n got %q\nwant %q", name, i, w.typ, got[i], exp)
		}
	}
}

// TestStoredFramesListsAndGetsAreDecodedEncoded: for every served kind,
// the protobuf frames of a watch (initial ADDED, MODIFIED, DELETED at the
// delete's revision, and replayed from the history), the JSON frames, and
// protobuf lists (whole, and chunked with a continue token) and gets are
// byte for byte what decoding the stored objects and encoding them gives.
func TestStoredFramesListsAndGetsAreDecodedEncoded(t *testing.T) {
	e := newEnv(t, app.Config{})
	ctx := t.Context()
	for _, res := range registry.Standard() {
		ref := &watchv1.Resource{Group: res.GVR.Group, Version: res.GVR.Version, Resource: res.GVR.Resource}
		name := res.GVR.String()
		pb := watchframe.NewEncoder(e.codec, res, watchframe.Format{MediaType: negotiation.Protobuf}, nil)
		js := watchframe.NewEncoder(e.codec, res, watchframe.Format{MediaType: negotiation.JSON}, nil)

		a, b := richObject(res, "ns", "a", 1), richObject(res, "ns", "b", 2)
		revA, revB := e.putObject(res, a), e.putObject(res, b)
		// Initial state of a protobuf watch.
		// RV unset: the consistent state first.
		initial := e.rawFrames(&watchv1.WatchRequest{Resource: ref, Encoding: watchv1.Encoding_ENCODING_PROTOBUF}, 2)
		checkFrames(t, name+" initial", pb, initial, []want{{watch.Added, e.decodedAt(res, a, revA)}, {watch.Added, e.decodedAt(res, b, revB)}})

		a2 := richObject(res, "ns", "a", 3)
		revA2 := e.putObject(res, a2)
		ns := "ns"
		if !res.Namespaced {
			ns = ""
		}
		revDel := e.deleteObject(res, ns, "b")
		changes := []want{
			{watch.Modified, e.decodedAt(res, a2, revA2)},
			// A delete: the last state at the delete's revision.
			{watch.Deleted, e.decodedAt(res, b, revDel)},
		}
		from := strconv.FormatInt(revB, 10)
		for _, enc := range []struct {
			enc watchv1.Encoding
			e   *watchframe.Encoder
		}{{watchv1.Encoding_ENCODING_PROTOBUF, pb}, {watchv1.Encoding_ENCODING_JSON, js}} {
			got := e.rawFrames(&watchv1.WatchRequest{Resource: ref, ResourceVersion: from, Encoding: enc.enc}, 2)
			checkFrames(t, fmt.Sprintf("%s %s changes", name, enc.enc), enc.e, got, changes)
		}

		// Lists: whole, then in chunks of one.
		c := richObject(res, "ns", "c", 4)
		revC := e.putObject(res, c)
		items := []runtime.Object{e.decodedAt(res, a2, revA2), e.decodedAt(res, c, revC)}
		listRV := strconv.FormatInt(revC, 10)
		whole, err := e.watch.List(ctx, &watchv1.ListRequest{Resource: ref, Namespace: "ns", ResourceVersion: listRV, ResourceVersionMatch: "NotOlderThan", Encoding: watchv1.Encoding_ENCODING_PROTOBUF})
		if err != nil {
			t.Fatal(err)
		}
		if exp := e.encodedList(res, items, metav1.ListMeta{ResourceVersion: whole.GetResourceVersion()}, negotiation.Protobuf); !bytes.Equal(whole.GetData(), exp) {
			t.Errorf("%s: list differs from the decoded list's encoding:\n got %q\nwant %q", name, whole.GetData(), exp)
		}
		first, err := e.watch.List(ctx, &watchv1.ListRequest{Resource: ref, Namespace: "ns", Limit: 1, Encoding: watchv1.Encoding_ENCODING_PROTOBUF})
		if err != nil {
			t.Fatal(err)
		}
		if first.GetContinueToken() == "" {
			t.Fatalf("%s: a list with limit 1 of 2 objects has no continue token", name)
		}
		lm := metav1.ListMeta{ResourceVersion: first.GetResourceVersion(), Continue: first.GetContinueToken(), RemainingItemCount: first.RemainingItemCount}
		if exp := e.encodedList(res, items[:1], lm, negotiation.Protobuf); !bytes.Equal(first.GetData(), exp) {
			t.Errorf("%s: first chunk differs from the decoded list's encoding:\n got %q\nwant %q", name, first.GetData(), exp)
		}
		rest, err := e.watch.List(ctx, &watchv1.ListRequest{Resource: ref, Namespace: "ns", ContinueToken: first.GetContinueToken(), Encoding: watchv1.Encoding_ENCODING_PROTOBUF})
		if err != nil {
			t.Fatal(err)
		}
		if exp := e.encodedList(res, items[1:], metav1.ListMeta{ResourceVersion: rest.GetResourceVersion()}, negotiation.Protobuf); !bytes.Equal(rest.GetData(), exp) {
			t.Errorf("%s: continued chunk differs from the decoded list's encoding:\n got %q\nwant %q", name, rest.GetData(), exp)
		}

		// JSON lists, from each object's memoized JSON: a2's was encoded
		// for the JSON watch above (its MODIFIED frame), c's is encoded
		// by the list. Whole, chunked and continued, and streamed.
		jsList := func(req *watchv1.ListRequest) *watchv1.ListResponse {
			t.Helper()
			req.Encoding = watchv1.Encoding_ENCODING_JSON
			resp, err := e.watch.List(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			streamed, _ := e.streamList(ctx, req)
			if !bytes.Equal(streamed.GetData(), resp.GetData()) || streamed.GetResourceVersion() != resp.GetResourceVersion() ||
				streamed.GetContinueToken() != resp.GetContinueToken() || streamed.GetRemainingItemCount() != resp.GetRemainingItemCount() {
				t.Errorf("%s: StreamList differs from List:\n got %q (%v)\nwant %q (%v)", name, streamed.GetData(), streamed, resp.GetData(), resp)
			}
			return resp
		}
		for round := range 2 { // the second from what the first memoized
			whole = jsList(&watchv1.ListRequest{Resource: ref, Namespace: "ns", ResourceVersion: listRV, ResourceVersionMatch: "NotOlderThan"})
			if exp := e.encodedList(res, items, metav1.ListMeta{ResourceVersion: whole.GetResourceVersion()}, negotiation.JSON); !bytes.Equal(whole.GetData(), exp) {
				t.Errorf("%s: JSON list (round %d) differs from the decoded list's encoding:\n got %q\nwant %q", name, round, whole.GetData(), exp)
			}
		}
		first = jsList(&watchv1.ListRequest{Resource: ref, Namespace: "ns", Limit: 1})
		lm = metav1.ListMeta{ResourceVersion: first.GetResourceVersion(), Continue: first.GetContinueToken(), RemainingItemCount: first.RemainingItemCount}
		if exp := e.encodedList(res, items[:1], lm, negotiation.JSON); !bytes.Equal(first.GetData(), exp) {
			t.Errorf("%s: first JSON chunk differs from the decoded list's encoding:\n got %q\nwant %q", name, first.GetData(), exp)
		}
		empty := jsList(&watchv1.ListRequest{Resource: ref, Namespace: "ns", LabelSelector: "no=such"})
		if exp := e.encodedList(res, nil, metav1.ListMeta{ResourceVersion: empty.GetResourceVersion()}, negotiation.JSON); !bytes.Equal(empty.GetData(), exp) {
			t.Errorf("%s: empty JSON list differs from the decoded list's encoding:\n got %q\nwant %q", name, empty.GetData(), exp)
		}

		// Get.
		got, err := e.watch.Get(ctx, &watchv1.GetRequest{Resource: ref, Namespace: ns, Name: "a", ResourceVersion: "0", Encoding: watchv1.Encoding_ENCODING_PROTOBUF})
		if err != nil {
			t.Fatal(err)
		}
		exp, err := e.codec.EncodeToBytes(e.decodedAt(res, a2, revA2), negotiation.Protobuf)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.GetData(), exp) || got.GetResourceVersion() != strconv.FormatInt(revA2, 10) {
			t.Errorf("%s: get (rv %s) differs from the decoded object's encoding:\n got %q\nwant %q", name, got.GetResourceVersion(), got.GetData(), exp)
		}
		got, err = e.watch.Get(ctx, &watchv1.GetRequest{Resource: ref, Namespace: ns, Name: "a", ResourceVersion: "0", Encoding: watchv1.Encoding_ENCODING_JSON})
		if err != nil {
			t.Fatal(err)
		}
		if exp, err = e.codec.EncodeToBytes(e.decodedAt(res, a2, revA2), negotiation.JSON); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.GetData(), exp) {
			t.Errorf("%s: JSON get differs from the decoded object's encoding:\n got %q\nwant %q", name, got.GetData(), exp)
		}
	}
}

// encodedList is the list of items with metadata lm, encoded in
// mediaType from the decoded objects.
func (e *env) encodedList(res *registry.Resource, items []runtime.Object, lm metav1.ListMeta, mediaType string) []byte {
	e.t.Helper()
	list := res.NewList()
	// As kube-apiserver writes a list: items without their own kind.
	bare := make([]runtime.Object, len(items))
	for i, it := range items {
		bare[i] = it.DeepCopyObject()
		bare[i].GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	}
	if err := meta.SetList(list, bare); err != nil {
		e.t.Fatal(err)
	}
	la, _ := meta.ListAccessor(list)
	la.SetResourceVersion(lm.ResourceVersion)
	la.SetContinue(lm.Continue)
	la.SetRemainingItemCount(lm.RemainingItemCount)
	data, err := e.codec.EncodeToBytes(list, mediaType)
	if err != nil {
		e.t.Fatal(err)
	}
	return data
}

// streamList reads a StreamList whole: its data joined, the first
// message's metadata, and how many messages carried it.
func (e *env) streamList(ctx context.Context, req *watchv1.ListRequest) (*watchv1.StreamListResponse, int) {
	e.t.Helper()
	ls, err := e.watch.StreamList(ctx, &watchv1.StreamListRequest{List: req})
	if err != nil {
		e.t.Fatal(err)
	}
	var whole *watchv1.StreamListResponse
	n := 0
	for {
		msg, err := ls.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			e.t.Fatal(err)
		}
		n++
		// Each fits the 1 MiB buffers of gRPC's pool (objects here are
		// far smaller than a message).
		if len(msg.GetData()) > 1<<20-1<<10 {
			e.t.Errorf("StreamList message %d carries %d bytes", n, len(msg.GetData()))
		}
		if whole == nil {
			whole = msg
			continue
		}
		if msg.GetResourceVersion() != "" || msg.GetContinueToken() != "" || msg.RemainingItemCount != nil {
			e.t.Errorf("StreamList message %d carries metadata: %v", n, msg)
		}
		whole.Data = append(whole.Data, msg.GetData()...)
	}
	return whole, n
}

// TestFieldSelectorTransitions: a watch with a selector on a kind's own
// field (a core Event's reason: watchfanout decodes the stored object to
// read it) sees the object enter (ADDED), change (MODIFIED) and leave
// (DELETED with the previous state at the event's revision) its
// selector, in protobuf byte for byte what decoding and encoding give,
// live and replayed from the history; a label selector on the same
// object (read from the stored metadata) agrees.
func TestFieldSelectorTransitions(t *testing.T) {
	e := newEnv(t, app.Config{})
	res, ok := registry.New(registry.Standard()...).Lookup(corev1.SchemeGroupVersion.WithResource("events"))
	if !ok {
		t.Fatal("no core events")
	}
	ref := &watchv1.Resource{Version: "v1", Resource: "events"}
	pb := watchframe.NewEncoder(e.codec, res, watchframe.Format{MediaType: negotiation.Protobuf}, nil)
	event := func(reason string, gen int) *corev1.Event {
		ev := richObject(res, "ns", "ev", gen).(*corev1.Event)
		ev.Reason = reason
		ev.Labels["reason"] = reason
		return ev
	}
	start := e.putObject(res, event("Pulling", 0))
	selectors := map[string]*watchv1.WatchRequest{
		"field": {Resource: ref, Namespace: "ns", FieldSelector: "reason=Started", ResourceVersion: strconv.FormatInt(start, 10), Encoding: watchv1.Encoding_ENCODING_PROTOBUF},
		"label": {Resource: ref, Namespace: "ns", LabelSelector: "reason=Started", ResourceVersion: strconv.FormatInt(start, 10), Encoding: watchv1.Encoding_ENCODING_PROTOBUF},
	}
	type result struct {
		frames [][]byte
		which  string
	}
	live := make(chan result, len(selectors))
	for which, req := range selectors {
		go func() {
			frames, err := e.readFrames(t.Context(), req, 4)
			if err != nil {
				t.Error(err)
			}
			live <- result{frames, which}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the watches are open
	entered := event("Started", 1)
	revIn := e.putObject(res, entered)
	changed := event("Started", 2)
	revMod := e.putObject(res, changed)
	revOut := e.putObject(res, event("Killing", 3))
	back := event("Started", 4)
	revBack := e.putObject(res, back)
	wants := []want{
		{watch.Added, e.decodedAt(res, entered, revIn)},
		{watch.Modified, e.decodedAt(res, changed, revMod)},
		// Leaving: the previous state at the event's revision.
		{watch.Deleted, e.decodedAt(res, changed, revOut)},
		{watch.Added, e.decodedAt(res, back, revBack)},
	}
	for range selectors {
		r := <-live
		checkFrames(t, r.which+" selector, live", pb, r.frames, wants)
	}
	for which, req := range selectors {
		checkFrames(t, which+" selector, from the history", pb, e.rawFrames(req, 4), wants)
	}
}

// TestStreamListSendsChunks: a JSON list larger than one message (1.6 MB)
// is sent by StreamList in several of at most 1 MiB, the list's metadata
// in the first, and joined
// they are List's bytes, a ConfigMapList of every object; a protobuf list
// likewise (spliced into chunks of at most 1 MiB, sent as they are).
func TestStreamListSendsChunks(t *testing.T) {
	e := newEnv(t, app.Config{})
	const n = 400
	data := string(bytes.Repeat([]byte("x"), 4<<10))
	var last int64
	for i := range n {
		last = e.mustPut(configMap("big", fmt.Sprintf("cm-%03d", i), nil, data))
	}
	rv := strconv.FormatInt(last, 10)
	for _, enc := range []watchv1.Encoding{watchv1.Encoding_ENCODING_JSON, watchv1.Encoding_ENCODING_PROTOBUF} {
		req := &watchv1.ListRequest{Resource: cmResource, Namespace: "big", ResourceVersion: rv, ResourceVersionMatch: "NotOlderThan", Encoding: enc}
		whole, err := e.watch.List(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		streamed, msgs := e.streamList(t.Context(), req)
		if msgs < 2 {
			t.Errorf("%s: a list of %d bytes came in %d message(s), want several", enc, len(whole.GetData()), msgs)
		}
		if !bytes.Equal(streamed.GetData(), whole.GetData()) || streamed.GetResourceVersion() != whole.GetResourceVersion() {
			t.Errorf("%s: StreamList (%d bytes, rv %s) differs from List (%d bytes, rv %s)", enc,
				len(streamed.GetData()), streamed.GetResourceVersion(), len(whole.GetData()), whole.GetResourceVersion())
		}
		mt := negotiation.JSON
		if enc == watchv1.Encoding_ENCODING_PROTOBUF {
			mt = negotiation.Protobuf
		}
		var list corev1.ConfigMapList
		if err := e.codec.Decode(streamed.GetData(), mt, corev1.SchemeGroupVersion.WithKind("ConfigMapList"), &list); err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		if len(list.Items) != n || list.Items[n-1].Name != fmt.Sprintf("cm-%03d", n-1) || list.ResourceVersion != streamed.GetResourceVersion() {
			t.Errorf("%s: streamed list holds %d items at %s, want %d at %s", enc, len(list.Items), list.ResourceVersion, n, streamed.GetResourceVersion())
		}
	}
}
