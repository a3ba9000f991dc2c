package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/kube/webhook/webhooktest"
)

// e2eWebhooks serves the test's admission webhooks over HTTPS:
// /validate refuses ConfigMaps labelled env=prod without an owner label
// (403, with a warning on every review), /mutate adds the label
// mutated-by=webhook, /slow never answers.
func e2eWebhooks(t *testing.T) *webhooktest.Server {
	release := make(chan struct{})
	// Registered after the server's Close, so it runs before it.
	defer t.Cleanup(func() { close(release) })
	return webhooktest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		var obj struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		_ = json.Unmarshal(review.Request.Object.Raw, &obj)
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		switch r.URL.Path {
		case "/validate":
			resp.Warnings = []string{"reviewed by the e2e webhook"}
			if l := obj.Metadata.Labels; l["env"] == "prod" && l["owner"] == "" {
				resp.Allowed = false
				resp.Result = &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: "env=prod needs an owner label"}
			}
		case "/mutate":
			pt := admissionv1.PatchTypeJSONPatch
			resp.PatchType = &pt
			if obj.Metadata.Labels == nil {
				resp.Patch = []byte(`[{"op":"add","path":"/metadata/labels","value":{"mutated-by":"webhook"}}]`)
			} else {
				resp.Patch = []byte(`[{"op":"add","path":"/metadata/labels/mutated-by","value":"webhook"}]`)
			}
		}
		review.Request, review.Response = nil, resp
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
}

// webhookConfig is a webhook configuration of kind for the ConfigMaps of
// namespace ns, calling path on srv.
func webhookConfig(kind, name, ns string, srv *webhooktest.Server, path, failurePolicy string, timeout int) string {
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: %s
metadata:
  name: %s
webhooks:
- name: %s.e2e.meridian.dev
  clientConfig:
    url: %s%s
    caBundle: %s
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["configmaps"]
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: %s
  failurePolicy: %s
  sideEffects: None
  timeoutSeconds: %d
  admissionReviewVersions: ["v1"]
`, kind, name, name, srv.URL, path, base64.StdEncoding.EncodeToString(srv.CABundle), ns, failurePolicy, timeout)
}

// TestAdmissionWebhooks: kubectl applies a validating and a mutating
// webhook served by the test over HTTPS (verified with their caBundle);
// a prod ConfigMap without an owner is refused with the webhook's code
// and message, its warning reaches kubectl, and the mutating webhook's
// label is stored. A webhook that never answers costs its timeout: under
// Ignore the create succeeds, under Fail it is refused naming the
// timeout.
func TestAdmissionWebhooks(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	srv := e2eWebhooks(t)
	for _, ns := range []string{"hooked", "slow-ignore", "slow-fail"} {
		cp.createNamespace(ns)
	}
	cp.kubectl("apply", "-f", manifest(t, "hooks.yaml", webhookConfig("ValidatingWebhookConfiguration", "owner", "hooked", srv, "/validate", "Fail", 5)+"---\n"+
		webhookConfig("MutatingWebhookConfiguration", "labeler", "hooked", srv, "/mutate", "Fail", 5)+"---\n"+
		webhookConfig("ValidatingWebhookConfiguration", "slow-ignore", "slow-ignore", srv, "/slow", "Ignore", 1)+"---\n"+
		webhookConfig("ValidatingWebhookConfiguration", "slow-fail", "slow-fail", srv, "/slow", "Fail", 1)))

	prod := manifest(t, "prod.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: prod-cm
  namespace: hooked
  labels:
    env: prod
`)
	// A new webhook applies once the admission scope reaches the
	// gateway: a dry run (sideEffects None) shows when.
	var out, errOut string
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, errOut, err = cp.kubectlErr("create", "--dry-run=server", "-f", prod)
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := `admission webhook "owner.e2e.meridian.dev" denied the request: env=prod needs an owner label`
	if err == nil || !strings.Contains(errOut, want) {
		t.Fatalf("create of a prod ConfigMap without an owner: err %v\nstdout %s\nstderr %s\nwant %q", err, out, errOut, want)
	}
	_, errOut, err = cp.kubectlErr("create", "-f", prod)
	if err == nil || !strings.Contains(errOut, want) || !strings.Contains(errOut, "Warning: reviewed by the e2e webhook") {
		t.Fatalf("create: err %v, stderr %s", err, errOut)
	}
	if _, errOut, err := cp.kubectlErr("get", "configmap", "prod-cm", "-n", "hooked"); err == nil || !strings.Contains(errOut, "NotFound") {
		t.Fatalf("a refused ConfigMap was stored: %v %s", err, errOut)
	}
	// The status is the webhook's 403, as client-go sees it.
	raw, _ := cp.client().CoreV1().RESTClient().Post().AbsPath("/api/v1/namespaces/hooked/configmaps").
		Body([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"raw","labels":{"env":"prod"}}}`)).Do(t.Context()).Raw()
	var st metav1.Status
	if err := json.Unmarshal(raw, &st); err != nil || st.Code != http.StatusForbidden || st.Reason != metav1.StatusReasonForbidden || st.Message != want {
		t.Fatalf("status %s", raw)
	}

	_, errOut, err = cp.kubectlErr("create", "configmap", "plain", "-n", "hooked", "--from-literal=a=b")
	if err != nil || !strings.Contains(errOut, "Warning: reviewed by the e2e webhook") {
		t.Fatalf("create of an allowed ConfigMap: %v, stderr %s", err, errOut)
	}
	if got := cp.kubectl("get", "configmap", "plain", "-n", "hooked", "-o", "jsonpath={.metadata.labels.mutated-by}"); got != "webhook" {
		t.Fatalf("label mutated-by = %q, want webhook (the mutating webhook's patch)", got)
	}

	// The slow webhooks: Ignore admits after at most its timeout, Fail
	// refuses with the timeout.
	start := time.Now()
	cp.kubectl("create", "configmap", "ok", "-n", "slow-ignore", "--from-literal=a=b")
	if d := time.Since(start); d > 20*time.Second { // a bound that catches a hang
		t.Fatalf("a create behind a 1s Ignore webhook took %s", d)
	}
	_, errOut, err = cp.kubectlErr("create", "configmap", "no", "-n", "slow-fail", "--from-literal=a=b")
	if err == nil || !strings.Contains(errOut, `failed calling webhook "slow-fail.e2e.meridian.dev"`) || !strings.Contains(errOut, "context deadline exceeded") {
		t.Fatalf("create behind a 1s Fail webhook: err %v, stderr %s", err, errOut)
	}
}
