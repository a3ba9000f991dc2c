package frontend

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit/audittest"
	"google.golang.org/genproto/googleapis/api/httpbody"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// completed returns the ResponseComplete event of auditID.
func completed(t *testing.T, evs []auditv1.Event, auditID string) auditv1.Event {
	t.Helper()
	for _, ev := range evs {
		if string(ev.AuditID) == auditID && ev.Stage == auditv1.StageResponseComplete {
			return ev
		}
	}
	t.Fatalf("no ResponseComplete event for %s among %d", auditID, len(evs))
	return auditv1.Event{}
}

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// TestAuditIDHeader: every response has an Audit-Id, with no policy.
func TestAuditIDHeader(t *testing.T) {
	h := newTestHandler(t, &recordingService{}, nil)
	for _, c := range []struct {
		path, token string
		code        int
	}{
		{"/version", "", 200},
		{"/api/v1/namespaces/demo/configmaps/x", "bad-token", 401},
		{"/api/v1/namespaces/kube-system/configmaps/x", "good-token", 403},
		{"/api/v1/namespaces/demo/nothings/x", "admin-token", 404},
		{"/api/v1/namespaces/demo/configmaps/x", "good-token", 200},
	} {
		resp, _ := do(t, h, http.MethodGet, c.path, c.token, nil)
		if resp.StatusCode != c.code || !uuidPattern.MatchString(resp.Header.Get("Audit-Id")) {
			t.Errorf("GET %s: %d, Audit-Id %q", c.path, resp.StatusCode, resp.Header.Get("Audit-Id"))
		}
	}
	resp, _ := do(t, h, http.MethodGet, "/version", "", map[string]string{"Audit-Id": "mine"})
	if resp.Header.Get("Audit-Id") != "mine" {
		t.Errorf("the client's Audit-Id: %q", resp.Header.Get("Audit-Id"))
	}
}

// bigService answers Get with a config map larger than the gzip
// threshold.
type bigService struct {
	recordingService
	body []byte
}

func (s *bigService) Get(context.Context, *apiv1.GetRequest) (*httpbody.HttpBody, error) {
	return &httpbody.HttpBody{ContentType: "application/json", Data: s.body}, nil
}

// TestAuditEvents: the events of a create, a 401, a 403 and an
// impersonated request; a compressed response is recorded as the handler
// wrote it.
func TestAuditEvents(t *testing.T) {
	a, events := audittest.LogFile(t, `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: RequestResponse
  resources: [{resources: ["configmaps"]}]
- level: Metadata
`)
	big := []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"big"},"data":{"k":"` + strings.Repeat("v", 200<<10) + `"}}`)
	h := newTestHandler(t, &bigService{body: big}, nil, func(c *Config) { c.Auditor = a })

	req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/demo/configmaps", strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"v"}}`))
	req.Header.Set("Authorization", "Bearer good-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", "10.1.2.3")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	createID := rec.Result().Header.Get("Audit-Id")
	ev := completed(t, events(), createID)
	if ev.Verb != "create" || ev.User.Username != "alice" || ev.ObjectRef.Name != "cm" || ev.ObjectRef.Namespace != "demo" ||
		ev.ResponseStatus.Code != int32(rec.Code) || ev.SourceIPs[0] != "10.1.2.3" ||
		!strings.Contains(string(ev.RequestObject.Raw), `"k":"v"`) || string(ev.ResponseObject.Raw) != `{"kind":"ConfigMap"}` ||
		!strings.HasPrefix(ev.Annotations[audit.ReasonAnnotation], `RBAC: allowed by RoleBinding "alice/demo"`) {
		t.Errorf("create: %d, event %+v", rec.Code, ev)
	}

	resp, _ := do(t, h, http.MethodGet, "/api/v1/namespaces/demo/configmaps/x", "bad-token", nil)
	ev = completed(t, events(), resp.Header.Get("Audit-Id"))
	if ev.User.Username != "" || ev.ResponseStatus.Code != 401 || ev.ResponseStatus.Reason != "Unauthorized" {
		t.Errorf("401: %+v", ev)
	}
	resp, _ = do(t, h, http.MethodGet, "/api/v1/namespaces/kube-system/configmaps/x", "good-token", nil)
	ev = completed(t, events(), resp.Header.Get("Audit-Id"))
	if ev.ResponseStatus.Code != 403 || ev.Annotations[audit.DecisionAnnotation] != "forbid" ||
		!strings.Contains(ev.ResponseStatus.Message, `User "alice" cannot get resource "configmaps"`) {
		t.Errorf("403: %+v", ev)
	}
	resp, _ = do(t, h, http.MethodGet, "/version", "admin-token", map[string]string{"Impersonate-User": "alice"})
	ev = completed(t, events(), resp.Header.Get("Audit-Id"))
	if ev.User.Username != "admin" || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != "alice" || ev.Level != auditv1.LevelMetadata ||
		ev.Annotations[audit.DecisionAnnotation] != "allow" || ev.ObjectRef != nil || ev.Verb != "get" {
		t.Errorf("impersonated: %+v", ev)
	}

	resp, body := do(t, h, http.MethodGet, "/api/v1/namespaces/demo/configmaps/big", "good-token", map[string]string{"Accept-Encoding": "gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("a 200 KiB response was not compressed: %v", resp.Header)
	}
	zr, err := gzip.NewReader(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	ev = completed(t, events(), resp.Header.Get("Audit-Id"))
	if string(plain) != string(big) || string(ev.ResponseObject.Raw) != string(big) {
		t.Errorf("the compressed response's event holds %d bytes, want the %d the handler wrote", len(ev.ResponseObject.Raw), len(big))
	}
}
