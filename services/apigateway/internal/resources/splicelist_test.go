package resources

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/readparams"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// fakeKV is a store that answers Range (all the list path calls) over a
// fixed set of keys, at one revision.
type fakeKV struct {
	rev int64
	kvs []*storev1.KeyValue // in key order
}

var _ grpc.ClientConnInterface = (*fakeKV)(nil)

func (f *fakeKV) put(key string, value []byte) {
	f.rev++
	f.kvs = append(f.kvs, &storev1.KeyValue{Key: []byte(key), Value: value, ModRevision: f.rev, CreateRevision: f.rev})
	sort.Slice(f.kvs, func(i, j int) bool { return bytes.Compare(f.kvs[i].Key, f.kvs[j].Key) < 0 })
}

func (f *fakeKV) Invoke(_ context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	if method != storev1.KVService_Range_FullMethodName {
		return status.Error(codes.Unimplemented, method)
	}
	req, resp := args.(*storev1.RangeRequest), reply.(*storev1.RangeResponse)
	resp.Header = &storev1.ResponseHeader{Revision: f.rev}
	if req.Revision > 0 {
		resp.Header.Revision = req.Revision
	}
	for _, kv := range f.kvs {
		in := bytes.Compare(kv.Key, req.Key) >= 0 && bytes.Compare(kv.Key, req.RangeEnd) < 0
		if len(req.RangeEnd) == 0 {
			in = bytes.Equal(kv.Key, req.Key)
		}
		if !in {
			continue
		}
		resp.Count++
		if req.CountOnly {
			continue
		}
		if req.Limit > 0 && int64(len(resp.Kvs)) == req.Limit {
			resp.More = true
			continue
		}
		resp.Kvs = append(resp.Kvs, kv)
	}
	return nil
}

func (f *fakeKV) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "streams")
}

// listStream records what a List sends.
type listStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*httpbody.HttpBody
}

func (l *listStream) Context() context.Context { return l.ctx }

func (l *listStream) Send(b *httpbody.HttpBody) error {
	l.sent = append(l.sent, b)
	return nil
}

func (l *listStream) body() []byte {
	var out []byte
	for _, b := range l.sent {
		out = append(out, b.GetData()...)
	}
	return out
}

