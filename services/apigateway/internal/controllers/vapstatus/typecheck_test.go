package vapstatus

import (
	"log/slog"
	"reflect"
	"regexp"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/openapi"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
)

// TestTypeCheckerMatchesUpstream: for policies over built-in and custom
// kinds (type errors and well-typed expressions, message expressions,
// variables, params, several kinds, wildcards, subresources, unknown
// resources), typeChecker warns exactly as kube-apiserver's
// validating.TypeChecker given the same schemas and RESTMapper.
func TestTypeCheckerMatchesUpstream(t *testing.T) {
	reg := registry.New(registry.Standard()...)
	reg.SetCustom(registry.CustomResources(widgets()))
	schemas, mapper := openapi.NewSchemaResolver(reg), registry.NewRESTMapper(reg)
	ours := &typeChecker{schemas: schemas, restMapper: mapper, logger: slog.New(slog.DiscardHandler)}
	upstream := &validating.TypeChecker{SchemaResolver: schemas, RestMapper: mapper}

	configmaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	widgetsGVR := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	withParams := policy("params", configmaps, "object.data.x == params.data.y", "params.data.y == 1")
	withParams.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	withVariables := policy("variables", configmaps, "variables.n == 'x'", "variables.n == 1")
	withVariables.Spec.Variables = []admissionregistrationv1.Variable{{Name: "n", Expression: "object.data.x"}}
	several := policy("several", configmaps, "object.metadata.name == 1", "has(object.data)")
	several.Spec.MatchConstraints.ResourceRules[0].Resources = []string{"configmaps", "secrets", "namespaces", "configmaps/status", "*"}
	badMessage := policy("message", configmaps, "true")
	badMessage.Spec.Validations[0].MessageExpression = "object.data.x + 1"

	policies := []*admissionregistrationv1.ValidatingAdmissionPolicy{
		policy("bad", configmaps, "size(object.data) > 0", "object.data.x == 1"),
		policy("good", configmaps, "size(object.data) > 0", "object.data.x == 'y'"),
		policy("any", schema.GroupVersionResource{Group: "*", Version: "*", Resource: "*"}, "object.data.x == 1"),
		policy("widgets", widgetsGVR, "object.spec.replicas == 'x'", "object.spec.replicas < 5", "object.spec.nope == 1"),
		policy("unknown", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "object.spec.replicas == 'x'"),
		policy("syntax", configmaps, "object.data.x ==", "oldObject.data.x == request.name && authorizer.group('').resource('x').check('get').allowed()"),
		withParams, withVariables, several, badMessage,
		{ObjectMeta: policy("none", configmaps).ObjectMeta},
	}
	// The kinds' CEL type names are unique per check, numbered differently.
	typeName := regexp.MustCompile(`([A-Z][A-Za-z]*)[0-9]+`)
	normalize := func(ws []admissionregistrationv1.ExpressionWarning) []admissionregistrationv1.ExpressionWarning {
		for i := range ws {
			ws[i].Warning = typeName.ReplaceAllString(ws[i].Warning, "$1")
		}
		return ws
	}
	warned := 0
	for _, p := range policies {
		got, want := normalize(ours.Check(p)), normalize(upstream.Check(p))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("policy %s:\n got %+v\nwant %+v", p.Name, got, want)
		}
		if len(want) > 0 {
			warned++
		}
	}
	if warned < 6 {
		t.Errorf("upstream warned on %d policies, want at least 6 (the cases lost their type errors)", warned)
	}
}
