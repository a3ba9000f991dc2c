package frontend

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/flowcontrolclient"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// countingFlowControl is a flow-control service that counts the seats
// asked of it and refuses them all (429), so a test sees whether a request
// reached flow control.
type countingFlowControl struct {
	flowcontrolv1.FlowControlServiceClient
	acquires atomic.Int32
}

func (f *countingFlowControl) Acquire(context.Context, *flowcontrolv1.AcquireRequest, ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	f.acquires.Add(1)
	return nil, status.Error(codes.ResourceExhausted, "full")
}

// TestAuthorization: every request is authorized before anything else
// looks at it, with kube-apiserver's 403 word for word: resources by
// namespace and verb, health and discovery paths by path (anonymous
// callers may read /healthz, /livez, /readyz and /version only), an
// unserved resource included (403, not 404, to whoever may not know it
// exists). A refused request reads none of its body and asks flow control
// for no seat; an allowed one, resource or not, asks it (which refuses
// them all here: 429).
func TestAuthorization(t *testing.T) {
	fc := &countingFlowControl{}
	svc := &recordingService{}
	h := newTestHandler(t, svc, nil, func(c *Config) {
		c.FlowControl = flowcontrolclient.New(fc, "test", nil)
	})
	for _, tc := range []struct {
		method, path, token string
		code                int
		message             string
	}{
		{"GET", "/api/v1/namespaces/other/configmaps/app", "good-token", 403,
			`configmaps "app" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "other"`},
		{"GET", "/api/v1/namespaces/other/configmaps", "good-token", 403,
			`configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "other"`},
		{"GET", "/api/v1/configmaps", "good-token", 403,
			`configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" at the cluster scope`},
		{"POST", "/api/v1/namespaces/default/configmaps", "good-token", 403,
			`configmaps is forbidden: User "alice" cannot create resource "configmaps" in API group "" in the namespace "default"`},
		{"PUT", "/api/v1/namespaces/demo/configmaps/app", "good-token", 403,
			`configmaps "app" is forbidden: User "alice" cannot update resource "configmaps" in API group "" in the namespace "demo"`},
		{"DELETE", "/api/v1/namespaces/demo", "good-token", 403,
			`namespaces "demo" is forbidden: User "alice" cannot delete resource "namespaces" in API group "" in the namespace "demo"`},
		{"PUT", "/api/v1/namespaces/demo/status", "good-token", 403,
			`namespaces "demo" is forbidden: User "alice" cannot update resource "namespaces/status" in API group "" in the namespace "demo"`},
		{"GET", "/apis/apps/v1/namespaces/demo/deployments", "good-token", 403,
			`deployments.apps is forbidden: User "alice" cannot list resource "deployments" in API group "apps" in the namespace "demo"`},
		{"GET", "/metrics", "good-token", 403, `forbidden: User "alice" cannot get path "/metrics"`},
		{"GET", "/readyz/store", "good-token", 403, `forbidden: User "alice" cannot get path "/readyz/store"`},
		{"GET", "/readyz/store", "", 403, `forbidden: User "system:anonymous" cannot get path "/readyz/store"`},
		{"GET", "/api/v1/namespaces/demo/configmaps/app", "good-token", 429, ""},
		// Allowed non-resource requests reach flow control too.
		{"GET", "/api", "good-token", 429, ""},
		{"GET", "/readyz", "", 429, ""},
		{"GET", "/version", "", 429, ""},
		{"GET", "/readyz/store", "monitor-token", 429, ""},
		{"GET", "/apis/apps/v1/namespaces/demo/deployments", "admin-token", 404, ""},
	} {
		before := fc.acquires.Load()
		body := &watchedBody{Reader: strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app"}}`)}
		req := httptest.NewRequest(tc.method, tc.path, body)
		req.Header.Set("Content-Type", "application/json")
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Errorf("%s %s as %q: %d, want %d: %s", tc.method, tc.path, tc.token, rec.Code, tc.code, rec.Body)
			continue
		}
		if tc.code != 403 {
			continue
		}
		st := decodeStatus(t, rec.Body.String())
		if st.Reason != metav1.StatusReasonForbidden || st.Message != tc.message {
			t.Errorf("%s %s: %s %q, want %q", tc.method, tc.path, st.Reason, st.Message, tc.message)
		}
		if body.read || fc.acquires.Load() != before {
			t.Errorf("%s %s: refused after its body was read (%v) or seats asked for (%d)", tc.method, tc.path, body.read, fc.acquires.Load()-before)
		}
	}
	if fc.acquires.Load() == 0 {
		t.Error("no allowed request asked flow control for seats")
	}
	if len(svc.gets) != 0 || len(svc.creates) != 0 {
		t.Errorf("refused requests reached the service: %d gets, %d creates", len(svc.gets), len(svc.creates))
	}
}

