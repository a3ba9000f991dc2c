package e2e

import (
	"strings"
	"testing"
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
// five admissionregistration.k8s.io/v1 kinds, and a policy whose
// expression does not compile is refused with 422 naming the field.
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
	cp.kubectl("delete", "-f", manifest(t, "objs2.yaml", objs))
}
