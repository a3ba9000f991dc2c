package authz

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestForbiddenMessages: the 403 of a refused request is kube-apiserver's,
// word for word, for every scope.
func TestForbiddenMessages(t *testing.T) {
	u := who("alice", "system:authenticated")
	for _, tc := range []struct {
		a    Attributes
		want string
	}{
		{in(resourceRequest("list", "", "configmaps", "", ""), u, "y"),
			`configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "y"`},
		{in(resourceRequest("get", "", "configmaps", "", "app"), u, "y"),
			`configmaps "app" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "y"`},
		{in(resourceRequest("list", "rbac.authorization.k8s.io", "clusterroles", "", ""), u, ""),
			`clusterroles.rbac.authorization.k8s.io is forbidden: User "alice" cannot list resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope`},
		{in(resourceRequest("update", "", "namespaces", "status", "y"), u, "y"),
			`namespaces "y" is forbidden: User "alice" cannot update resource "namespaces/status" in API group "" in the namespace "y"`},
		{in(urlRequest("get", "/metrics"), u, ""), `forbidden: User "alice" cannot get path "/metrics"`},
		{in(urlRequest("get", "/a<b>&c"), u, ""), `forbidden: User "alice" cannot get path "/a&lt;b&gt;&amp;c"`},
	} {
		st := Forbidden(tc.a, "").ErrStatus
		if st.Code != 403 || st.Reason != metav1.StatusReasonForbidden || st.Message != tc.want {
			t.Errorf("%d %s %q, want %q", st.Code, st.Reason, st.Message, tc.want)
		}
		if st.Details == nil || st.Details.Kind != tc.a.Resource || st.Details.Group != tc.a.APIGroup || st.Details.Name != tc.a.Name {
			t.Errorf("details %+v for %+v", st.Details, tc.a)
		}
	}
	if got := Forbidden(in(urlRequest("get", "/x"), u, ""), "RBAC: boom").ErrStatus.Message; got != `forbidden: User "alice" cannot get path "/x": RBAC: boom` {
		t.Errorf("with a reason: %q", got)
	}
}
