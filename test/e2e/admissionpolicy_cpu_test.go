package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/procstat"
)

// TestAdmissionPolicyCreateCPU is a measurement, not a pass/fail check
// of speed: the all-in-one process's CPU per ConfigMap create (1 KiB,
// client-go, one at a time) with no policy, then with 10 matching
// ValidatingAdmissionPolicies (3 validations and one variable each). It
// runs only with MERIDIAN_ADMISSION_CPU=1 and logs the figures
// (docs/benchmarks.md).
func TestAdmissionPolicyCreateCPU(t *testing.T) {
	if os.Getenv("MERIDIAN_ADMISSION_CPU") == "" {
		t.Skip("a measurement: set MERIDIAN_ADMISSION_CPU=1 to run it")
	}
	requireKubectl(t)
	cp := start(t, "")
	c := cp.client()
	ctx := context.Background()
	data := map[string]string{}
	for i := range 9 {
		data[fmt.Sprintf("key-%d", i)] = strings.Repeat("v", 90)
	}
	const n = 300
	round := func(prefix string) time.Duration {
		t.Helper()
		// Warm up, then measure.
		for i := range 30 {
			if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-w%d", prefix, i), Labels: map[string]string{"app": "load"}}, Data: data}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		cpu0, err := procstat.CPU(cp.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Labels: map[string]string{"app": "load"}}, Data: data}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		cpu1, err := procstat.CPU(cp.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		return (cpu1 - cpu0) / n
	}
	none := round("none")

	var objs strings.Builder
	for i := range 10 {
		fmt.Fprintf(&objs, `---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: load-%[1]d
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
  variables:
  - name: labels
    expression: "object.metadata.?labels.orValue({})"
  validations:
  - expression: "object.metadata.name.size() < 64"
  - expression: "!('block-%[1]d' in variables.labels)"
  - expression: "!has(object.data) || object.data.all(k, k.size() < 256)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: load-%[1]d
spec:
  policyName: load-%[1]d
  validationActions: [Deny]
`, i)
	}
	cp.kubectl("apply", "-f", manifest(t, "load.yaml", objs.String()))
	eventually(t, func() string {
		_, errOut, err := cp.kubectlErr("create", "configmap", "probe", "--dry-run=server", "-o", "name")
		if err != nil {
			return errOut
		}
		_, errOut, err = cp.kubectlErr("apply", "--dry-run=server", "-f", manifest(t, "probe.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\n  labels:\n    block-9: x\n"))
		if err == nil || !strings.Contains(errOut, "load-9") {
			return "the 10th policy does not apply yet: " + errOut
		}
		return ""
	})
	ten := round("ten")
	t.Logf("all-in-one CPU per 1 KiB ConfigMap create (client-go, sequential, %d each): no policy %v, 10 matching policies %v (%.2f×); machine shared",
		n, none, ten, float64(ten)/float64(none))
}
