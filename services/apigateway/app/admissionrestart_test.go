package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/admissiontest"
)

// configMapCreates is the scope of a policy on configmap creates.
var configMapCreates = admissiontest.Scope{Rules: []admissiontest.Rule{{
	Operations: []admissionv1.Operation{admissionv1.Operation_OPERATION_CREATE},
	APIGroups:  []string{""},
	Resources:  []string{"configmaps"},
}}}

// TestWritesWaitForAdmissionRestart: while the only admission replica
// restarts, writes it must admit wait for it and then succeed (or are
// denied as its policy says); none gets a 500.
func TestWritesWaitForAdmissionRestart(t *testing.T) {
	policies := admissiontest.NewPolicies(configMapCreates)
	adm := admissiontest.Start(t, "127.0.0.1:0", policies, admissiontest.Options{})
	g := startGateway(t, adm.Addr)
	i := 0
	eventually(t, "configmap creates are sent to admission", func() bool {
		i++
		code, _ := g.write(http.MethodPost, "configmaps", fmt.Sprintf("deny-%d", i))
		return code == http.StatusForbidden
	})

	if err := adm.Stop(); err != nil {
		t.Fatal(err)
	}
	type result struct {
		name string
		code int
		body string
	}
	const writes = 4
	results := make(chan result, writes)
	for w := range writes {
		name := fmt.Sprintf("during-restart-%d", w)
		if w == writes-1 {
			name = "deny-during-restart"
		}
		go func() {
			code, body := g.write(http.MethodPost, "configmaps", name)
			results <- result{name, code, body}
		}()
	}
	// The writes wait for the service (the gateway has sent Admit again)
	// before it comes back on the same address.
	eventually(t, "the gateway retrying admission", func() bool {
		return telemetrytest.Sum(t, g.reg, "meridian_apigateway_admission_retries_total", nil) > 0
	})
	admissiontest.Start(t, adm.Addr, policies, admissiontest.Options{})
	for range writes {
		r := <-results
		want := http.StatusCreated
		if strings.HasPrefix(r.name, "deny-") {
			want = http.StatusForbidden
		}
		if r.code != want {
			t.Errorf("%s, sent while admission restarted: %d %s, want %d", r.name, r.code, r.body, want)
		}
		if got, wantGet := g.get("configmaps", r.name), map[bool]int{true: http.StatusOK, false: http.StatusNotFound}[want == http.StatusCreated]; got != wantGet {
			t.Errorf("GET %s after the write: %d, want %d", r.name, got, wantGet)
		}
	}
}

// TestWriteWhileAdmissionIsDown: a write that admission must admit, sent
// while the service stays unreachable, gets 503 ServiceUnavailable with
// Retry-After once the gateway stops waiting, and nothing is stored.
func TestWriteWhileAdmissionIsDown(t *testing.T) {
	policies := admissiontest.NewPolicies(configMapCreates)
	adm := admissiontest.Start(t, "127.0.0.1:0", policies, admissiontest.Options{})
	g := startGateway(t, adm.Addr)
	eventually(t, "the gateway holds the scope", g.synced)
	if err := adm.Stop(); err != nil {
		t.Fatal(err)
	}

	req, err := http.NewRequest(http.MethodPost, g.url+"/api/v1/namespaces/default/configmaps",
		strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"while-down"}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var st metav1.Status
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, data, err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || st.Reason != metav1.StatusReasonServiceUnavailable || st.Code != http.StatusServiceUnavailable {
		t.Fatalf("write while admission is down: %d %s, want 503 ServiceUnavailable", resp.StatusCode, data)
	}
	if ra := resp.Header.Get("Retry-After"); ra == "" || st.Details == nil || st.Details.RetryAfterSeconds <= 0 {
		t.Fatalf("503 without Retry-After (header %q): %s", ra, data)
	}
	if !strings.Contains(st.Message, "not applied") {
		t.Errorf("message %q does not say the write was not applied", st.Message)
	}
	if code := g.get("configmaps", "while-down"); code != http.StatusNotFound {
		t.Fatalf("GET of the refused write: %d, want 404", code)
	}
}
