package grpcapi

import (
	"context"
	"testing"
	"time"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAnonymous: calls without credentials under each anonymous policy.
// Authorized, they are system:anonymous before RBAC: forbidden
// (PermissionDenied, kube-apiserver's 403 Status) where no binding lets
// system:unauthenticated in, served as system:anonymous where one does.
// Public (the ResourceService has no public path) and refused, they are
// Unauthenticated. An invalid token is Unauthenticated under every policy.
func TestAnonymous(t *testing.T) {
	policy := authz.NewStatic(
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "public", Name: "read"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "public", Name: "anyone"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read"},
			Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:unauthenticated"}}},
	)
	get := func(ns string) *apiv1.GetRequest {
		return &apiv1.GetRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: ns, Name: "cm"}}
	}
	for _, tc := range []struct {
		name          string
		policy        authn.AnonymousPolicy
		public, other codes.Code
	}{
		{"authorized", authn.AnonymousAuthorized, codes.OK, codes.PermissionDenied},
		{"public", authn.AnonymousPublic, codes.Unauthenticated, codes.Unauthenticated},
		{"refused", authn.AnonymousRefused, codes.Unauthenticated, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client(t, serveConfig(t, Config{Anonymous: tc.policy, Authorizer: policy, Resources: &recordingService{}}))
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()

			got, err := c.Get(ctx, get("public"))
			if status.Code(err) != tc.public {
				t.Errorf("anonymous get in public: %v, want %v", err, tc.public)
			} else if err == nil && string(got.GetData()) != "cm for system:anonymous deadline=true" {
				t.Errorf("anonymous get in public reached the service as %q", got.GetData())
			}
			_, err = c.Get(ctx, get("default"))
			st := status.Convert(err)
			if st.Code() != tc.other {
				t.Errorf("anonymous get in default: %v, want %v", err, tc.other)
			}
			switch tc.other {
			case codes.PermissionDenied:
				want := `configmaps "cm" is forbidden: User "system:anonymous" cannot get resource "configmaps" in API group "" in the namespace "default"`
				if !hasStatus(st, 403, "Forbidden") || st.Message() != want {
					t.Errorf("anonymous get in default: %q %v, want %q", st.Message(), st.Details(), want)
				}
			case codes.Unauthenticated:
				if !hasStatus(st, 401, "Unauthorized") {
					t.Errorf("anonymous get in default: %v, want a 401 Status", st.Details())
				}
			}
			bad := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong")
			if _, err := c.Get(bad, get("public")); status.Code(err) != codes.Unauthenticated {
				t.Errorf("invalid token: %v, want Unauthenticated", err)
			}
		})
	}
}
