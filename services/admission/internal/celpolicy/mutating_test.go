package celpolicy

import (
	"context"
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// admitPod runs ps over the create of pod and returns the pod admitted.
func admitPod(t *testing.T, pod *corev1.Pod, ps ...policy.Policy) *corev1.Pod {
	t.Helper()
	pod.APIVersion, pod.Kind = "v1", "Pod"
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	res, err := policy.Evaluator{Set: policies(ps)}.Admit(t.Context(), &admissionv1.AdmitRequest{
		Operation: admissionv1.Operation_OPERATION_CREATE, Kind: &admissionv1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: &admissionv1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "default", Name: pod.Name, Object: raw,
	})
	if err != nil || !res.Allowed {
		t.Fatalf("admit: %+v %v", res.Denial, err)
	}
	if len(res.Patch) > 0 {
		p, err := jsonpatch.DecodePatch(res.Patch)
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = p.Apply(raw); err != nil {
			t.Fatal(err)
		}
	}
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func newChain(bs ...mutatingBinding) *mutatingChain {
	return &mutatingChain{req: &request{authz: mastersOnly, nsSet: true}, bindings: bs, oi: newObjectInterfaces(), tc: newTypeConverter()}
}

func twoContainers() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "a", Image: "a:1"}, {Name: "b", Image: "b:1"},
	}}}
}

// TestApplyConfigurationListMapKeys: an ApplyConfiguration merges a
// built-in kind's lists by their list-map keys, as kube-apiserver does
// with the kind's schema: a Pod's containers by name (the other container
// kept, the named one changed, a new one appended); a mutation of an
// atomic list (a container's args) is refused, and under
// failurePolicy Fail denies the request.
func TestApplyConfigurationListMapKeys(t *testing.T) {
	got := admitPod(t, twoContainers(), newChain(mutating(t, "images",
		"Object{spec: Object.spec{containers: [Object.spec.containers{name: 'b', image: 'b:2'}, Object.spec.containers{name: 'c', image: 'c:1'}]}}", "")))
	want := []corev1.Container{{Name: "a", Image: "a:1"}, {Name: "b", Image: "b:2"}, {Name: "c", Image: "c:1"}}
	if len(got.Spec.Containers) != len(want) {
		t.Fatalf("containers %+v, want %+v", got.Spec.Containers, want)
	}
	for i, c := range want {
		if g := got.Spec.Containers[i]; g.Name != c.Name || g.Image != c.Image {
			t.Errorf("container %d: %s %s, want %s %s", i, g.Name, g.Image, c.Name, c.Image)
		}
	}

	chain := newChain(mutating(t, "args", "Object{spec: Object.spec{containers: [Object.spec.containers{name: 'a', args: ['x']}]}}", ""))
	pod := twoContainers()
	pod.APIVersion, pod.Kind = "v1", "Pod"
	raw, _ := json.Marshal(pod)
	res, err := policy.Evaluator{Set: policies{chain}}.Admit(context.Background(), &admissionv1.AdmitRequest{
		Operation: admissionv1.Operation_OPERATION_CREATE, Kind: &admissionv1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: &admissionv1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "default", Name: "p", Object: raw,
	})
	if err != nil || res.Allowed || res.Denial.Code != 422 {
		t.Fatalf("a mutation of an atomic list: %+v %v, want a 422 denial", res, err)
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
		got := admitPod(t, twoContainers(), newChain(mutating(t, "copy", copyLabel, tc.reinvoke)), labeller{"hook", "yes"})
		if got.Labels["seen"] != tc.want || got.Labels["hook"] != "yes" {
			t.Errorf("%s: labels %v, want seen=%s hook=yes", tc.reinvoke, got.Labels, tc.want)
		}
	}
}
