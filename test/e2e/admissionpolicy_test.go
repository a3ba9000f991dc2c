package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// prodOwnerPolicy denies ConfigMaps labelled env=prod that have no owner
// label.
const prodOwnerPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: prod-needs-owner
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
  matchConditions:
  - name: prod-only
    expression: "has(object.metadata.labels) && object.metadata.labels[?'env'].orValue('') == 'prod'"
  variables:
  - name: labels
    expression: "object.metadata.labels"
  validations:
  - expression: "'owner' in variables.labels"
    message: "prod ConfigMaps need an owner label"
    reason: Invalid
`

// TestAdmissionPolicyKindsServed: kubectl applies, lists and deletes the
// five admissionregistration.k8s.io/v1 kinds, a policy whose expression
// does not compile is refused with 422 naming the field, and a policy
// whose expression is ill-typed for the kind it matches gets a
// type-checking warning in its status.
func TestAdmissionPolicyKindsServed(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	objs := prodOwnerPolicy + `---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: prod-needs-owner
spec:
  policyName: prod-needs-owner
  validationActions: [Deny]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: add-label
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["secrets"]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'x': 'y'}}}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: add-label
spec:
  policyName: add-label
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: hook
webhooks:
- name: hook.example.com
  clientConfig:
    url: https://127.0.0.1:1/validate
  sideEffects: None
  admissionReviewVersions: [v1]
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["services"]
`
	out := cp.kubectl("apply", "-f", manifest(t, "objs.yaml", objs))
	for _, want := range []string{
		"validatingadmissionpolicy.admissionregistration.k8s.io/prod-needs-owner created",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/prod-needs-owner created",
		"mutatingadmissionpolicy.admissionregistration.k8s.io/add-label created",
		"mutatingadmissionpolicybinding.admissionregistration.k8s.io/add-label created",
		"validatingwebhookconfiguration.admissionregistration.k8s.io/hook created",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply printed %q, want a line %q", out, want)
		}
	}
	got := cp.kubectl("get", "validatingadmissionpolicies", "-o", "jsonpath={.items[0].spec.failurePolicy} {.items[0].spec.matchConstraints.matchPolicy} {.items[0].metadata.generation}")
	if got != "Fail Equivalent 1" {
		t.Errorf("stored policy defaults = %q, want %q", got, "Fail Equivalent 1")
	}
	if got := cp.kubectl("get", "validatingwebhookconfigurations", "hook", "-o", "jsonpath={.webhooks[0].timeoutSeconds} {.webhooks[0].failurePolicy}"); got != "10 Fail" {
		t.Errorf("webhook defaults = %q, want %q", got, "10 Fail")
	}
	if _, errOut, err := cp.kubectlErr("get", "mutatingwebhookconfigurations"); err != nil {
		t.Errorf("kubectl get mutatingwebhookconfigurations: %v: %s", err, errOut)
	}

	bad := strings.Replace(strings.Replace(prodOwnerPolicy, "prod-needs-owner", "bad-policy", 1),
		`"'owner' in variables.labels"`, `"object.metadata.labels.owner ==="`, 1)
	_, errOut, err := cp.kubectlErr("apply", "-f", manifest(t, "bad.yaml", bad))
	if err == nil {
		t.Fatal("a policy whose expression does not compile was accepted")
	}
	for _, want := range []string{`is invalid`, `spec.validations[0].expression`, `compilation failed`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("kubectl apply of a bad expression: stderr %q, want it to contain %q", errOut, want)
		}
	}
	if _, _, err := cp.kubectlErr("get", "validatingadmissionpolicy", "bad-policy"); err == nil {
		t.Error("the refused policy was stored")
	}

	// Type checking: a comparison of a ConfigMap's data value (a string)
	// with an integer compiles (object is dynamic) and is stored, and the
	// status controller reports it against v1 ConfigMap.
	cp.kubectl("apply", "-f", manifest(t, "typed.yaml", typedPolicy))
	eventually(t, func() string {
		got := cp.kubectl("get", "validatingadmissionpolicy", "data-typed", "-o",
			"jsonpath={.metadata.generation} {.status.observedGeneration} {.status.typeChecking.expressionWarnings[*].fieldRef}")
		if got != "1 1 spec.validations[1].expression" {
			return fmt.Sprintf("generation, observedGeneration, warned fields = %q, want %q", got, "1 1 spec.validations[1].expression")
		}
		return ""
	})
	warning := cp.kubectl("get", "validatingadmissionpolicy", "data-typed", "-o", "jsonpath={.status.typeChecking.expressionWarnings[0].warning}")
	for _, want := range []string{"/v1, Kind=ConfigMap", "found no matching overload for '_==_' applied to '(string, int)'"} {
		if !strings.Contains(warning, want) {
			t.Errorf("type-checking warning %q, want it to contain %q", warning, want)
		}
	}
	cp.kubectl("delete", "-f", manifest(t, "objs2.yaml", objs))
}

// typedPolicy validates ConfigMaps; its second validation compares a
// string with an integer.
const typedPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: data-typed
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
  validations:
  - expression: "size(object.data) <= 5"
  - expression: "object.data.replicas == 3"
`

