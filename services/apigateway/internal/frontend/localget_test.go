package frontend

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
)

// scriptedGets is a ResourceService whose gets answer as the name they
// ask for says: objects in JSON and protobuf, with response headers and
// trailers set, and refusals.
type scriptedGets struct {
	recordingService
}

// protobufObject holds the bytes a JSON body never does (NUL, 0xff).
var protobufObject = []byte{'k', '8', 's', 0, '\n', 0xff, 0}

func (s *scriptedGets) Get(ctx context.Context, req *apiv1.GetRequest) (*httpbody.HttpBody, error) {
	switch req.GetRef().GetName() {
	case "json":
		if err := grpc.SetHeader(ctx, metadata.Pairs("warning", `299 - "deprecated"`, "x-dropped", "no", "x-kubernetes-pf-flowschema-uid", "fs")); err != nil {
			return nil, err
		}
		if err := grpc.SetTrailer(ctx, metadata.Pairs("late", "yes")); err != nil {
			return nil, err
		}
		return &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{"kind":"ConfigMap","ref":"` + refString(req.GetRef()) + `","rv":"` + req.GetResourceVersion() + `","accept":"` + req.GetAccept() + `"}`)}, nil
	case "protobuf":
		return &httpbody.HttpBody{ContentType: "application/vnd.kubernetes.protobuf", Data: protobufObject}, nil
	case "coded":
		// A method may ask for another 2xx code, as a create asks for 201.
		if err := grpc.SetHeader(ctx, metadata.Pairs(resources.HTTPCodeHeader, "203")); err != nil {
			return nil, err
		}
		return &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{}`)}, nil
	case "throttled":
		if err := grpc.SetHeader(ctx, metadata.Pairs("warning", `299 - "slow down"`)); err != nil {
			return nil, err
		}
		return nil, apistatus.ToGRPC(apierrors.NewTooManyRequests("try again later", 7))
	case "invalid":
		return nil, apistatus.ToGRPC(apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "invalid", nil))
	}
	return nil, apistatus.ToGRPC(apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, req.GetRef().GetName()))
}

// refString names what ref names: group, version, resource, namespace,
// name and subresource.
func refString(ref *apiv1.ResourceRef) string {
	return strings.Join([]string{ref.GetGroup(), ref.GetVersion(), ref.GetResource(), ref.GetNamespace(), ref.GetName(), ref.GetSubresource()}, "/")
}

// getResponse is what a client sees of a GET: its code, every header but
// those that differ between any two responses (Date, Audit-Id), its body
// and trailers.
type getResponse struct {
	code    int
	header  http.Header
	body    string
	trailer http.Header
}

func doGet(t *testing.T, srv *httptest.Server, path string, header map[string]string) getResponse {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer admin-token")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Header.Del("Date")
	resp.Header.Del("Audit-Id")
	return getResponse{code: resp.StatusCode, header: resp.Header, body: string(body), trailer: resp.Trailer}
}

// TestLocalGetMatchesGateway: a GET of an in-process ResourceService,
// served without grpc-gateway's routing (serveLocalGet), reaches the
// client byte for byte as through grpc-gateway over a gRPC connection:
// status code, every header (media type, the headers the service set
// that are passed on, trailers announced when the client accepts them),
// body and trailers; refusals as their Status with code, Retry-After and
// warnings; a query grpc-gateway cannot parse as its 400; and the query's
// parameters reach the service alike.
func TestLocalGetMatchesGateway(t *testing.T) {
	svc := &scriptedGets{}
	serve := func(tune func(*Config)) *httptest.Server {
		srv := httptest.NewServer(newTestHandler(t, svc, nil, tune))
		t.Cleanup(srv.Close)
		return srv
	}
	direct := serve(func(c *Config) { c.LocalResources = svc })
	overGRPC := serve(func(*Config) {})

	const cms = "/api/v1/namespaces/demo/configmaps/"
	cases := []struct {
		name, path string
		header     map[string]string
		code       int
	}{
		{"json", cms + "json?resourceVersion=5", nil, 200},
		{"json, trailers accepted", cms + "json", map[string]string{"TE": "trailers"}, 200},
		{"json, gzip accepted", cms + "json", map[string]string{"Accept-Encoding": "gzip"}, 200},
		{"protobuf", cms + "protobuf", map[string]string{"Accept": "application/vnd.kubernetes.protobuf"}, 200},
		{"another 2xx", cms + "coded", nil, 203},
		{"not found", cms + "missing", nil, 404},
		{"throttled", cms + "throttled", nil, 429},
		{"invalid", cms + "invalid", nil, 422},
		{"query not parsed", cms + "json?resourceVersion=1&resourceVersion=2", nil, 400},
		{"not acceptable", cms + "json", map[string]string{"Accept": "text/plain"}, 406},
		{"deadline asked for", cms + "json", map[string]string{"Grpc-Timeout": "10S"}, 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := doGet(t, direct, c.path, c.header)
			if got.code != c.code {
				t.Errorf("served directly: %d %s, want %d", got.code, got.body, c.code)
			}
			if want := doGet(t, overGRPC, c.path, c.header); !reflect.DeepEqual(got, want) {
				t.Errorf("served directly:\n%+v\nthrough grpc-gateway over gRPC:\n%+v", got, want)
			}
		})
	}
	// The cases' checks would pass if neither server reached the service.
	want := refString(&apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "demo", Name: "json"})
	if got := doGet(t, direct, cms+"json?resourceVersion=5&ref.namespace=evil", nil); got.body != `{"kind":"ConfigMap","ref":"`+want+`","rv":"5","accept":""}` {
		t.Errorf("served directly: body %q, want the service's object for %s", got.body, want)
	}
}
