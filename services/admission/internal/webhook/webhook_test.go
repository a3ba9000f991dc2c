package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/kube/rbac"
	"github.com/meridian-cp/meridian/lib/kube/rbac/rbactest"
	"github.com/meridian-cp/meridian/lib/kube/webhook/webhooktest"
	admitv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
	"github.com/meridian-cp/meridian/services/admission/internal/webhook"
)

// server answers AdmissionReviews with respond's response (its uid set).
func server(t *testing.T, respond func(r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) *webhooktest.Server {
	return webhooktest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		resp := respond(review.Request)
		if resp == nil {
			return
		}
		resp.UID = review.Request.UID
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(review)
	}))
}

func cmRequest(labels map[string]string, dryRun bool) *admitv1.AdmitRequest {
	obj, _ := json.Marshal(corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "team", Labels: labels}})
	return &admitv1.AdmitRequest{
		Uid: "uid-1", Operation: admitv1.Operation_OPERATION_CREATE,
		Kind:      &admitv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource:  &admitv1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Namespace: "team", Name: "cm", Object: obj, DryRun: dryRun,
		UserInfo: &admitv1.UserInfo{Username: "alice"},
	}
}

var cmRules = []admissionregistrationv1.RuleWithOperations{{
	Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
	Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
}}

func ptr[T any](v T) *T { return &v }

func validating(name string, srv *webhooktest.Server, mod func(*admissionregistrationv1.ValidatingWebhook)) *admissionregistrationv1.ValidatingWebhookConfiguration {
	w := admissionregistrationv1.ValidatingWebhook{
		Name: name, ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr(srv.URL + "/v"), CABundle: srv.CABundle},
		Rules: cmRules, SideEffects: ptr(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
		FailurePolicy: ptr(admissionregistrationv1.Fail),
	}
	if mod != nil {
		mod(&w)
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: []admissionregistrationv1.ValidatingWebhook{w}}
}

func admit(t *testing.T, s *webhook.Set, req *admitv1.AdmitRequest) policy.Result {
	t.Helper()
	res, err := policy.Evaluator{Set: s}.Admit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestValidatingDenial(t *testing.T) {
	srv := server(t, func(r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if strings.Contains(string(r.Object.Raw), `"env":"prod"`) {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: 403, Reason: metav1.StatusReasonForbidden, Message: "prod needs an owner"}, Warnings: []string{"checked"}}
		}
		return &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{"checked"}, AuditAnnotations: map[string]string{"k": "v"}}
	})
	s := webhook.New(webhook.Config{})
	s.PutValidating(validating("owner.example.com", srv, nil))
	sc, _ := s.Scope()
	if len(sc.Rules) != 1 || sc.Rules[0].Resources[0] != "configmaps" {
		t.Fatalf("scope %+v", sc)
	}

	res := admit(t, s, cmRequest(nil, false))
	if !res.Allowed || len(res.Warnings) != 1 || res.AuditAnnotations["owner.example.com/k"] != "v" {
		t.Fatalf("allowed request: %+v", res)
	}
	res = admit(t, s, cmRequest(map[string]string{"env": "prod"}, false))
	want := `admission webhook "owner.example.com" denied the request: prod needs an owner`
	if res.Allowed || res.Denial.Code != 403 || res.Denial.Reason != "Forbidden" || res.Denial.Message != want {
		t.Fatalf("denial %+v, want 403 %q", res.Denial, want)
	}
}

func TestSelectorsAndConditions(t *testing.T) {
	var calls atomic.Int32
	srv := server(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		calls.Add(1)
		return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "no"}}
	})
	s := webhook.New(webhook.Config{Namespaces: func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tier": "dev"}}}
	}})
	s.PutValidating(validating("a", srv, func(w *admissionregistrationv1.ValidatingWebhook) {
		w.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"checked": "yes"}}
	}))
	s.PutValidating(validating("b", srv, func(w *admissionregistrationv1.ValidatingWebhook) {
		w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}
	}))
	s.PutValidating(validating("c", srv, func(w *admissionregistrationv1.ValidatingWebhook) {
		w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "only-alice-x", Expression: `request.userInfo.username == "alice" && has(object.metadata.labels) && "x" in object.metadata.labels`}}
	}))
	if res := admit(t, s, cmRequest(map[string]string{"other": "1"}, false)); !res.Allowed || calls.Load() != 0 {
		t.Fatalf("no webhook matches: %+v, %d calls", res, calls.Load())
	}
	res := admit(t, s, cmRequest(map[string]string{"x": "1"}, false))
	if res.Allowed || calls.Load() != 1 || !strings.Contains(res.Denial.Message, `"c" denied the request: no`) || res.Denial.Code != 400 {
		t.Fatalf("match condition: %+v, %d calls", res.Denial, calls.Load())
	}
	res = admit(t, s, cmRequest(map[string]string{"checked": "yes"}, false))
	if res.Allowed || !strings.Contains(res.Denial.Message, `"a" denied`) {
		t.Fatalf("object selector: %+v", res.Denial)
	}
}

