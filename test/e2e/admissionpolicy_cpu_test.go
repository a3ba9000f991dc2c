package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meridian-cp/meridian/lib/procstat"
)

// TestAdmissionPolicyCreateCPU is a measurement, not a pass/fail check
// of speed: the all-in-one process's CPU per ConfigMap create (1 KiB,
// client-go, one at a time) with no policy and with 10 matching
// ValidatingAdmissionPolicies (3 validations and one variable each),
// alternated in one process: pairs of phases in the order none, ten /
// ten, none / ..., each phase MERIDIAN_ADMISSION_CPU_CREATES creates
// (default 1000) after a warm-up, MERIDIAN_ADMISSION_CPU_PAIRS pairs
// (default 6). It logs each pair's ratio, the medians, and the geometric
// mean of the ratios, which over an even number of pairs weighs both
// orders equally, so neither the store's growth nor the pause for a
// change of policies favours one side (docs/benchmarks.md). It runs
// only with MERIDIAN_ADMISSION_CPU=1.
func TestAdmissionPolicyCreateCPU(t *testing.T) {
	if os.Getenv("MERIDIAN_ADMISSION_CPU") == "" {
		t.Skip("a measurement: set MERIDIAN_ADMISSION_CPU=1 to run it")
	}
	n, pairs := envInt(t, "MERIDIAN_ADMISSION_CPU_CREATES", 1000), envInt(t, "MERIDIAN_ADMISSION_CPU_PAIRS", 6)
	requireKubectl(t)
	cp := start(t, "")
	// No client-side rate limit (client-go's default is 5 requests a
	// second): at that pace the process's idle CPU would be most of
	// each create's share.
	cfg := cp.restConfig()
	cfg.QPS, cfg.Burst = 1e6, 1e6
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := map[string]string{}
	for i := range 9 {
		data[fmt.Sprintf("key-%d", i)] = strings.Repeat("v", 90)
	}
	configMap := func(name string, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: data}
	}
	// phase returns the process's CPU per create over n creates, after a
	// warm-up, and logs the creates' rate.
	phase := func(prefix string) time.Duration {
		t.Helper()
		for i := range 30 {
			if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, configMap(fmt.Sprintf("%s-w%d", prefix, i), map[string]string{"app": "load"}), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		cpu0, err := procstat.CPU(cp.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		for i := range n {
			if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, configMap(fmt.Sprintf("%s-%d", prefix, i), map[string]string{"app": "load"}), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		cpu1, err := procstat.CPU(cp.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d creates in %v", prefix, n, time.Since(began).Round(time.Millisecond))
		return (cpu1 - cpu0) / time.Duration(n)
	}
	// The process's CPU while idle, for scale.
	idle0, err := procstat.CPU(cp.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	idle1, err := procstat.CPU(cp.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("idle: %v of CPU per second", (idle1-idle0)/5)

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
	policies := manifest(t, "load.yaml", objs.String())
	// denied reports which of the 10 policies deny a dry-run create
	// labelled block-i (each policy denies its own label).
	denied := func() (n int, last string) {
		for i := range 10 {
			_, err := c.CoreV1().ConfigMaps("default").Create(ctx, configMap("probe", map[string]string{fmt.Sprintf("block-%d", i): "x"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil && strings.Contains(err.Error(), fmt.Sprintf("load-%d", i)) {
				n++
			} else if err != nil {
				last = err.Error()
			}
		}
		return n, last
	}
	set := func(ten bool) {
		t.Helper()
		if ten {
			cp.kubectl("apply", "-f", policies)
		} else {
			cp.kubectl("delete", "-f", policies)
		}
		eventually(t, func() string {
			n, last := denied()
			if (ten && n == 10) || (!ten && n == 0 && last == "") {
				return ""
			}
			return fmt.Sprintf("%d of 10 policies apply (want ten=%v) %s", n, ten, last)
		})
	}
	var nones, tens, ratios []float64
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for p := range pairs {
		var none, ten time.Duration
		if p%2 == 0 {
			none = phase(fmt.Sprintf("none-%d", p))
			set(true)
			ten = phase(fmt.Sprintf("ten-%d", p))
		} else {
			ten = phase(fmt.Sprintf("ten-%d", p))
			set(false)
			none = phase(fmt.Sprintf("none-%d", p))
		}
		nones, tens, ratios = append(nones, ms(none)), append(tens, ms(ten)), append(ratios, float64(ten)/float64(none))
		t.Logf("pair %d: no policy %.3f ms, 10 matching policies %.3f ms per create (%.2f×)", p, ms(none), ms(ten), ratios[p])
	}
	logSum := 0.0
	for _, r := range ratios {
		logSum += math.Log(r)
	}
	t.Logf("all-in-one CPU per 1 KiB ConfigMap create (client-go, sequential, %d per phase, %d pairs): median no policy %.3f ms, 10 matching policies %.3f ms (%.2f×); ratio geometric mean %.2f×, median %.2f×, range %.2f–%.2f; machine shared",
		n, pairs, median(nones), median(tens), median(tens)/median(nones), math.Exp(logSum/float64(len(ratios))), median(ratios), slices.Min(ratios), slices.Max(ratios))
}

// median is the middle of v (the mean of the two middle values when
// len(v) is even).
func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// envInt is the positive integer in the environment variable name, or
// def when it is unset.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
