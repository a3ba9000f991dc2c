package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/kube/webhook/webhooktest"
	"github.com/meridian-cp/meridian/lib/polltest"
)

// admissionMetrics are kube-apiserver's admission metrics with their
// labels (Kubernetes metrics reference), which the all-in-one's /metrics
// exports once a policy and a webhook have been consulted.
var admissionMetrics = map[string][]string{
	"apiserver_admission_step_admission_duration_seconds":          {"operation", "rejected", "type"},
	"apiserver_admission_webhook_admission_duration_seconds":       {"name", "operation", "rejected", "type"},
	"apiserver_admission_webhook_rejection_count":                  {"error_type", "name", "operation", "rejection_code", "type"},
	"apiserver_validating_admission_policy_check_total":            {"enforcement_action", "error_type", "policy", "policy_binding"},
	"apiserver_validating_admission_policy_check_duration_seconds": {"enforcement_action", "error_type", "policy", "policy_binding"},
	"apiserver_mutating_admission_policy_check_total":              {"error_type", "policy", "policy_binding"},
	"apiserver_mutating_admission_policy_check_duration_seconds":   {"error_type", "policy", "policy_binding"},
}

// A ValidatingAdmissionPolicy that denies, a validating webhook that
// answers (and denies once) and two MutatingAdmissionPolicies, one that
// adds a label and one whose mutation fails (failurePolicy Ignore), move
// kube-apiserver's admission series on the all-in-one's /metrics, under
// their names and labels: the policy's check counted as allow and as deny
// for its binding, each mutation counted and timed per policy and binding
// with its error type, the webhook's calls timed by name, its rejection
// counted with its code, the validate step timed rejected and not.
func TestAdmissionMetrics(t *testing.T) {
	hook := webhooktest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		var obj corev1.ConfigMap
		_ = json.Unmarshal(review.Request.Object.Raw, &obj)
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: obj.Labels["hook"] != "deny"}
		if !resp.Allowed {
			resp.Result = &metav1.Status{Code: http.StatusForbidden, Message: "the hook says no"}
		}
		review.Request, review.Response = nil, resp
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
	e := newEnv(t)
	ctx := t.Context()
	ar := e.client.AdmissionregistrationV1()
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	url := hook.URL + "/validate"
	if _, err := ar.ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "metrics.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: hook.CABundle},
			Rules: rules, FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	denyBadKey(t, e, "no-bad")
	mutateConfigMaps(t, e)
	cms := e.client.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "good"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hooked", Labels: map[string]string{"hook": "deny"}}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("create the webhook denies: %v, want Forbidden", err)
	}

	families := scrapeMetrics(ctx, t, e)
	for name, want := range admissionMetrics {
		mf := families[name]
		if len(mf.GetMetric()) == 0 {
			t.Errorf("%s: not exported", name)
			continue
		}
		for _, m := range mf.GetMetric() {
			if got := labelNames(m); !slices.Equal(got, want) {
				t.Errorf("%s: labels %v, want %v", name, got, want)
				break
			}
		}
	}
	for _, c := range []struct {
		metric string
		labels map[string]string
	}{
		{"apiserver_validating_admission_policy_check_total", map[string]string{"policy": "no-bad", "policy_binding": "no-bad-binding", "enforcement_action": "deny", "error_type": "no_error"}},
		{"apiserver_validating_admission_policy_check_total", map[string]string{"policy": "no-bad", "policy_binding": "no-bad-binding", "enforcement_action": "allow", "error_type": "no_error"}},
		{"apiserver_validating_admission_policy_check_duration_seconds", map[string]string{"policy": "no-bad", "enforcement_action": "deny"}},
		{"apiserver_mutating_admission_policy_check_total", map[string]string{"policy": "add-mark", "policy_binding": "add-mark-binding", "error_type": "no_error"}},
		{"apiserver_mutating_admission_policy_check_duration_seconds", map[string]string{"policy": "add-mark", "policy_binding": "add-mark-binding", "error_type": "no_error"}},
		{"apiserver_mutating_admission_policy_check_total", map[string]string{"policy": "broken-patch", "policy_binding": "broken-patch-binding", "error_type": "invalid_error"}},
		{"apiserver_admission_step_admission_duration_seconds", map[string]string{"operation": "CREATE", "rejected": "false", "type": "admit"}},
		{"apiserver_admission_webhook_admission_duration_seconds", map[string]string{"name": "metrics.example.com", "operation": "CREATE", "rejected": "false", "type": "validate"}},
		{"apiserver_admission_webhook_admission_duration_seconds", map[string]string{"name": "metrics.example.com", "operation": "CREATE", "rejected": "true", "type": "validate"}},
		{"apiserver_admission_webhook_rejection_count", map[string]string{"name": "metrics.example.com", "operation": "CREATE", "error_type": "no_error", "rejection_code": "403", "type": "validate"}},
		{"apiserver_admission_step_admission_duration_seconds", map[string]string{"operation": "CREATE", "rejected": "true", "type": "validate"}},
		{"apiserver_admission_step_admission_duration_seconds", map[string]string{"operation": "CREATE", "rejected": "false", "type": "validate"}},
	} {
		if n := seriesCount(families[c.metric], c.labels); n < 1 {
			t.Errorf("%s%v: count %v, want at least 1", c.metric, c.labels, n)
		}
	}
}