func TestMutatingPatchAndReinvocation(t *testing.T) {
	add := func(label string) *webhooktest.Server {
		return server(t, func(r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if strings.Contains(string(r.Object.Raw), `"`+label+`"`) {
				return &admissionv1.AdmissionResponse{Allowed: true}
			}
			pt := admissionv1.PatchTypeJSONPatch
			return &admissionv1.AdmissionResponse{Allowed: true, PatchType: &pt,
				Patch: []byte(`[{"op":"add","path":"/metadata/labels/` + label + `","value":"yes"}]`)}
		})
	}
	var firstCalls atomic.Int32
	first := server(t, func(r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		firstCalls.Add(1)
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	second := add("second")
	mwc := func(name string, srv *webhooktest.Server, reinvoke admissionregistrationv1.ReinvocationPolicyType) *admissionregistrationv1.MutatingWebhookConfiguration {
		return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: name, ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr(srv.URL), CABundle: srv.CABundle},
			Rules: cmRules, SideEffects: ptr(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1beta1", "v1"},
			ReinvocationPolicy: &reinvoke,
		}}}
	}
	s := webhook.New(webhook.Config{})
	s.PutMutating(mwc("1-first", first, admissionregistrationv1.IfNeededReinvocationPolicy))
	s.PutMutating(mwc("2-second", second, admissionregistrationv1.NeverReinvocationPolicy))
	res := admit(t, s, cmRequest(map[string]string{"a": "b"}, false))
	if !res.Allowed || !strings.Contains(string(res.Patch), `/metadata/labels/second`) {
		t.Fatalf("result %+v (patch %s)", res, res.Patch)
	}
	if n := firstCalls.Load(); n != 2 {
		t.Fatalf("the IfNeeded webhook was called %d times, want 2 (reinvoked after the second changed the object)", n)
	}
}

// A webhook that does not answer costs its timeout: under Ignore the
// request is admitted, under Fail refused with the timeout.
func TestTimeouts(t *testing.T) {
	release := make(chan struct{})
	slow := webhooktest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	// Registered after the server's Close, so it runs before it.
	t.Cleanup(func() { close(release) })
	for _, fp := range []admissionregistrationv1.FailurePolicyType{admissionregistrationv1.Ignore, admissionregistrationv1.Fail} {
		t.Run(string(fp), func(t *testing.T) {
			s := webhook.New(webhook.Config{})
			s.PutValidating(validating("slow", slow, func(w *admissionregistrationv1.ValidatingWebhook) {
				w.TimeoutSeconds = ptr(int32(1))
				w.FailurePolicy = ptr(fp)
			}))
			start := time.Now()
			res := admit(t, s, cmRequest(nil, false))
			if d := time.Since(start); d > 20*time.Second { // a bound that catches a hang
				t.Fatalf("took %s with a 1s timeout", d)
			}
			switch fp {
			case admissionregistrationv1.Ignore:
				if !res.Allowed || res.AuditAnnotations["failed-open.validating.webhook.admission.k8s.io/round_0_index_0"] != "slow" {
					t.Fatalf("Ignore: %+v", res)
				}
			default:
				if res.Allowed || res.Denial.Code != 500 || !strings.Contains(res.Denial.Message, `failed calling webhook "slow"`) ||
					!strings.Contains(res.Denial.Message, "context deadline exceeded") {
					t.Fatalf("Fail: %+v", res.Denial)
				}
			}
		})
	}
}

func TestDryRunSideEffects(t *testing.T) {
	srv := server(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	s := webhook.New(webhook.Config{})
	s.PutValidating(validating("effects", srv, func(w *admissionregistrationv1.ValidatingWebhook) {
		w.SideEffects = ptr(admissionregistrationv1.SideEffectClassSome)
	}))
	if res := admit(t, s, cmRequest(nil, false)); !res.Allowed {
		t.Fatalf("not a dry run: %+v", res.Denial)
	}
	res := admit(t, s, cmRequest(nil, true))
	if res.Allowed || res.Denial.Code != 400 || !strings.Contains(res.Denial.Message, "does not support dry run") {
		t.Fatalf("dry run: %+v", res.Denial)
	}
	// The configurations themselves are never sent to webhooks.
	s.Delete(false, "effects")
	if sc, _ := s.Scope(); len(sc.Rules) != 0 {
		t.Fatalf("scope after delete: %+v", sc)
	}
}

// A match condition's authorizer answers from the set's authorizer for
// the requesting user: the webhook is called only for users RBAC lets
// list Secrets in the request's namespace.
func TestConditionAuthorizer(t *testing.T) {
	var calls atomic.Int32
	srv := server(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		calls.Add(1)
		return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "no"}}
	})
	authz := rbac.NewStatic(
		rbactest.Role("team", "secret-reader", rbactest.Rule(rbactest.S("list"), rbactest.S(""), rbactest.S("secrets"))),
		rbactest.RoleBinding("team", "bob", "Role", "secret-reader", "User:bob"),
	)
	s := webhook.New(webhook.Config{Authorizer: authz})
	s.PutValidating(validating("readers", srv, func(w *admissionregistrationv1.ValidatingWebhook) {
		w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "secret-readers",
			Expression: `authorizer.group('').resource('secrets').namespace(request.namespace).check('list').allowed()`}}
	}))
	if res := admit(t, s, cmRequest(nil, false)); !res.Allowed || calls.Load() != 0 {
		t.Fatalf("alice (no grant): %+v, %d calls, want admitted without a call", res.Denial, calls.Load())
	}
	bob := cmRequest(nil, false)
	bob.UserInfo = &admitv1.UserInfo{Username: "bob"}
	if res := admit(t, s, bob); res.Allowed || calls.Load() != 1 {
		t.Fatalf("bob (granted): %+v, %d calls, want the webhook's denial", res.Denial, calls.Load())
	}
}
