package celpolicy

import (
	"context"
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

// mutating compiles a MutatingAdmissionPolicy named name of one
// ApplyConfiguration mutation, bound once.
func mutating(t *testing.T, name, applyConfiguration string, reinvoke admissionregistrationv1.ReinvocationPolicyType) mutatingBinding {
	t.Helper()
	mp := compileMutating(&admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			ReinvocationPolicy: reinvoke,
			Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: applyConfiguration}}},
		},
	}, nil)
	if mp.err != nil {
		t.Fatalf("compiling %s: %v", name, mp.err)
	}
	return mutatingBinding{policy: mp, binding: &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// policies is a policy.Set of fixed policies.
type policies []policy.Policy

func (p policies) Matching(*admissionv1.AdmitRequest) []policy.Policy { return p }
func (p policies) Scope() (policy.Scope, <-chan struct{})             { return policy.Scope{Everything: true}, nil }

// admit runs ps over the create of obj (apiVersion v1, of kind and
// resource) and decodes the object admitted into out.
func admit(t *testing.T, kind, resource string, obj, out any, ps ...policy.Policy) {
	t.Helper()
	req := createRequest(t, kind, resource, obj)
	res, err := policy.Evaluator{Set: policies(ps)}.Admit(t.Context(), req)
	if err != nil || !res.Allowed {
		t.Fatalf("admit: %+v %v", res.Denial, err)
	}
	raw := req.Object
	if len(res.Patch) > 0 {
		p, err := jsonpatch.DecodePatch(res.Patch)
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = p.Apply(raw); err != nil {
			t.Fatal(err)
		}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
}

// createRequest is the admission request of obj's create in namespace
// default (for a namespaced resource).
func createRequest(t *testing.T, kind, resource string, obj any) *admissionv1.AdmitRequest {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.APIVersion != "v1" || meta.Kind != kind {
		t.Fatalf("object of %s %s, want v1 %s", meta.APIVersion, meta.Kind, kind)
	}
	return &admissionv1.AdmitRequest{
		Operation: admissionv1.Operation_OPERATION_CREATE, Kind: &admissionv1.GroupVersionKind{Version: "v1", Kind: kind},
		Resource: &admissionv1.GroupVersionResource{Version: "v1", Resource: resource}, Namespace: meta.Namespace, Name: meta.Name, Object: raw,
	}
}

func newChain(bs ...mutatingBinding) *mutatingChain {
	return &mutatingChain{req: &request{authz: mastersOnly, nsSet: true}, bindings: bs, oi: newObjectInterfaces(), tc: newTypeConverter(registry.New(registry.Standard()...))}
}

// twoOwners is a ServiceAccount owned by a and b (uids 1 and 2), with
// pull secret a.
func twoOwners() *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: "sa", Namespace: "default", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: "a", UID: "1"}, {APIVersion: "v1", Kind: "ConfigMap", Name: "b", UID: "2"},
		}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "a"}},
	}
}

// TestApplyConfigurationListMapKeys: an ApplyConfiguration merges a
// built-in kind's lists by their list-map keys, as kube-apiserver does
// with the kind's schema: a Namespace's status conditions by type (the
// other condition kept, the named one changed, a new one appended); a
// mutation of an atomic list (a ServiceAccount's imagePullSecrets) or of
// an atomic struct (an owner reference, an element of a list keyed by
// uid) is refused, and under failurePolicy Fail denies the request.
func TestApplyConfigurationListMapKeys(t *testing.T) {
	var ns corev1.Namespace
	admit(t, "Namespace", "namespaces", &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "ns"},
		Status: corev1.NamespaceStatus{Conditions: []corev1.NamespaceCondition{{Type: "A", Status: "True"}, {Type: "B", Status: "True"}}},
	}, &ns, newChain(mutating(t, "conditions",
		"Object{status: Object.status{conditions: [Object.status.conditions{type: 'B', status: 'False'}, Object.status.conditions{type: 'C', status: 'True'}]}}", "")))
	wantConditions := []corev1.NamespaceCondition{{Type: "A", Status: "True"}, {Type: "B", Status: "False"}, {Type: "C", Status: "True"}}
	if got := ns.Status.Conditions; len(got) != len(wantConditions) {
		t.Fatalf("conditions %+v, want %+v", got, wantConditions)
	}
	for i, c := range wantConditions {
		if g := ns.Status.Conditions[i]; g.Type != c.Type || g.Status != c.Status {
			t.Errorf("condition %d: %s %s, want %s %s", i, g.Type, g.Status, c.Type, c.Status)
		}
	}

	for name, expr := range map[string]string{
		"an atomic list":                  "Object{imagePullSecrets: [Object.imagePullSecrets{name: 'b'}]}",
		"an atomic element of a list-map": "Object{metadata: Object.metadata{ownerReferences: [Object.metadata.ownerReferences{uid: '3', name: 'c', apiVersion: 'v1', kind: 'ConfigMap'}]}}",
	} {
		chain := newChain(mutating(t, "refused", expr, ""))
		res, err := policy.Evaluator{Set: policies{chain}}.Admit(context.Background(), createRequest(t, "ServiceAccount", "serviceaccounts", twoOwners()))
		if err != nil || res.Allowed || res.Denial.Code != 422 {
			t.Errorf("a mutation of %s: %+v %v, want a 422 denial", name, res, err)
		}
	}
}

// labeller is a mutating policy that is not a CEL policy (a mutating
// webhook's place in the pipeline): it sets label key=value.
type labeller struct{ key, value string }

func (l labeller) Mutating() bool { return true }

func (l labeller) Evaluate(_ context.Context, req *admissionv1.AdmitRequest) (policy.Decision, error) {
	var obj map[string]any
	if err := json.Unmarshal(req.GetObject(), &obj); err != nil {
		return policy.Decision{}, err
	}
	meta := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		meta["labels"] = labels
	}
	if labels[l.key] == l.value {
		return policy.Decision{}, nil
	}
	labels[l.key] = l.value
	js, err := json.Marshal(obj)
	return policy.Decision{Object: js}, err
}

// TestReinvocationAcrossPolicies: a MutatingAdmissionPolicy with
// reinvocationPolicy IfNeeded runs again when a mutating policy after it
// (here standing for a mutating webhook) changed the object, and sees that
// change; with Never it runs once.
func TestReinvocationAcrossPolicies(t *testing.T) {
	const copyLabel = "Object{metadata: Object.metadata{labels: {'seen': object.metadata.?labels[?'hook'].orValue('none')}}}"
	for _, tc := range []struct {
		reinvoke admissionregistrationv1.ReinvocationPolicyType
		want     string
	}{
		{admissionregistrationv1.IfNeededReinvocationPolicy, "yes"},
		{admissionregistrationv1.NeverReinvocationPolicy, "none"},
	} {
		var got corev1.ServiceAccount
		admit(t, "ServiceAccount", "serviceaccounts", twoOwners(), &got, newChain(mutating(t, "copy", copyLabel, tc.reinvoke)), labeller{"hook", "yes"})
		if got.Labels["seen"] != tc.want || got.Labels["hook"] != "yes" {
			t.Errorf("%s: labels %v, want seen=%s hook=yes", tc.reinvoke, got.Labels, tc.want)
		}
	}
}
