package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestQuotaConcurrentKubectl: a ResourceQuota leaving room for 3
// ConfigMaps (the namespace's kube-root-ca.crt takes one of the 4) holds
// under 20 concurrent kubectl creates: exactly 3 succeed, the others are
// refused with kube-apiserver's message, and kubectl shows the quota
// used.
func TestQuotaConcurrentKubectl(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.createNamespace("quota")
	cp.kubectl("create", "quota", "cms", "-n", "quota", "--hard=count/configmaps=4")
	deadline := time.Now().Add(30 * time.Second)
	for cp.kubectl("get", "quota", "cms", "-n", "quota", "-o", "jsonpath={.status.used.count/configmaps}") != "1" {
		if time.Now().After(deadline) {
			t.Fatal("the quota's status.used was not counted within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var mu sync.Mutex
	var created int
	var refused []string
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errOut, err := cp.kubectlErr("create", "configmap", fmt.Sprintf("cm-%d", i), "-n", "quota", "--from-literal=a=b")
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				created++
			} else {
				refused = append(refused, errOut)
			}
		}()
	}
	wg.Wait()
	if created != 3 || len(refused) != 17 {
		t.Fatalf("%d created, %d refused (%v); want 3 and 17", created, len(refused), refused)
	}
	const want = "exceeded quota: cms, requested: count/configmaps=1, used: count/configmaps=4, limited: count/configmaps=4"
	for _, e := range refused {
		if !strings.Contains(e, "is forbidden: "+want) {
			t.Fatalf("refusal %q, want %q", e, want)
		}
	}
	if got := cp.kubectl("get", "quota", "cms", "-n", "quota", "--no-headers"); !strings.Contains(got, "count/configmaps: 4/4") {
		t.Fatalf("kubectl get quota: %q", got)
	}
}
