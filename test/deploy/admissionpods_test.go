package deploy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// denyPolicy is a ValidatingAdmissionPolicy and its binding that refuse,
// with reason Forbidden, ConfigMaps labelled env=prod without an owner
// label.
const denyPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: chart-prod-needs-owner
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["configmaps"]
  validations:
    - expression: "!has(object.metadata.labels) || !('env' in object.metadata.labels) || object.metadata.labels['env'] != 'prod' || 'owner' in object.metadata.labels"
      message: prod ConfigMaps need an owner label
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: chart-prod-binding
spec:
  policyName: chart-prod-needs-owner
  validationActions: [Deny]
`

// admitInChart proves the admission service of the rendered chart reads
// the store: a ValidatingAdmissionPolicy and binding created with kubectl
// through a gateway deny, through every gateway, a ConfigMap they match
// with 403 Forbidden and kube-apiserver's message, the ConfigMap is not
// stored, and one they allow is. Policy and binding are deleted at the
// end, so that later measurements pay no Admit call.
func admitInChart(t *testing.T, kubectl func(args ...string) (string, error), clients []kubernetes.Interface) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(denyPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl("apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply of the policy: %v\n%s", err, out)
	}
	defer func() {
		if out, err := kubectl("delete", "-f", file); err != nil {
			t.Errorf("kubectl delete of the policy: %v\n%s", err, out)
		}
	}()
	ctx := context.Background()
	cm := func(name string, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: labels}}
	}
	const want = "ValidatingAdmissionPolicy 'chart-prod-needs-owner' with binding 'chart-prod-binding' denied request: prod ConfigMaps need an owner label"
	start := time.Now()
	for i, c := range clients {
		// The admission service learns of the policy by its watch on the
		// store: retry until it denies.
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; {
			_, err = c.CoreV1().ConfigMaps("demo").Create(ctx, cm("bad", map[string]string{"env": "prod"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if apierrors.IsForbidden(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("gateway %d: create of an env=prod ConfigMap without owner: %v; want 403 Forbidden with %q", i, err, want)
		}
	}
	t.Logf("the policy denies through %d gateways %v after it was created", len(clients), time.Since(start).Round(time.Millisecond))
	_, err := clients[0].CoreV1().ConfigMaps("demo").Create(ctx, cm("bad", map[string]string{"env": "prod"}), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("create of an env=prod ConfigMap without owner: %v, want 403 Forbidden", err)
	}
	if _, err := clients[0].CoreV1().ConfigMaps("demo").Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get of the denied ConfigMap: %v, want 404 NotFound (not stored)", err)
	}
	if _, err := clients[0].CoreV1().ConfigMaps("demo").Create(ctx, cm("good", map[string]string{"env": "prod", "owner": "team-a"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("create of an env=prod ConfigMap with owner: %v, want it stored", err)
	}
}
