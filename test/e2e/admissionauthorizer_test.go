package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// secretReadersPolicy lets only users who may list Secrets in a
// ConfigMap's namespace create ConfigMaps labelled guarded=yes: CEL's
// authorizer, answered by the admission service from RBAC.
const secretReadersPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: secret-readers-only
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
    objectSelector:
      matchLabels:
        guarded: "yes"
  validations:
  - expression: "authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('list').allowed()"
    messageExpression: "'user ' + request.userInfo.username + ' may not list secrets'"
  - expression: "authorizer.requestResource.check('create').allowed()"
    message: "may not create what it creates"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: secret-readers-only
spec:
  policyName: secret-readers-only
  validationActions: [Deny]
`

// TestAdmissionPolicyAuthorizer: a policy's authorizer checks answer from
// RBAC for the requesting user: a user granted the ConfigMap create but
// not the Secret list is denied with the policy's message, a user granted
// both is admitted, and revoking the Secret grant denies that user too.
func TestAdmissionPolicyAuthorizer(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.grant("default", "cm-writer-alice", "alice", "create", "configmaps")
	cp.grant("default", "cm-writer-carol", "carol", "create", "configmaps")
	cp.grant("default", "secret-reader-carol", "carol", "list", "secrets")
	cp.kubectl("apply", "-f", manifest(t, "policy.yaml", secretReadersPolicy))

	create := func(user, name string) (string, error) {
		_, errOut, err := cp.kubectlErr("--as="+user, "-n", "default", "create", "--dry-run=server", "-f",
			manifest(t, name+".yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "+name+"\n  labels:\n    guarded: \"yes\"\n"))
		return errOut, err
	}
	denied := func(user string) string {
		return fmt.Sprintf("ValidatingAdmissionPolicy 'secret-readers-only' with binding 'secret-readers-only' denied request: user %s may not list secrets", user)
	}
	eventually(t, func() string {
		if errOut, err := create("alice", "by-alice"); err == nil || !strings.Contains(errOut, denied("alice")) {
			return fmt.Sprintf("alice (no secrets list): err %v, stderr %q, want %q", err, errOut, denied("alice"))
		}
		return ""
	})
	if errOut, err := create("carol", "by-carol"); err != nil {
		t.Fatalf("carol (may list secrets) was refused: %s", errOut)
	}
	// The admin (system:masters) may do anything.
	cp.kubectl("-n", "default", "create", "--dry-run=server", "-f",
		manifest(t, "admin.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: by-admin\n  labels:\n    guarded: \"yes\"\n"))

	cp.kubectl("-n", "default", "delete", "rolebinding", "secret-reader-carol")
	eventually(t, func() string {
		if errOut, err := create("carol", "by-carol"); err == nil || !strings.Contains(errOut, denied("carol")) {
			return fmt.Sprintf("carol after her grant was revoked: err %v, stderr %q, want %q", err, errOut, denied("carol"))
		}
		return ""
	})
}
