package frontend

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusObject fills the apiVersion/kind of a Status.
func statusObject(s metav1.Status) *metav1.Status {
	s.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if s.Status == "" {
		s.Status = metav1.StatusFailure
	}
	return &s
}

// writeStatus writes a Kubernetes Status as the response, with its code,
// and Retry-After when the status carries one.
func writeStatus(w http.ResponseWriter, s metav1.Status) {
	obj := statusObject(s)
	data, err := json.Marshal(obj)
	if err != nil {
		http.Error(w, "internal error encoding a Status", http.StatusInternalServerError)
		return
	}
	if s.Details != nil && s.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(s.Details.RetryAfterSeconds)))
	}
	w.Header().Set("Content-Type", negotiation.JSON)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	code := int(s.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	w.WriteHeader(code)
	_, _ = w.Write(append(data, '\n'))
}

// writeJSON writes a successful JSON document.
func writeJSON(w http.ResponseWriter, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error encoding a response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", negotiation.JSON)
	_, _ = w.Write(data)
}
