package celpolicy

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// probePolicy reads every CEL variable built from the request.
func probePolicy() *validatingPolicy {
	return compileValidating(&admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			Variables: []admissionregistrationv1.Variable{{Name: "name", Expression: "object == null ? '' : object.metadata.?name.orValue('')"}},
			Validations: []admissionregistrationv1.Validation{
				{Expression: "variables.name != 'deny-me'", MessageExpression: "'denied ' + request.operation + ' by ' + request.userInfo.username"},
				{Expression: "oldObject == null || oldObject.metadata.?labels.orValue({}).size() >= 0"},
				{Expression: "request.namespace.size() >= 0 && request.resource.resource == 'configmaps'"},
			},
		},
	}, nil)
}

// TestRequestToCEL: the request's fields reach CEL as kube-apiserver
// exposes them, and a request the policy denies is denied with the
// message its messageExpression builds.
func TestRequestToCEL(t *testing.T) {
	p := probePolicy()
	if p.err != nil {
		t.Fatal(p.err)
	}
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "probe", ValidationActions: []admissionregistrationv1.ValidationAction{"Deny"}}}
	for _, tc := range []struct {
		name, object, want string
	}{
		{"admitted", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ok"}}`, ""},
		{"denied", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deny-me"}}`,
			`configmaps "deny-me" is forbidden: ValidatingAdmissionPolicy 'probe' with binding 'b' denied request: denied CREATE by alice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.TrimSuffix(strings.Split(tc.object, `"name":"`)[1], `"}}`)
			req := &admissionv1.AdmitRequest{Operation: admissionv1.Operation_OPERATION_CREATE,
				Kind:     &admissionv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
				Resource: &admissionv1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "default", Name: name,
				UserInfo: &admissionv1.UserInfo{Username: "alice"}, Object: []byte(tc.object)}
			inv := &validatingInvocation{req: &request{authz: mastersOnly, nsSet: true}, policy: p, binding: b}
			d, err := inv.Evaluate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if d.Denial != nil {
				got = d.Denial.Message
				if d.Denial.Code != 422 || d.Denial.Reason != "Invalid" {
					t.Errorf("denial %d %s, want 422 Invalid", d.Denial.Code, d.Denial.Reason)
				}
			}
			if got != tc.want {
				t.Errorf("denial message %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzRequestToCEL: any object, old object and options bytes either fail
// to convert or convert into CEL input a policy evaluates without
// panicking (its decision is whatever the expressions say).
func FuzzRequestToCEL(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":{"a":"b"}},"data":{"k":"v"}}`), []byte(`{"metadata":{"labels":{}}}`), []byte(`{"dryRun":["All"]}`), uint8(2))
	f.Add([]byte(`{"metadata":{"name":7}}`), []byte{}, []byte{}, uint8(1))
	f.Add([]byte(`[]`), []byte(`null`), []byte(`{}`), uint8(3))
	f.Add([]byte(`{"metadata":{"name":"deny-me"},"spec":{"x":[1,2.5,"s",null,{"y":true}]}}`), []byte{}, []byte(`{}`), uint8(4))
	p := probePolicy()
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "probe", ValidationActions: []admissionregistrationv1.ValidationAction{"Deny", "Audit"}}}
	f.Fuzz(func(t *testing.T, obj, old, opts []byte, op uint8) {
		req := &admissionv1.AdmitRequest{Operation: admissionv1.Operation(op % 5),
			Kind:     &admissionv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource: &admissionv1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "default", Name: "x",
			UserInfo: &admissionv1.UserInfo{Username: "alice", Groups: []string{"g"}, Extra: map[string]*admissionv1.ExtraValue{"k": {Values: []string{"v"}}}},
			Object:   obj, OldObject: old, Options: opts}
		a, err := newAttributes(req)
		if err != nil {
			return
		}
		if len(obj) > 0 && a.GetObject() == nil {
			t.Fatal("an object that decoded is missing")
		}
		inv := &validatingInvocation{req: &request{authz: mastersOnly, nsSet: true}, policy: p, binding: b}
		if _, err := inv.Evaluate(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	})
}
