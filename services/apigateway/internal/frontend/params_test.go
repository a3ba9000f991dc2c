package frontend

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestParamsOfTheWrongType: an integer query parameter that is not an
// integer is kube-apiserver's 400 for every verb whose options have it,
// whether or not the ResourceService reads it for that verb; a well-typed
// one passes, and parameters a verb's options lack are ignored.
func TestParamsOfTheWrongType(t *testing.T) {
	svc := &recordingService{}
	h := newTestHandler(t, svc, nil)
	for _, tc := range []struct {
		method, path string
		message      string
	}{
		{"GET", "/api/v1/namespaces/demo/configmaps?timeoutSeconds=abc", `strconv.ParseInt: parsing "abc": invalid syntax`},
		{"GET", "/api/v1/namespaces/demo/configmaps?limit=1.5", `strconv.ParseInt: parsing "1.5": invalid syntax`},
		{"GET", "/api/v1/namespaces/demo/configmaps?watch=1&limit=x", `strconv.ParseInt: parsing "x": invalid syntax`},
		{"GET", "/api/v1/namespaces/demo/configmaps?watch=1&timeoutSeconds=abc", `strconv.ParseInt: parsing "abc": invalid syntax`},
		{"GET", "/api/v1/watch/namespaces/demo/configmaps?timeoutSeconds=abc", `strconv.ParseInt: parsing "abc": invalid syntax`},
		{"DELETE", "/api/v1/namespaces/demo/configmaps/app?gracePeriodSeconds=soon", `strconv.ParseInt: parsing "soon": invalid syntax`},
		{"DELETE", "/api/v1/namespaces/demo/configmaps?timeoutSeconds=abc", `strconv.ParseInt: parsing "abc": invalid syntax`},
		{"DELETE", "/api/v1/namespaces/demo/configmaps?gracePeriodSeconds=soon", `strconv.ParseInt: parsing "soon": invalid syntax`},
	} {
		resp, body := do(t, h, tc.method, tc.path, "good-token", nil)
		st := decodeStatus(t, body)
		if resp.StatusCode != 400 || st.Reason != metav1.StatusReasonBadRequest || st.Message != tc.message {
			t.Errorf("%s %s: %d %s %q, want 400 BadRequest %q", tc.method, tc.path, resp.StatusCode, st.Reason, st.Message, tc.message)
		}
	}
	// A get's options have no timeoutSeconds: kube-apiserver ignores it.
	if resp, body := do(t, h, "GET", "/api/v1/namespaces/demo/configmaps/app?timeoutSeconds=abc", "good-token", nil); resp.StatusCode != 200 {
		t.Errorf("get with timeoutSeconds=abc: %d %s", resp.StatusCode, body)
	}
	// Well-typed values reach the service (whose List this one lacks).
	if resp, body := do(t, h, "GET", "/api/v1/namespaces/demo/configmaps?timeoutSeconds=5&limit=2", "good-token", nil); resp.StatusCode == 400 {
		t.Errorf("list with timeoutSeconds=5: %d %s", resp.StatusCode, body)
	}
}
