package frontend

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/meridian-cp/meridian/lib/healthz"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz/bootstrap"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// recordingService is a ResourceService that records the requests that
// reach it and answers Get with a fixed body or error, so the front end's
// routing and error paths can be checked without a store.
type recordingService struct {
	apiv1.UnimplementedResourceServiceServer
	mu      sync.Mutex
	gets    []*apiv1.GetRequest
	creates []*apiv1.CreateRequest
	err     error
}

func (s *recordingService) Create(_ context.Context, req *apiv1.CreateRequest) (*httpbody.HttpBody, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creates = append(s.creates, req)
	return &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{"kind":"ConfigMap"}`)}, nil
}

func (s *recordingService) Get(_ context.Context, req *apiv1.GetRequest) (*httpbody.HttpBody, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets = append(s.gets, req)
	if s.err != nil {
		return nil, apistatus.ToGRPC(s.err)
	}
	return &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{"kind":"ConfigMap"}`)}, nil
}

// newTestHandler returns a front end over svc with three token users:
// alice ("good-token"), admin ("admin-token", in system:masters) and
// prometheus ("monitor-token", in system:monitoring). Its RBAC policy is
// kube-apiserver's bootstrap policy and testPolicy; tune adjusts its
// configuration.
func newTestHandler(t *testing.T, svc apiv1.ResourceServiceServer, readyErr error, tune ...func(*Config)) http.Handler {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	apiv1.RegisterResourceServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///test",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	tokens, err := authn.ParseTokenFile(strings.NewReader("good-token,alice,uid-1\nadmin-token,admin,uid-0,system:masters\nmonitor-token,prometheus,uid-2,system:monitoring\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Registry:      registry.New(registry.Core()...),
		Authenticator: authn.New(nil, tokens),
		Authorizer:    authz.NewStatic(testPolicy()...),
		Resources:     apiv1.NewResourceServiceClient(conn),
		Readyz:        []healthz.Check{{Name: "store", Run: func(context.Context) error { return readyErr }}},
	}
	for _, f := range tune {
		f(&cfg)
	}
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// testPolicy is the bootstrap policy and what alice is granted: the
// config maps of "demo" (all the verbs the tests use) and reading those of
// "default".
func testPolicy() []runtime.Object {
	var objs []runtime.Object
	for _, r := range bootstrap.ClusterRoles() {
		objs = append(objs, &r)
	}
	for _, b := range bootstrap.ClusterRoleBindings() {
		objs = append(objs, &b)
	}
	grant := func(ns string, verbs ...string) {
		objs = append(objs,
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmaps"},
				Rules: []rbacv1.PolicyRule{{Verbs: verbs, APIGroups: []string{""}, Resources: []string{"configmaps"}}}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
				Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"}}})
	}
	grant("demo", "get", "list", "watch", "create", "patch", "delete", "deletecollection")
	grant("default", "get")
	return objs
}

func do(t *testing.T, h http.Handler, method, path, token string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	req.TLS = &tls.ConnectionState{}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Result(), string(body)
}

func decodeStatus(t *testing.T, body string) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" || st.APIVersion != "v1" {
		t.Fatalf("not a Status (%v): %s", err, body)
	}
	return st
}