// eventually retries f (every 100ms, up to 30s) until it returns "",
// then fails the test with f's last message: a policy applies once the
// admission service has read it and its scope has reached the gateway.
func eventually(t *testing.T, f func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestValidatingAdmissionPolicy: a policy and binding deny ConfigMaps
// labelled env=prod without an owner label, with kube-apiserver's
// message and the validation's reason (Invalid → 422); others are
// stored. Rebound with Warn, the same write is stored and kubectl prints
// the warning.
func TestValidatingAdmissionPolicy(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	binding := func(action string) string {
		return `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: prod-binding
spec:
  policyName: prod-needs-owner
  validationActions: [` + action + `]
`
	}
	cp.kubectl("apply", "-f", manifest(t, "p.yaml", prodOwnerPolicy+"---\n"+binding("Deny")))
	want := `The configmaps "bad" is invalid: : ValidatingAdmissionPolicy 'prod-needs-owner' with binding 'prod-binding' denied request: prod ConfigMaps need an owner label`
	eventually(t, func() string {
		_, errOut, err := cp.kubectlErr("create", "configmap", "bad", "--dry-run=server")
		if err != nil {
			return "a ConfigMap without labels was refused: " + errOut
		}
		_, errOut, err = cp.kubectlErr("apply", "--dry-run=server", "-f", manifest(t, "bad.yaml", prodConfigMap("bad", "")))
		if err == nil || !strings.Contains(errOut, want) {
			return fmt.Sprintf("kubectl apply of an env=prod ConfigMap without owner: err %v, stderr %q, want %q", err, errOut, want)
		}
		return ""
	})
	// The status kubectl got: 422 Invalid, as the validation's reason says.
	c := cp.client()
	_, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Labels: map[string]string{"env": "prod"}},
	}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("create of an env=prod ConfigMap without owner: %v, want 422 Invalid", err)
	}
	wantMsg := `configmaps "bad" is forbidden: ValidatingAdmissionPolicy 'prod-needs-owner' with binding 'prod-binding' denied request: prod ConfigMaps need an owner label`
	if err.Error() != wantMsg {
		t.Errorf("Status message %q, want %q", err.Error(), wantMsg)
	}
	cp.kubectl("apply", "-f", manifest(t, "good.yaml", prodConfigMap("good", "team-a")))
	if _, _, err := cp.kubectlErr("get", "configmap", "bad"); err == nil {
		t.Error("the denied ConfigMap was stored")
	}

	cp.kubectl("apply", "-f", manifest(t, "warn.yaml", binding("Warn")))
	eventually(t, func() string {
		_, errOut, err := cp.kubectlErr("apply", "--dry-run=server", "-f", manifest(t, "bad.yaml", prodConfigMap("bad", "")))
		wantWarn := "Warning: Validation failed for ValidatingAdmissionPolicy 'prod-needs-owner' with binding 'prod-binding': prod ConfigMaps need an owner label"
		if err != nil || !strings.Contains(errOut, wantWarn) {
			return fmt.Sprintf("kubectl apply under Warn: err %v, stderr %q, want %q", err, errOut, wantWarn)
		}
		return ""
	})
}

