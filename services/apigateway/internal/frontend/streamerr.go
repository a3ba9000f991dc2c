package frontend

import (
	"encoding/json"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// streamErrorWriter gives errors of streamed responses (list, watch) their
// Kubernetes HTTP code. When a server-streaming call fails before its first
// message, grpc-gateway picks the HTTP status from the gRPC code alone
// (runtime.HTTPStatusFromCode), which cannot say 410, 422 or 504; the body
// it writes, through rawMarshaler, is the Kubernetes Status with the right
// code. This writer holds back an error status until that body arrives and
// writes the Status's own code (and Retry-After) instead.
type streamErrorWriter struct {
	http.ResponseWriter
	pending int
}

func (s *streamErrorWriter) WriteHeader(code int) {
	if code >= 400 && s.pending == 0 {
		s.pending = code
		return
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *streamErrorWriter) Write(p []byte) (int, error) {
	if s.pending != 0 {
		code := s.pending
		s.pending = 0
		var st metav1.Status
		if json.Unmarshal(p, &st) == nil && st.Kind == "Status" && st.Code >= 400 {
			code = int(st.Code)
			if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
				s.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
			}
		}
		s.ResponseWriter.WriteHeader(code)
	}
	return s.ResponseWriter.Write(p)
}

// Flush sends buffered data.
func (s *streamErrorWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *streamErrorWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
