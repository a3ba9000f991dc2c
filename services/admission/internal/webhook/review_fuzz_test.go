package webhook

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// FuzzDecodeReview: whatever a webhook answers, decoding its
// AdmissionReview never panics, and a response it accepts has the
// request's uid (v1), carries a patch only for a mutating webhook, and a
// denial becomes a 4xx or 5xx Status with the webhook's name.
func FuzzDecodeReview(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}`), true, true)
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true,"patchType":"JSONPatch","patch":"W3sib3AiOiJhZGQiLCJwYXRoIjoiL2EiLCJ2YWx1ZSI6MX1d"}}`), true, true)
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":false,"status":{"code":200,"message":"no"}}}`), true, false)
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{"allowed":false,"status":{"reason":"Nope"}}}`), false, false)
	f.Add([]byte(`{"response":null}`), true, true)
	f.Add([]byte(`[]`), false, true)
	f.Fuzz(func(t *testing.T, data []byte, v1, mutating bool) {
		version := reviewV1beta1
		if v1 {
			version = reviewV1
		}
		v, err := DecodeReview(data, version, "u", mutating)
		if err != nil {
			return
		}
		if len(v.patch) > 0 && !mutating {
			t.Fatalf("a validating webhook's patch was accepted: %s", data)
		}
		if v1 {
			var r admissionv1.AdmissionReview
			if json.Unmarshal(data, &r) != nil || r.Response == nil || r.Response.UID != "u" {
				t.Fatalf("accepted a v1 review without the request's uid: %s", data)
			}
		}
		if !v.allowed {
			d := denial("hook", v.result)
			if d.Code < 400 || d.Message == "" {
				t.Fatalf("denial %+v from %s", d, data)
			}
		}
	})
}
