package vapstatus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/polltest"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile/reconciletest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources/resourcestest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// policy matches the resource gvr (a wildcard: every resource) and
// validates with exprs.
func policy(name string, gvr schema.GroupVersionResource, exprs ...string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{"CREATE"}, Rule: admissionregistrationv1.Rule{
					APIGroups: []string{gvr.Group}, APIVersions: []string{gvr.Version}, Resources: []string{gvr.Resource},
				}},
			}}},
		},
	}
	for _, e := range exprs {
		p.Spec.Validations = append(p.Spec.Validations, admissionregistrationv1.Validation{Expression: e, MessageExpression: "'name: ' + object.metadata.name"})
	}
	return p
}

// widgets is an Established CRD whose widgets have an integer
// spec.replicas.
func widgets() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"replicas": {Type: "integer"}}},
					},
				}},
			}},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{
			AcceptedNames: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
				{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue},
			}},
	}
}

// TestTypeCheckingStatus: a policy whose validation compares a
// ConfigMap's data value (a string) with an integer gets a warning naming
// the expression and the kind, with observedGeneration = generation, and
// so does one comparing a custom resource's integer field with a string
// (its CRD's schema); a well-typed policy and a wildcard one get none.
// Changing the spec bumps the generation and the status follows it.
func TestTypeCheckingStatus(t *testing.T) {
	api := resourcestest.Start(t)
	api.Registry.SetCustom(registry.CustomResources(widgets()))
	admin := identity.WithUser(context.Background(), identity.User{Name: "admin", Groups: []string{"system:masters"}})
	c, err := New(Config{Registry: api.Registry, Codec: api.Codec, Store: api.Store, Objects: api.Server, Logger: api.Logger, Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reconciletest.Run(t, c.Run)

	configmaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	res, _ := api.Registry.Lookup(admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies"))
	for _, p := range []*admissionregistrationv1.ValidatingAdmissionPolicy{
		policy("bad", configmaps, "size(object.data) > 0", "object.data.x == 1"),
		policy("good", configmaps, "size(object.data) > 0", "object.data.x == 'y'"),
		policy("any", schema.GroupVersionResource{Group: "*", Version: "*", Resource: "*"}, "object.data.x == 1"),
		policy("widgets", schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, "object.spec.replicas == 'x'", "object.spec.replicas < 5"),
	} {
		if _, err := api.Server.CreateObject(admin, res, p); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
		return storagetest.Object(t, api.Store, api.Codec, res, "", name).(*admissionregistrationv1.ValidatingAdmissionPolicy)
	}
	polltest.Until(t, 10*time.Second, "every policy's status to observe its generation", func() bool {
		for _, name := range []string{"bad", "good", "any", "widgets"} {
			if p := stored(name); p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
				return false
			}
		}
		return true
	})
	for name, want := range map[string][]string{
		"bad":     {"spec.validations[1].expression", "/v1, Kind=ConfigMap", "found no matching overload for '_==_' applied to '(string, int)'"},
		"widgets": {"spec.validations[0].expression", "example.com/v1, Kind=Widget", "found no matching overload for '_==_' applied to '(int, string)'"},
	} {
		w := stored(name).Status.TypeChecking.ExpressionWarnings
		if len(w) != 1 || w[0].FieldRef != want[0] || !strings.Contains(w[0].Warning, want[1]) || !strings.Contains(w[0].Warning, want[2]) {
			t.Errorf("warnings of policy %s = %+v, want one on %s about %s: %s", name, w, want[0], want[1], want[2])
		}
	}
	for _, name := range []string{"good", "any"} {
		if w := stored(name).Status.TypeChecking.ExpressionWarnings; len(w) != 0 {
			t.Errorf("policy %s: warnings %+v, want none", name, w)
		}
	}

	ref := &apiv1.ResourceRef{Group: res.GVR.Group, Version: res.GVR.Version, Resource: res.GVR.Resource, Name: "bad"}
	if _, err := api.Server.UpdateObject(admin, res, ref, func(old runtime.Object) (runtime.Object, error) {
		p := old.(*admissionregistrationv1.ValidatingAdmissionPolicy).DeepCopy()
		p.Spec.Validations = p.Spec.Validations[:1]
		return p, nil
	}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the fixed policy's status to observe generation 2", func() bool {
		p := stored("bad")
		return p.Generation == 2 && p.Status.ObservedGeneration == 2
	})
	if w := stored("bad").Status.TypeChecking.ExpressionWarnings; len(w) != 0 {
		t.Errorf("warnings after the fix = %+v, want none", w)
	}
}