// prodConfigMap is a ConfigMap labelled env=prod, with an owner label
// when owner is not empty.
func prodConfigMap(name, owner string) string {
	s := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  labels:\n    env: prod\n"
	if owner != "" {
		s += "    owner: " + owner + "\n"
	}
	return s
}

// TestParamAdmissionPolicy: a policy reads its limit from a ConfigMap
// named by the binding's paramRef; a missing param under
// parameterNotFoundAction Deny denies; a changed param is read.
func TestParamAdmissionPolicy(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.kubectl("apply", "-f", manifest(t, "p.yaml", `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: max-keys
spec:
  paramKind:
    apiVersion: v1
    kind: ConfigMap
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["secrets"]
  validations:
  - expression: "size(object.data) <= int(params.data.max)"
    messageExpression: "'at most ' + params.data.max + ' keys'"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: max-keys
spec:
  policyName: max-keys
  validationActions: [Deny]
  paramRef:
    name: limits
    namespace: default
    parameterNotFoundAction: Deny
`))
	eventually(t, func() string {
		_, errOut, err := cp.kubectlErr("create", "secret", "generic", "s0", "--from-literal=a=1", "--dry-run=server")
		if err == nil || !strings.Contains(errOut, "no params found for policy binding with `Deny` parameterNotFoundAction") {
			return fmt.Sprintf("a create without the param: err %v, stderr %q", err, errOut)
		}
		return ""
	})
	cp.kubectl("create", "configmap", "limits", "--from-literal=max=1")
	eventually(t, func() string {
		_, errOut, err := cp.kubectlErr("create", "secret", "generic", "s2", "--from-literal=a=1", "--from-literal=b=2")
		if err == nil || !strings.Contains(errOut, "denied request: at most 1 keys") || !strings.Contains(errOut, "forbidden") {
			return fmt.Sprintf("a secret over the param's limit: err %v, stderr %q", err, errOut)
		}
		return ""
	})
	cp.kubectl("create", "secret", "generic", "s1", "--from-literal=a=1")
	// A change of the param object decides the requests after it.
	cp.kubectl("patch", "configmap", "limits", "-p", `{"data":{"max":"2"}}`)
	eventually(t, func() string {
		if _, errOut, err := cp.kubectlErr("create", "secret", "generic", "s2", "--from-literal=a=1", "--from-literal=b=2"); err != nil {
			return fmt.Sprintf("a secret within the changed param's limit: err %v, stderr %q", err, errOut)
		}
		return ""
	})
}

// TestMutatingAdmissionPolicy: a MutatingAdmissionPolicy adds a label to
// ConfigMaps; the stored object carries it, and a validating policy sees
// the mutated object (it requires the label).
func TestMutatingAdmissionPolicy(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.kubectl("apply", "-f", manifest(t, "p.yaml", `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: add-team
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  matchConditions:
  - name: not-root-ca
    expression: "object.metadata.name != 'kube-root-ca.crt'"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'team': 'platform'}}}"
  - patchType: JSONPatch
    jsonPatch:
      expression: "[JSONPatch{op: 'add', path: '/data', value: {'added': 'yes'}}]"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: add-team
spec:
  policyName: add-team
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: needs-team
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  validations:
  - expression: "object.metadata.name == 'kube-root-ca.crt' || object.metadata.labels[?'team'].orValue('') == 'platform'"
    message: "no team label"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: needs-team
spec:
  policyName: needs-team
  validationActions: [Deny]
`))
	n := 0
	eventually(t, func() string {
		n++
		name := fmt.Sprintf("cm%d", n)
		out, errOut, err := cp.kubectlErr("create", "configmap", name, "-o", "jsonpath={.metadata.labels.team} {.data.added}")
		if err != nil {
			return fmt.Sprintf("kubectl create configmap: %v: %s", err, errOut)
		}
		if out != "platform yes" {
			return fmt.Sprintf("created ConfigMap: label and data %q, want %q", out, "platform yes")
		}
		if got := cp.kubectl("get", "configmap", name, "-o", "jsonpath={.metadata.labels.team}"); got != "platform" {
			return fmt.Sprintf("stored ConfigMap's team label = %q, want platform", got)
		}
		return ""
	})
}