// TestAccessReviews: the authorization.k8s.io reviews answer with the
// authorizer's decision and store nothing: self reviews for anyone
// authenticated (`kubectl auth can-i`, `--list`), subject reviews for
// those granted them, each validated as kube-apiserver validates it.
func TestAccessReviews(t *testing.T) {
	svc := &recordingService{}
	h := newTestHandler(t, svc, nil)
	post := func(path, token, body string) (int, string) {
		t.Helper()
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	status := func(body string) authorizationv1.SubjectAccessReviewStatus {
		t.Helper()
		var r struct {
			Kind, APIVersion string
			Status           authorizationv1.SubjectAccessReviewStatus
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil || r.APIVersion != "authorization.k8s.io/v1" {
			t.Fatalf("not a review (%v): %s", err, body)
		}
		return r.Status
	}
	const base = "/apis/authorization.k8s.io/v1/"
	canI := func(token, attrs string) authorizationv1.SubjectAccessReviewStatus {
		t.Helper()
		code, body := post(base+"selfsubjectaccessreviews", token, `{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{`+attrs+`}}`)
		if code != 201 {
			t.Fatalf("self review %s: %d %s", attrs, code, body)
		}
		return status(body)
	}
	if st := canI("good-token", `"resourceAttributes":{"verb":"list","resource":"configmaps","namespace":"demo"}`); !st.Allowed || st.Reason != `RBAC: allowed by RoleBinding "alice/demo" of Role "configmaps" to User "alice"` {
		t.Errorf("alice list configmaps in demo: %+v", st)
	}
	if st := canI("good-token", `"resourceAttributes":{"verb":"create","resource":"configmaps","namespace":"default"}`); st.Allowed || st.Denied {
		t.Errorf("alice create configmaps in default: %+v", st)
	}
	if st := canI("good-token", `"nonResourceAttributes":{"verb":"get","path":"/apis/apps"}`); !st.Allowed {
		t.Errorf("alice get /apis/apps: %+v", st)
	}
	if st := canI("admin-token", `"resourceAttributes":{"verb":"delete","resource":"namespaces","name":"x"}`); !st.Allowed {
		t.Errorf("admin delete namespaces: %+v", st)
	}

	code, body := post(base+"selfsubjectrulesreviews", "good-token", `{"spec":{"namespace":"demo"}}`)
	var rules authorizationv1.SelfSubjectRulesReview
	if err := json.Unmarshal([]byte(body), &rules); code != 201 || err != nil || rules.Kind != "SelfSubjectRulesReview" {
		t.Fatalf("rules review: %d %v %s", code, err, body)
	}
	found := false
	for _, r := range rules.Status.ResourceRules {
		found = found || (slices.Contains(r.Resources, "configmaps") && slices.Contains(r.Verbs, "deletecollection"))
	}
	if !found || len(rules.Status.NonResourceRules) == 0 || rules.Status.Incomplete {
		t.Errorf("alice's rules in demo: %+v", rules.Status)
	}
	if code, body := post(base+"selfsubjectrulesreviews", "good-token", `{"spec":{}}`); code != 400 || !strings.Contains(body, "no namespace on request") {
		t.Errorf("rules review without a namespace: %d %s", code, body)
	}

	sar := `{"spec":{"user":"alice","resourceAttributes":{"verb":"get","resource":"configmaps","namespace":"demo","name":"x"}}}`
	if code, body := post(base+"subjectaccessreviews", "good-token", sar); code != 403 ||
		decodeStatus(t, body).Message != `subjectaccessreviews.authorization.k8s.io is forbidden: User "alice" cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope` {
		t.Errorf("alice's subject review: %d %s", code, body)
	}
	code, body = post(base+"subjectaccessreviews", "admin-token", sar)
	if st := status(body); code != 201 || !st.Allowed {
		t.Errorf("admin's review of alice: %d %+v", code, st)
	}
	code, body = post(base+"namespaces/demo/localsubjectaccessreviews", "admin-token",
		`{"metadata":{"namespace":"demo"},"spec":{"user":"alice","resourceAttributes":{"verb":"create","resource":"configmaps","namespace":"demo"}}}`)
	if st := status(body); code != 201 || !st.Allowed {
		t.Errorf("admin's local review of alice: %d %+v", code, st)
	}
	for _, tc := range []struct{ path, body, message string }{
		{base + "subjectaccessreviews", `{"spec":{"resourceAttributes":{"verb":"get"}}}`, "spec.user: Invalid value: \"\": at least one of user or group must be specified"},
		{base + "subjectaccessreviews", `{"spec":{"user":"a"}}`, "exactly one of nonResourceAttributes or resourceAttributes must be specified"},
		{base + "subjectaccessreviews", `{"metadata":{"name":"x"},"spec":{"user":"a","nonResourceAttributes":{"verb":"get","path":"/"}}}`, "metadata: Invalid value"},
		{base + "namespaces/demo/localsubjectaccessreviews", `{"spec":{"user":"a","resourceAttributes":{"verb":"get","namespace":"other"}}}`, "must match metadata.namespace"},
	} {
		code, body := post(tc.path, "admin-token", tc.body)
		if st := decodeStatus(t, body); code != 422 || st.Reason != metav1.StatusReasonInvalid || !strings.Contains(st.Message, tc.message) {
			t.Errorf("%s %s: %d %s, want 422 with %q", tc.path, tc.body, code, st.Message, tc.message)
		}
	}
	if resp, _ := do(t, h, "GET", base+"selfsubjectaccessreviews", "admin-token", nil); resp.StatusCode != 405 {
		t.Errorf("GET of a review: %d, want 405", resp.StatusCode)
	}
	if len(svc.creates) != 0 {
		t.Errorf("reviews reached the ResourceService: %d", len(svc.creates))
	}
}
