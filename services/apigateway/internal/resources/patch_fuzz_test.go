package resources

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/fieldmanager"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The fuzz targets here send random bodies of each patch type through the
// functions the Patch handler uses (decodePatch and applyPatch, or
// decodeApplied and applyConfig, then prepareUpdate or prepareCreate and
// the storage encoding), against a ConfigMap of about 1 KiB or a
// ServiceAccount (strategic merge lists: secrets, imagePullSecrets, and
// in every kind metadata.finalizers and ownerReferences). Every outcome
// must be an object that encodes for storage or a 4xx Status whose message
// holds no Go internals. The seeds and testdata/fuzz run in every go test;
// hack/fuzz.sh explores for a bounded time.

// fuzzConfigMap is the stored ConfigMap the targets patch (about 1 KiB).
const fuzzConfigMap = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz","namespace":"default",
"labels":{"app":"fuzz","tier":"backend"},"annotations":{"note":"a ConfigMap the fuzz targets patch","owner":"team-a"},
"finalizers":["example.com/keep","example.com/audit"],
"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"parent","uid":"11111111-2222-3333-4444-555555555555"},
{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"66666666-7777-8888-9999-000000000000","controller":true,"blockOwnerDeletion":true}]},
"data":{"config.yaml":"server:\n  port: 8080\n  host: 0.0.0.0\nlogging:\n  level: info\n  format: json\n","feature.flags":"a=true,b=false,c=true",
"greeting":"hello, world","motd":"` + "the quick brown fox jumps over the lazy dog; the quick brown fox jumps over the lazy dog; the quick brown fox jumps over the lazy dog" + `",
"empty":""},"binaryData":{"blob":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}}`

// fuzzServiceAccount is the stored ServiceAccount the targets patch.
const fuzzServiceAccount = `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"fz","namespace":"default","labels":{"app":"fuzz"},
"finalizers":["example.com/keep"]},
"secrets":[{"name":"token-a"},{"name":"token-b","namespace":"default"},{"kind":"Secret","name":"token-c","uid":"abc"}],
"imagePullSecrets":[{"name":"registry-a"},{"name":"registry-b"}],"automountServiceAccountToken":true}`

// patchFuzzer holds a Server without a store and the stored objects the
// targets patch.
type patchFuzzer struct {
	srv    *Server
	ctx    context.Context
	kinds  []*registry.Resource
	stored []runtime.Object // per kind, as read from the store
}

func newPatchFuzzer(tb testing.TB) *patchFuzzer {
	tb.Helper()
	c, err := codec.New()
	if err != nil {
		tb.Fatal(err)
	}
	reg := registry.New(registry.Standard()...)
	srv, err := New(Config{Registry: reg, Codec: c, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return time.Unix(1_700_000_000, 0) }})
	if err != nil {
		tb.Fatal(err)
	}
	pf := &patchFuzzer{srv: srv, ctx: context.Background()}
	for _, k := range []struct{ resource, body string }{{"configmaps", fuzzConfigMap}, {"serviceaccounts", fuzzServiceAccount}} {
		res, ok := reg.Lookup(schema.GroupVersionResource{Version: "v1", Resource: k.resource})
		if !ok {
			tb.Fatalf("%s not served", k.resource)
		}
		pf.kinds = append(pf.kinds, res)
		pf.stored = append(pf.stored, pf.storedObject(tb, res, k.body))
	}
	return pf
}

// storedObject creates body as the Create handler would (managedFields of
// manager "seed", server-owned fields) and returns it as read back from
// the store at revision 7.
func (pf *patchFuzzer) storedObject(tb testing.TB, res *registry.Resource, body string) runtime.Object {
	tb.Helper()
	obj := res.New()
	if _, err := pf.srv.cfg.Codec.DecodeStrict([]byte(body), negotiation.JSON, res.GVK(), obj); err != nil {
		tb.Fatal(err)
	}
	obj, acc, err := pf.srv.trackCreate(pf.ctx, res, obj, "seed")
	if err != nil {
		tb.Fatal(err)
	}
	pf.srv.prepareCreate(res, obj, acc)
	if errs := res.Strategy.Validate(obj); len(errs) > 0 {
		tb.Fatal(errs)
	}
	data, err := pf.srv.cfg.Codec.EncodeStorage(obj)
	if err != nil {
		tb.Fatal(err)
	}
	stored := res.New()
	if err := pf.srv.cfg.Codec.DecodeStorage(data, 7, stored); err != nil {
		tb.Fatal(err)
	}
	return stored
}

// target picks the kind a fuzz input patches.
func (pf *patchFuzzer) target(which uint8) (*registry.Resource, *apiv1.ResourceRef, runtime.Object) {
	i := int(which) % len(pf.kinds)
	res := pf.kinds[i]
	ref := &apiv1.ResourceRef{Group: res.GVR.Group, Version: res.GVR.Version, Resource: res.GVR.Resource, Namespace: "default", Name: "fz"}
	return res, ref, pf.stored[i].DeepCopyObject()
}

// patch runs a non-apply patch as the Patch handler does, up to the
// store write, and checks the outcome.
func (pf *patchFuzzer) patch(t *testing.T, mediaType string, which, fvSel uint8, body []byte) {
	res, ref, old := pf.target(which)
	fv := fieldValidations[int(fvSel)%len(fieldValidations)]
	p, err := pf.srv.decodePatch(pf.ctx, res, ref.GetName(), mediaType, body, fv)
	if err != nil {
		checkPatchError(t, mediaType, body, err)
		return
	}
	obj, err := pf.srv.prepareUpdate(pf.ctx, res, ref, old, false, func(old runtime.Object) (runtime.Object, error) {
		return pf.srv.applyPatch(pf.ctx, res, ref, p, old, "fuzz")
	})
	pf.check(t, mediaType, body, obj, err)
}

// apply runs a server-side apply as the Patch handler does, up to the
// store write: into the stored object, or (create) into an empty one.
func (pf *patchFuzzer) apply(t *testing.T, which, flags uint8, body []byte) {
	const mediaType = negotiation.ApplyPatchYAML
	res, ref, old := pf.target(which)
	fv := fieldValidations[int(flags>>2)%len(fieldValidations)]
	force, create := flags&1 != 0, flags&2 != 0
	kind, err := fieldmanager.ForKind(res, nil)
	if err != nil {
		t.Fatal(err)
	}
	applied, err := pf.srv.decodeApplied(pf.ctx, body, fv)
	if err != nil {
		checkPatchError(t, mediaType, body, err)
		return
	}
	if !create {
		obj, err := pf.srv.prepareUpdate(pf.ctx, res, ref, old, false, func(old runtime.Object) (runtime.Object, error) {
			return pf.srv.applyConfig(pf.ctx, kind, "", old, applied, "fuzz", force)
		})
		pf.check(t, mediaType, body, obj, err)
		return
	}
	obj, err := pf.srv.applyConfig(pf.ctx, kind, "", res.New(), applied, "fuzz", force)
	if err != nil {
		checkPatchError(t, mediaType, body, err)
		return
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkNamespace(res, acc, ref.GetNamespace()); err != nil {
		checkPatchError(t, mediaType, body, err)
		return
	}
	pf.srv.prepareCreate(res, obj, acc)
	if errs := res.Strategy.Validate(obj); len(errs) > 0 {
		checkPatchError(t, mediaType, body, apierrors.NewInvalid(res.GVK().GroupKind(), acc.GetName(), errs))
		return
	}
	pf.check(t, mediaType, body, obj, nil)
}

// check requires a patched object that encodes for storage, or a 4xx.
func (pf *patchFuzzer) check(t *testing.T, mediaType string, body []byte, obj runtime.Object, err error) {
	if err != nil {
		checkPatchError(t, mediaType, body, err)
		return
	}
	data, err := pf.srv.cfg.Codec.EncodeStorage(obj)
	if err != nil {
		t.Fatalf("%s %q: the patched object does not encode: %v", mediaType, body, err)
	}
	if len(data) > 2*maxPatchedObjectBytes {
		t.Fatalf("%s %q: the patched object is %d bytes", mediaType, body, len(data))
	}
}

// checkPatchError requires a Kubernetes Status with a 4xx code and a
// message free of Go internals.
func checkPatchError(t *testing.T, mediaType string, body []byte, err error) {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		t.Fatalf("%s %q: %T is not a Status: %v", mediaType, body, err, err)
	}
	st := se.Status()
	if st.Code < 400 || st.Code > 499 {
		t.Fatalf("%s %q: %d %s: %s", mediaType, body, st.Code, st.Reason, st.Message)
	}
	for _, internal := range []string{"panic:", "goroutine ", "runtime error:", "runtime/debug", ".go:"} {
		if strings.Contains(st.Message, internal) {
			t.Fatalf("%s %q: the message holds %q: %s", mediaType, body, internal, st.Message)
		}
	}
}

var fieldValidations = []fieldValidation{validationWarn, validationStrict, validationIgnore}

// fuzzPatch fuzzes patches of mediaType, seeded with each body as a patch
// of each of the objects in which.
func fuzzPatch(f *testing.F, mediaType string, which []uint8, bodies ...string) {
	for _, b := range bodies {
		for _, w := range which {
			f.Add(w, uint8(0), []byte(b))
		}
	}
	pf := newPatchFuzzer(f)
	f.Fuzz(func(t *testing.T, which, fv uint8, body []byte) {
		pf.patch(t, mediaType, which, fv, body)
	})
}

// FuzzJSONPatch: `go test -fuzz FuzzJSONPatch`.
func FuzzJSONPatch(f *testing.F) {
	fuzzPatch(f, negotiation.JSONPatch, []uint8{0},
		`[{"op":"add","path":"/data/new","value":"v"}]`,
		`[{"op":"replace","path":"/data/greeting","value":"hi"},{"op":"remove","path":"/data/empty"}]`,
		`[{"op":"test","path":"/data/greeting","value":"nope"}]`,
		`[{"op":"move","from":"/data/motd","path":"/data/m"}]`,
		`[{"op":"copy","from":"/data","path":"/metadata/annotations"}]`,
		`[{"op":"add","path":"/metadata/finalizers/-","value":"x/y"}]`,
		`[{"op":"add","path":"/secrets/0","value":{"name":"token-z"}}]`,
		`[{"op":"replace","path":"/metadata/managedFields","value":[{}]}]`,
		`[{"op":"add","path":"/metadata/managedFields/0/fieldsV1","value":{"f:data":{"x":1}}}]`,
		`[{"op":"remove","path":"/metadata/name"}]`,
		`[{"op":"copy","from":"/metadata","path":"/metadata/labels"}]`,
		`[{"op":"add","path":"/x","value":[0]},{"op":"copy","from":"/x","path":"/x/-"},{"op":"copy","from":"/x","path":"/x/-"}]`,
		`[]`, `{}`, `[{"op":"nope"}]`,
	)
}

// FuzzMergePatch: `go test -fuzz FuzzMergePatch`.
func FuzzMergePatch(f *testing.F) {
	fuzzPatch(f, negotiation.MergePatch, []uint8{0},
		`{}`,
		`{"data":{"greeting":"hi","empty":null,"new":"v"}}`,
		`{"metadata":{"labels":null,"finalizers":[]}}`,
		`{"metadata":{"resourceVersion":"7"},"data":{"a":"b"}}`,
		`{"metadata":{"managedFields":[{"manager":"x","operation":"Bogus","fieldsType":"FieldsV2"}]}}`,
		`{"secrets":[{"name":"only"}],"automountServiceAccountToken":null}`,
		`{"data":{"n":1}}`,
		`{"kind":"Secret"}`,
	)
}

// FuzzStrategicMergePatch: `go test -fuzz FuzzStrategicMergePatch`.
func FuzzStrategicMergePatch(f *testing.F) {
	fuzzPatch(f, negotiation.StrategicMergePatch, []uint8{0, 1},
		`{"data":{"greeting":"hi"}}`,
		`{"$patch":"replace"}`,
		`{"data":{"$patch":"delete"}}`,
		`{"data":{"$retainKeys":["greeting"],"greeting":"x"}}`,
		`{"metadata":{"ownerReferences":[{"uid":"11111111-2222-3333-4444-555555555555","$patch":"delete"}]}}`,
		`{"metadata":{"$setElementOrder/finalizers":["example.com/audit","example.com/keep"]}}`,
		`{"metadata":{"$deleteFromPrimitiveList/finalizers":["example.com/keep"]}}`,
		`{"secrets":[{"name":"token-d"},{"name":"token-a","$patch":"delete"}]}`,
		`{"$setElementOrder/secrets":[{"name":"token-c"},{"name":"token-a"}],"secrets":[{"name":"token-c","namespace":"x"}]}`,
		`{"imagePullSecrets":[{"$patch":"replace"},{"name":"only"}]}`,
	)
}

// FuzzApply: `go test -fuzz FuzzApply`. flags: bit 0 force, bit 1 into
// an empty object (an apply that creates), bits 2-3 fieldValidation.
func FuzzApply(f *testing.F) {
	for _, s := range []struct {
		which, flags uint8
		body         string
	}{
		{0, 0, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fz\ndata:\n  greeting: hi\n"},
		{0, 1, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fz\ndata:\n  greeting: hi\n"},
		{0, 2, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz","finalizers":["a","a"]},"data":{"a":"b"}}`},
		{0, 0, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz","managedFields":[{"manager":"x"}]}}`},
		{0, 0, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz","ownerReferences":[{"name":"o"}]}}`},
		{0, 0, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"fz"}}`},
		{0, 0, `{"apiVersion":1,"kind":[],"metadata":"x"}`},
		{0, 4, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fz}\ndata: {k: a, k: b}\n"},
		{0, 0, "a: &a [*a, *a]\n"},
		{1, 0, "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: fz\nsecrets:\n- name: token-a\n- name: token-z\n"},
		{1, 3, "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: fz\nsecrets:\n- name: x\n- name: x\n"},
	} {
		f.Add(s.which, s.flags, []byte(s.body))
	}
	pf := newPatchFuzzer(f)
	f.Fuzz(func(t *testing.T, which, flags uint8, body []byte) {
		pf.apply(t, which, flags, body)
	})
}