// seriesCount sums the counts (counters' values, histograms' sample
// counts) of mf's series carrying every label of want.
func seriesCount(mf *dto.MetricFamily, want map[string]string) float64 {
	var n float64
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && got[k] == v
		}
		if match {
			n += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return n
}

// denyBadKey creates the ValidatingAdmissionPolicy name, which denies
// ConfigMaps with a data key "bad", bound as name+"-binding" with
// validationActions Deny, and waits until the gateway calls admission
// for ConfigMap creates: until such a create is denied.
func denyBadKey(t *testing.T, e *env, name string) {
	t.Helper()
	ctx := t.Context()
	ar := e.client.AdmissionregistrationV1()
	fail := admissionregistrationv1.Fail
	if _, err := ar.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: `!has(object.data) || !('bad' in object.data)`, Message: "no bad key"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ar.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-binding"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := e.client.CoreV1().ConfigMaps("default")
	// The policy denies once its scope has reached the gateway.
	polltest.Until(t, 30*time.Second, "the policy to deny", func() bool {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-"}, Data: map[string]string{"bad": "1"}}, metav1.CreateOptions{})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
	})
}

// mutateConfigMaps creates two MutatingAdmissionPolicies on ConfigMap
// creates, each bound as name+"-binding": add-mark labels the object
// mark=yes; broken-patch removes a data key no object has, which fails,
// and is ignored (failurePolicy Ignore). It waits until a create comes
// back labelled.
func mutateConfigMaps(t *testing.T, e *env) {
	t.Helper()
	ctx := t.Context()
	ar := e.client.AdmissionregistrationV1()
	ignore := admissionregistrationv1.Ignore
	match := &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}}}
	for name, m := range map[string]admissionregistrationv1.Mutation{
		"add-mark": {PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
			Expression: `Object{metadata: Object.metadata{labels: {'mark': 'yes'}}}`}},
		"broken-patch": {PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{
			Expression: `[JSONPatch{op: 'remove', path: '/data/no-such-key'}]`}},
	} {
		if _, err := ar.MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
				FailurePolicy: &ignore, MatchConstraints: match, Mutations: []admissionregistrationv1.Mutation{m},
				ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := ar.MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-binding"},
			Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cms := e.client.CoreV1().ConfigMaps("default")
	polltest.Until(t, 30*time.Second, "the mutating policy to label a create", func() bool {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "mutated-"}}, metav1.CreateOptions{})
		return err == nil && cm.Labels["mark"] == "yes"
	})
}