// seedObjects stores objects of several kinds — namespaced and
// cluster-scoped, with and without labels, managed fields and non-ASCII
// text, 1,200 ConfigMaps in one namespace (more than a store page).
func seedObjects(t testing.TB, c *codec.Codec, reg *registry.Registry, kv *fakeKV) {
	t.Helper()
	now := metav1.NewTime(time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC))
	put := func(gvr schema.GroupVersionResource, obj runtime.Object) {
		res, ok := reg.Lookup(gvr)
		if !ok {
			t.Fatalf("%s not served", gvr)
		}
		acc, _ := meta.Accessor(obj)
		acc.SetCreationTimestamp(now)
		acc.SetUID(types.UID(fmt.Sprintf("7d9b6a1e-0000-4000-8000-%012d", len(kv.kvs))))
		v, err := c.EncodeStorage(obj)
		if err != nil {
			t.Fatal(err)
		}
		kv.put(res.Key(acc.GetNamespace(), acc.GetName()), v)
	}
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", Time: &now,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:k":{}}}`)}}}
	cms := corev1.SchemeGroupVersion.WithResource("configmaps")
	for i := range 1200 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i), Namespace: "big"},
			Data: map[string]string{"k": fmt.Sprintf("välue ✓ %d", i)}}
		if i%3 == 0 {
			cm.Labels = map[string]string{"app": "demo"}
			cm.ManagedFields = managed
		}
		put(cms, cm)
	}
	put(cms, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "small", Annotations: map[string]string{"a": "日本"}}})
	secrets := corev1.SchemeGroupVersion.WithResource("secrets")
	for i := range 5 {
		put(secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i), Namespace: "small", ManagedFields: managed},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"p": {0, 0xff, byte(i)}}})
	}
	for _, name := range []string{"big", "small", "ünused-is-not-a-name-but-stored-anyway"} {
		put(corev1.SchemeGroupVersion.WithResource("namespaces"), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/metadata.name": name}},
			Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}})
	}
	holder := "me"
	put(coordinationv1.SchemeGroupVersion.WithResource("leases"), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "small"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &metav1.MicroTime{Time: now.Time}}})
}

func newListServer(t testing.TB) (*Server, *fakeKV, *codec.Codec) {
	t.Helper()
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Standard()...)
	kv := &fakeKV{}
	seedObjects(t, c, reg, kv)
	srv, err := New(Config{Registry: reg, Codec: c, Store: storage.New(kv)})
	if err != nil {
		t.Fatal(err)
	}
	return srv, kv, c
}

// decodingList is the list as List served every protobuf list before
// splicing: each object decoded, the typed list encoded.
func decodingList(t *testing.T, s *Server, req *apiv1.ListRequest) []byte {
	t.Helper()
	res, err := s.resolve(context.Background(), req.GetRef(), false)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := selection.New(res, req.GetLabelSelector(), req.GetFieldSelector())
	if err != nil {
		t.Fatal(err)
	}
	rd, err := readparams.List(listQuery(req), keyRange(res, req.GetRef().GetNamespace(), filter))
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.list(context.Background(), res, req, rd, filter)
	if err != nil {
		t.Fatal(err)
	}
	body, err := s.respondAs(res, list, output{mediaType: negotiation.Protobuf})
	if err != nil {
		t.Fatal(err)
	}
	return body.GetData()
}

// TestSplicedListIsDecodedList: a protobuf list spliced from the stored
// bytes is byte for byte the list the decoding path encodes, and decodes
// to the same typed list — whole and in chunks (limit, continue,
// remainingItemCount), namespaced, across namespaces and cluster-scoped.
func TestSplicedListIsDecodedList(t *testing.T) {
	s, _, c := newListServer(t)
	cms := corev1.SchemeGroupVersion.WithResource("configmaps")
	for _, tc := range []struct {
		gvr            schema.GroupVersionResource
		ns             string
		labels, fields string
		empty          bool
	}{
		{gvr: cms, ns: "big"},
		{gvr: cms, ns: ""},
		{gvr: cms, ns: "small"},
		{gvr: cms, ns: "none", empty: true},
		{gvr: corev1.SchemeGroupVersion.WithResource("secrets"), ns: "small"},
		{gvr: corev1.SchemeGroupVersion.WithResource("namespaces"), ns: ""},
		{gvr: coordinationv1.SchemeGroupVersion.WithResource("leases"), ns: ""},
		{gvr: corev1.SchemeGroupVersion.WithResource("events"), ns: "", empty: true},
		// Selectors on names, namespaces and labels are read from the
		// stored metadata.
		{gvr: cms, ns: "big", labels: "app=demo"},
		{gvr: cms, ns: "", labels: "app!=demo"},
		{gvr: cms, ns: "", labels: "app in (demo),!other"},
		{gvr: cms, ns: "big", fields: "metadata.name=cm-0003"},
		{gvr: cms, ns: "", fields: "metadata.name=cm-0003", labels: "app"},
		{gvr: cms, ns: "", fields: "metadata.namespace=small"},
		{gvr: cms, ns: "", fields: "metadata.name!=cm-0003,metadata.namespace!=small"},
		{gvr: cms, ns: "big", labels: "app=nothing", empty: true},
		{gvr: corev1.SchemeGroupVersion.WithResource("namespaces"), labels: "kubernetes.io/metadata.name=small"},
	} {
		res, _ := s.cfg.Registry.Lookup(tc.gvr)
		listGVK := res.GVK().GroupVersion().WithKind(res.ListKind)
		for _, limit := range []int64{0, 1, 2, 499, 500, 501, 700, 5000} {
			name := fmt.Sprintf("%s/%s/%s/%s/limit=%d", tc.gvr.Resource, tc.ns, tc.labels, tc.fields, limit)
			cont, pages, items, nonEmpty := "", 0, 0, false
			for {
				req := &apiv1.ListRequest{
					Ref:    &apiv1.ResourceRef{Group: tc.gvr.Group, Version: tc.gvr.Version, Resource: tc.gvr.Resource, Namespace: tc.ns},
					Accept: negotiation.Protobuf, Limit: limit, ContinueToken: cont,
					LabelSelector: tc.labels, FieldSelector: tc.fields,
				}
				st := &listStream{ctx: context.Background()}
				if err := s.List(req, st); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				got, want := st.body(), decodingList(t, s, req)
				if !bytes.Equal(got, want) {
					t.Fatalf("%s page %d: spliced %d bytes, decoded and encoded %d", name, pages, len(got), len(want))
				}
				gotList, wantList := res.NewList(), res.NewList()
				if err := c.Decode(got, negotiation.Protobuf, listGVK, gotList); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := c.Decode(want, negotiation.Protobuf, listGVK, wantList); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !apiequality.Semantic.DeepEqual(gotList, wantList) {
					t.Fatalf("%s page %d: decoded lists differ", name, pages)
				}
				lm, _ := meta.ListAccessor(gotList)
				n := meta.LenList(gotList)
				// The decoding path sends one message; the splice sends
				// the head apart from the items, if any.
				if len(st.sent) < 2 && n > 0 {
					t.Fatalf("%s: %d messages: not spliced", name, len(st.sent))
				}
				nonEmpty = nonEmpty || n > 0
				items += n
				pages++
				if limit > 0 && n > int(limit) {
					t.Fatalf("%s: %d items", name, n)
				}
				if lm.GetContinue() == "" {
					if lm.GetRemainingItemCount() != nil {
						t.Fatalf("%s: remainingItemCount on the last page", name)
					}
					break
				}
				// A count of keys is a count of items only without a
				// selector.
				if r := lm.GetRemainingItemCount(); (r == nil || *r <= 0) != (tc.labels != "" || tc.fields != "") {
					t.Fatalf("%s: continue with remaining count %v", name, r)
				}
				cont = lm.GetContinue()
			}
			if nonEmpty == tc.empty {
				t.Fatalf("%s: %d items", name, items)
			}
			if tc.gvr.Resource == "configmaps" && tc.ns == "big" && tc.labels == "" && tc.fields == "" && items != 1200 {
				t.Fatalf("%s: %d items in %d pages", name, items, pages)
			}
		}
	}
}

// TestSpliceFallsBack: lists the splice cannot reproduce — a selector on a
// kind's own fields, PartialObjectMetadata, a stored value it does not
// take — are served the decoding way, with the same result as before.
func TestSpliceFallsBack(t *testing.T) {
	s, kv, c := newListServer(t)
	// A second ObjectMeta field, which decoders merge into the first.
	merged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "zz-merged", Namespace: "small"}}
	stored, err := c.EncodeStorage(merged)
	if err != nil {
		t.Fatal(err)
	}
	var unk runtime.Unknown
	if err := unk.Unmarshal(stored[4:]); err != nil {
		t.Fatal(err)
	}
	unk.Raw = append(unk.Raw, 0x0a, 5, 0x12, 3, 'g', 'e', 'n') // metadata{generateName: "gen"}
	raw, err := unk.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	kv.put("/registry/configmaps/small/zz-merged", append([]byte("k8s\x00"), raw...))

	cms := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "small"}
	for name, req := range map[string]*apiv1.ListRequest{
		"unspliceable value": {Ref: cms, Accept: negotiation.Protobuf},
		"a kind's own field": {Ref: &apiv1.ResourceRef{Version: "v1", Resource: "secrets", Namespace: "small"}, Accept: negotiation.Protobuf, FieldSelector: "type=Opaque"},
		"own and metadata fields": {Ref: &apiv1.ResourceRef{Version: "v1", Resource: "secrets"}, Accept: negotiation.Protobuf, LabelSelector: "x!=y",
			FieldSelector: "metadata.name=s-1,type=Opaque"},
	} {
		st := &listStream{ctx: context.Background()}
		if err := s.List(req, st); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(st.sent) != 1 {
			t.Errorf("%s: %d messages, want the decoding path's one", name, len(st.sent))
		}
		if got, want := st.body(), decodingList(t, s, req); !bytes.Equal(got, want) {
			t.Errorf("%s: the response is not the decoding path's", name)
		}
	}
	var list corev1.ConfigMapList
	st := &listStream{ctx: context.Background()}
	if err := s.List(&apiv1.ListRequest{Ref: cms, Accept: negotiation.Protobuf}, st); err != nil {
		t.Fatal(err)
	}
	if err := c.Decode(st.body(), negotiation.Protobuf, corev1.SchemeGroupVersion.WithKind("ConfigMapList"), &list); err != nil {
		t.Fatal(err)
	}
	if last := list.Items[len(list.Items)-1]; last.Name != "zz-merged" || last.GenerateName != "gen" {
		t.Errorf("merged metadata read as %q %q", last.Name, last.GenerateName)
	}

	st = &listStream{ctx: context.Background()}
	if err := s.List(&apiv1.ListRequest{Ref: cms, Accept: "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}, st); err != nil {
		t.Fatal(err)
	}
	var partial metav1.PartialObjectMetadataList
	if err := c.Decode(st.body(), negotiation.Protobuf, metav1.SchemeGroupVersion.WithKind("PartialObjectMetadataList"), &partial); err != nil {
		t.Fatalf("a PartialObjectMetadataList request: %d messages: %v", len(st.sent), err)
	}
	if len(st.sent) != 1 || len(partial.Items) != len(list.Items) || partial.Items[0].Name != list.Items[0].Name {
		t.Errorf("a PartialObjectMetadataList request: %d messages, %d items", len(st.sent), len(partial.Items))
	}
}

// BenchmarkListProtobuf compares the spliced protobuf list with the
// decoding path over 1,200 ConfigMaps (the store is an in-memory fake, so
// only the gateway's own work is measured).
func BenchmarkListProtobuf(b *testing.B) {
	s, _, _ := newListServer(b)
	req := &apiv1.ListRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "big"}, Accept: negotiation.Protobuf}
	b.Run("spliced", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.List(req, &listStream{ctx: context.Background()}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoded", func(b *testing.B) {
		b.ReportAllocs()
		res, _ := s.resolve(context.Background(), req.GetRef(), false)
		filter, _ := selection.New(res, "", "")
		rd, _ := readparams.List(listQuery(req), keyRange(res, req.GetRef().GetNamespace(), filter))
		for b.Loop() {
			list, err := s.list(context.Background(), res, req, rd, filter)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.respondAs(res, list, output{mediaType: negotiation.Protobuf}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