// TestAuthentication: what becomes of requests without credentials under
// each anonymous policy, with kube-apiserver's statuses and messages: an
// invalid token is always 401; with anonymous requests authorized (RBAC,
// --anonymous-auth=true) system:anonymous reads the health endpoints and
// /version and is forbidden (403) elsewhere; with the public policy
// (AlwaysAllow) it reads those and gets 401 elsewhere; refused
// (--anonymous-auth=false) it gets 401 everywhere.
func TestAuthentication(t *testing.T) {
	type req struct {
		path, token string
		code        int
		message     string
	}
	valid := []req{
		{"/api/v1/namespaces/default/configmaps/x", "bad-token", 401, "Unauthorized"},
		{"/healthz", "bad-token", 401, "Unauthorized"},
		{"/api/v1/namespaces/default/configmaps/x", "good-token", 200, ""},
		{"/api", "good-token", 200, ""},
	}
	for _, tc := range []struct {
		name   string
		policy authn.AnonymousPolicy
		reqs   []req
	}{
		{"public", authn.AnonymousPublic, []req{
			{"/api/v1/namespaces/default/configmaps/x", "", 401, "Unauthorized"},
			{"/api", "", 401, "Unauthorized"},
			{"/readyz", "", 200, ""},
			{"/version", "", 200, ""},
		}},
		{"authorized", authn.AnonymousAuthorized, []req{
			{"/api/v1/namespaces/default/configmaps/x", "", 403,
				`configmaps "x" is forbidden: User "system:anonymous" cannot get resource "configmaps" in API group "" in the namespace "default"`},
			{"/api", "", 403, `forbidden: User "system:anonymous" cannot get path "/api"`},
			{"/readyz", "", 200, ""},
			{"/livez", "", 200, ""},
			{"/version", "", 200, ""},
		}},
		{"refused", authn.AnonymousRefused, []req{
			{"/api/v1/namespaces/default/configmaps/x", "", 401, "Unauthorized"},
			{"/api", "", 401, "Unauthorized"},
			{"/readyz", "", 401, "Unauthorized"},
			{"/version", "", 401, "Unauthorized"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHandler(t, &recordingService{}, nil, func(c *Config) { c.Anonymous = tc.policy })
			for _, r := range append(tc.reqs, valid...) {
				resp, body := do(t, h, "GET", r.path, r.token, nil)
				if resp.StatusCode != r.code {
					t.Errorf("GET %s token=%q: %d, want %d: %s", r.path, r.token, resp.StatusCode, r.code, body)
					continue
				}
				if r.code < 400 {
					continue
				}
				st := decodeStatus(t, body)
				wantReason := metav1.StatusReasonUnauthorized
				if r.code == 403 {
					wantReason = metav1.StatusReasonForbidden
				}
				if st.Reason != wantReason || st.Message != r.message || resp.Header.Get("Content-Type") != "application/json" {
					t.Errorf("GET %s token=%q: %d body %+v, want %s %q", r.path, r.token, r.code, st, wantReason, r.message)
				}
			}
		})
	}
}

func TestHealth(t *testing.T) {
	h := newTestHandler(t, &recordingService{}, nil)
	if _, body := do(t, h, "GET", "/readyz", "", nil); body != "ok" {
		t.Errorf("/readyz: %q", body)
	}
	_, body := do(t, h, "GET", "/readyz?verbose", "", nil)
	if body != "[+]ping ok\n[+]store ok\nreadyz check passed\n" {
		t.Errorf("/readyz?verbose: %q", body)
	}
	if _, body := do(t, h, "GET", "/readyz/store", "monitor-token", nil); body != "ok" {
		t.Errorf("/readyz/store: %q", body)
	}
	if resp, _ := do(t, h, "GET", "/readyz/nope", "monitor-token", nil); resp.StatusCode != 404 {
		t.Errorf("/readyz/nope: %d", resp.StatusCode)
	}

	failing := newTestHandler(t, &recordingService{}, errors.New("down"))
	resp, body := do(t, failing, "GET", "/readyz?verbose", "", nil)
	if resp.StatusCode != 500 || body != "[+]ping ok\n[-]store failed: reason withheld\nreadyz check failed\n" {
		t.Errorf("failing /readyz?verbose: %d %q", resp.StatusCode, body)
	}
	resp, body = do(t, failing, "GET", "/readyz?exclude=store", "", nil)
	if resp.StatusCode != 200 || body != "ok" {
		t.Errorf("failing /readyz?exclude=store: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do(t, failing, "GET", "/livez", "", nil); resp.StatusCode != 200 {
		t.Errorf("/livez must not depend on the store: %d", resp.StatusCode)
	}

	// /healthz runs its own checks: here, shutdown fails /readyz alone.
	shutting := newTestHandler(t, &recordingService{}, nil, func(c *Config) {
		c.Healthz = c.Readyz
		c.Readyz = append(c.Readyz, healthz.Check{Name: "shutdown", Run: func(context.Context) error { return errors.New("shutting down") }})
	})
	resp, body = do(t, shutting, "GET", "/readyz?verbose", "", nil)
	if resp.StatusCode != 500 || body != "[+]ping ok\n[+]store ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n" {
		t.Errorf("/readyz?verbose while shutting down: %d %q", resp.StatusCode, body)
	}
	resp, body = do(t, shutting, "GET", "/healthz?verbose", "", nil)
	if resp.StatusCode != 200 || body != "[+]ping ok\n[+]store ok\nhealthz check passed\n" {
		t.Errorf("/healthz?verbose while shutting down: %d %q", resp.StatusCode, body)
	}
}

func TestDiscovery(t *testing.T) {
	h := newTestHandler(t, &recordingService{}, nil)
	_, body := do(t, h, "GET", "/api/v1", "good-token", nil)
	var list metav1.APIResourceList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	names := map[string]metav1.APIResource{}
	for _, r := range list.APIResources {
		names[r.Name] = r
	}
	if cm := names["configmaps"]; !cm.Namespaced || cm.Kind != "ConfigMap" || cm.ShortNames[0] != "cm" || len(cm.Verbs) != 8 {
		t.Errorf("configmaps: %+v", cm)
	}
	if ns := names["namespaces"]; ns.Namespaced || ns.Kind != "Namespace" {
		t.Errorf("namespaces: %+v", ns)
	}
	_, body = do(t, h, "GET", "/api", "good-token", nil)
	if !strings.Contains(body, `"versions":["v1"]`) {
		t.Errorf("/api: %s", body)
	}
	_, body = do(t, h, "GET", "/apis", "good-token", nil)
	if !strings.Contains(body, `"kind":"APIGroupList"`) {
		t.Errorf("/apis: %s", body)
	}
}

func TestRoutingAndErrors(t *testing.T) {
	svc := &recordingService{}
	h := newTestHandler(t, svc, nil)

	// The resource reaches the ResourceService named by the path; only
	// Kubernetes parameters come through, never the client's ref.*.
	resp, _ := do(t, h, "GET", "/api/v1/namespaces/demo/configmaps/app?resourceVersion=7&ref.namespace=evil&pretty=true", "good-token", nil)
	if resp.StatusCode != 200 || len(svc.gets) != 1 {
		t.Fatalf("get: %d, %d calls", resp.StatusCode, len(svc.gets))
	}
	got := svc.gets[0]
	if r := got.GetRef(); r.GetNamespace() != "demo" || r.GetName() != "app" || r.GetResource() != "configmaps" || r.GetVersion() != "v1" || got.GetResourceVersion() != "7" {
		t.Errorf("request reached the service as %+v", got)
	}

	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		code         int
		reason       metav1.StatusReason
	}{
		{"GET", "/api/v1/namespaces/demo/widgets", nil, 404, metav1.StatusReasonNotFound},
		{"GET", "/apis/apps/v1/namespaces/demo/deployments", nil, 404, metav1.StatusReasonNotFound},
		{"GET", "/nope", nil, 404, metav1.StatusReasonNotFound},
		{"DELETE", "/api/v1/namespaces", nil, 405, metav1.StatusReasonMethodNotAllowed},
		{"GET", "/api/v1/namespaces/demo/configmaps/app", map[string]string{"Accept": "text/html"}, 406, metav1.StatusReasonNotAcceptable},
	} {
		resp, body := do(t, h, tc.method, tc.path, "admin-token", tc.hdr)
		st := decodeStatus(t, body)
		if resp.StatusCode != tc.code || st.Code != int32(tc.code) || st.Reason != tc.reason {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, resp.StatusCode, st.Reason, tc.code, tc.reason)
		}
	}

	// A Kubernetes error from the service keeps its code, reason and details.
	svc.err = apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "app")
	resp, body := do(t, h, "GET", "/api/v1/namespaces/demo/configmaps/app", "good-token", nil)
	st := decodeStatus(t, body)
	if resp.StatusCode != 404 || st.Reason != metav1.StatusReasonNotFound || st.Details == nil || st.Details.Name != "app" || st.Details.Kind != "configmaps" {
		t.Errorf("not found: %d %+v", resp.StatusCode, st)
	}
	svc.err = apierrors.NewTooManyRequests("slow down", 3)
	resp, _ = do(t, h, "GET", "/api/v1/namespaces/demo/configmaps/app", "good-token", nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("429: %d Retry-After=%q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestBodyWithoutMediaType: a create's body without a Content-Type is
// JSON, as kube-apiserver reads it; a patch without one is a 415.
func TestBodyWithoutMediaType(t *testing.T) {
	svc := &recordingService{}
	h := newTestHandler(t, svc, nil)
	send := func(method string) *http.Response {
		req := httptest.NewRequest(method, "/api/v1/namespaces/demo/configmaps", strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`))
		if method == "PATCH" {
			req = httptest.NewRequest(method, "/api/v1/namespaces/demo/configmaps/x", strings.NewReader(`{}`))
		}
		req.TLS = &tls.ConnectionState{}
		req.Header.Set("Authorization", "Bearer good-token")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Result()
	}
	if resp := send("POST"); resp.StatusCode != 200 && resp.StatusCode != 201 {
		t.Errorf("POST without Content-Type: %d, want the create served", resp.StatusCode)
	}
	if len(svc.creates) != 1 || svc.creates[0].GetBody().GetContentType() != "application/json" {
		t.Errorf("create reached the service as %v, want one JSON body", svc.creates)
	}
	if resp := send("PATCH"); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("PATCH without Content-Type: %d, want 415", resp.StatusCode)
	}
}
