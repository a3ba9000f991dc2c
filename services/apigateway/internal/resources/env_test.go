package resources

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// env is a Server over a real single-member store (storagetest), serving
// every standard kind.
type env struct {
	t     *testing.T
	s     *Server
	store *storage.Store
	codec *codec.Codec
	reg   *registry.Registry
}

// newEnv starts a store and a Server over it; cfg sets what the test
// needs beyond the registry, codec and store, which newEnv fills in.
func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, store: storagetest.Start(t), codec: c, reg: registry.New(registry.Standard()...)}
	cfg.Registry, cfg.Codec, cfg.Store = e.reg, e.codec, e.store
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if e.s, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// configMap names a ConfigMap in namespace ns ("" for the collection).
func configMap(ns, name string) *apiv1.ResourceRef {
	return &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: ns, Name: name}
}

// namespaceRef names a namespace ("" for the collection).
func namespaceRef(name string) *apiv1.ResourceRef {
	return &apiv1.ResourceRef{Version: "v1", Resource: "namespaces", Name: name}
}

func jsonBody(s string) *httpbody.HttpBody {
	return &httpbody.HttpBody{ContentType: negotiation.JSON, Data: []byte(s)}
}

// statusOf is the Kubernetes Status a client gets for err.
func statusOf(err error) metav1.Status { return apistatus.FromError(err) }

// call runs a write the way the ResourceService's gRPC server does, and
// returns its HTTP status: the one the method sets, else 200.
func call(ctx context.Context, do func(context.Context) (*httpbody.HttpBody, error)) (*httpbody.HttpBody, int, error) {
	h := &headerRecorder{}
	body, err := do(grpc.NewContextWithServerTransportStream(ctx, h))
	if err != nil {
		return nil, 0, err
	}
	code := http.StatusOK
	if v := h.md.Get(HTTPCodeHeader); len(v) > 0 {
		code, _ = strconv.Atoi(v[len(v)-1])
	}
	return body, code, nil
}

// create creates an object of ref's collection from a JSON body.
func (e *env) create(ref *apiv1.ResourceRef, body string) (runtime.Object, error) {
	e.t.Helper()
	b, _, err := call(e.t.Context(), func(ctx context.Context) (*httpbody.HttpBody, error) {
		return e.s.Create(ctx, &apiv1.CreateRequest{Ref: ref, Body: jsonBody(body)})
	})
	if err != nil {
		return nil, err
	}
	return e.decode(ref, b), nil
}

// mustCreate is create that fails the test on an error.
func (e *env) mustCreate(ref *apiv1.ResourceRef, body string) metav1.Object {
	e.t.Helper()
	obj, err := e.create(ref, body)
	if err != nil {
		e.t.Fatalf("create %s in %q: %v", body, ref.GetNamespace(), err)
	}
	return accessor(e.t, obj)
}

// namespace creates namespace ns.
func (e *env) namespace(ns string) {
	e.t.Helper()
	e.mustCreate(namespaceRef(""), `{"metadata":{"name":"`+ns+`"}}`)
}

// decode decodes a JSON response about an object of ref's resource.
func (e *env) decode(ref *apiv1.ResourceRef, b *httpbody.HttpBody) runtime.Object {
	e.t.Helper()
	res, err := e.s.resolve(context.Background(), ref, false)
	if err != nil {
		e.t.Fatal(err)
	}
	obj := res.New()
	if err := e.codec.Decode(b.GetData(), b.GetContentType(), res.GVK(), obj); err != nil {
		e.t.Fatalf("decode %s: %v", b.GetData(), err)
	}
	return obj
}

// stored reads the object ref names from the store, decoded; nil when it
// does not exist.
func (e *env) stored(ref *apiv1.ResourceRef) runtime.Object {
	e.t.Helper()
	res, err := e.s.resolve(context.Background(), ref, true)
	if err != nil {
		e.t.Fatal(err)
	}
	return storagetest.Object(e.t, e.store, e.codec, res, ref.GetNamespace(), ref.GetName())
}

// revision is the store's current revision: it moves with every write.
func (e *env) revision() int64 { return storagetest.Revision(e.t, e.store) }

func accessor(t *testing.T, obj runtime.Object) metav1.Object {
	t.Helper()
	acc, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	return acc
}
