package frontend

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestImpersonation: Impersonate-* headers are refused (403) to callers
// outside system:masters, and change who the request acts as for its
// members, as kubectl --as sends them; a SelfSubjectReview shows whom.
func TestImpersonation(t *testing.T) {
	svc := &recordingService{}
	h := newTestHandler(t, svc, nil)
	whoami := func(token string, hdr map[string]string) (int, authenticationv1.UserInfo, string) {
		t.Helper()
		resp, body := do(t, h, "POST", selfSubjectReviewPath, token, hdr)
		var review authenticationv1.SelfSubjectReview
		if resp.StatusCode == 201 {
			if err := json.Unmarshal([]byte(body), &review); err != nil || review.Kind != "SelfSubjectReview" || review.APIVersion != "authentication.k8s.io/v1" {
				t.Fatalf("not a SelfSubjectReview (%v): %s", err, body)
			}
		}
		return resp.StatusCode, review.Status.UserInfo, body
	}

	if code, u, body := whoami("good-token", nil); code != 201 || !reflect.DeepEqual(u, authenticationv1.UserInfo{Username: "alice", UID: "uid-1", Groups: []string{"system:authenticated"}}) {
		t.Errorf("alice's own review: %d %+v %s", code, u, body)
	}
	code, u, body := whoami("admin-token", map[string]string{
		"Impersonate-User": "bob", "Impersonate-Group": "ops", "Impersonate-Uid": "uid-bob", "Impersonate-Extra-Scopes": "view",
	})
	want := authenticationv1.UserInfo{Username: "bob", UID: "uid-bob", Groups: []string{"ops", "system:authenticated"},
		Extra: map[string]authenticationv1.ExtraValue{"scopes": {"view"}}}
	if code != 201 || !reflect.DeepEqual(u, want) {
		t.Errorf("admin as bob: %d %+v, want %+v: %s", code, u, want, body)
	}

	for _, tc := range []struct {
		name, method, path, token string
		hdr                       map[string]string
		code                      int32
		message                   string
	}{
		{"alice as bob", "GET", "/api/v1/namespaces/demo/configmaps/app", "good-token", map[string]string{"Impersonate-User": "bob"}, 403,
			`users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{"alice in system:masters", "POST", selfSubjectReviewPath, "good-token", map[string]string{"Impersonate-User": "alice", "Impersonate-Group": "system:masters"}, 403,
			`users "alice" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{"anonymous as bob", "GET", "/readyz", "", map[string]string{"Impersonate-User": "bob"}, 403,
			`users "bob" is forbidden: User "system:anonymous" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{"a group without a user", "GET", "/api/v1/namespaces/demo/configmaps/app", "admin-token", map[string]string{"Impersonate-Group": "ops"}, 400,
			`requested group "ops" without impersonating a user`},
	} {
		resp, body := do(t, h, tc.method, tc.path, tc.token, tc.hdr)
		st := decodeStatus(t, body)
		if resp.StatusCode != int(tc.code) || st.Code != tc.code || st.Message != tc.message {
			t.Errorf("%s: %d %q, want %d %q", tc.name, resp.StatusCode, st.Message, tc.code, tc.message)
		}
		if tc.code == 403 && (st.Reason != metav1.StatusReasonForbidden || st.Details == nil || st.Details.Kind != "users") {
			t.Errorf("%s: %+v", tc.name, st)
		}
	}
	if len(svc.gets) != 0 {
		t.Errorf("refused requests reached the service: %d", len(svc.gets))
	}
}

// TestAuthenticatesBeforeReadingTheBody: an unauthenticated write is
// refused without reading a byte of its body.
func TestAuthenticatesBeforeReadingTheBody(t *testing.T) {
	h := newTestHandler(t, &recordingService{}, nil)
	body := &watchedBody{Reader: strings.NewReader(`{"kind":"ConfigMap"}`)}
	req := httptest.NewRequest("POST", "/api/v1/namespaces/demo/configmaps", body)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 401 || body.read {
		t.Errorf("anonymous create: %d, body read: %v", rec.Code, body.read)
	}
}

// watchedBody records whether anything read it.
type watchedBody struct {
	io.Reader
	read bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.read = true
	return b.Reader.Read(p)
}
