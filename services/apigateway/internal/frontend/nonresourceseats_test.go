package frontend

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/polltest"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// rejectingPaths is a seatLedger that names a flow schema and level in
// every grant and rejects the non-resource requests of one path, as a
// Reject level does (RESOURCE_EXHAUSTED with RetryInfo and the ErrorInfo
// naming who classified it).
type rejectingPaths struct {
	*seatLedger
	reject string
}

func (l *rejectingPaths) Acquire(ctx context.Context, req *flowcontrolv1.AcquireRequest, opts ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	if d := req.GetDigest(); !d.GetIsResourceRequest() && d.GetPath() == l.reject {
		st, err := status.New(codes.ResourceExhausted, "rejected").WithDetails(
			&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)},
			&errdetails.ErrorInfo{Reason: "REJECTED", Metadata: map[string]string{"flow_schema_uid": "fs-strict", "priority_level_uid": "pl-strict"}})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	resp, err := l.seatLedger.Acquire(ctx, req, opts...)
	if resp != nil {
		resp.Grant.FlowSchemaUid, resp.Grant.PriorityLevelUid = "fs-"+req.GetDigest().GetPath(), "pl-any"
	}
	return resp, err
}

// TestNonResourceRequestsTakeSeats: /version, discovery, OpenAPI and
// health ask flow control with a non-resource digest (path and verb),
// answer with the X-Kubernetes-PF-* headers of their grant, and give the
// seat back; a request its level rejects is a 429 TooManyRequests Status
// with Retry-After and the headers of the schema that rejected it.
func TestNonResourceRequestsTakeSeats(t *testing.T) {
	e := newSeatsEnv(t, func(l *seatLedger) flowcontrolv1.FlowControlServiceClient {
		return &rejectingPaths{seatLedger: l, reject: "/version"}
	})
	for _, path := range []string{"/apis", "/api/v1", "/openapi/v2", "/readyz", "/livez/ping"} {
		resp := e.do(t.Context(), "GET", path, "")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") != "fs-"+path || resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID") != "pl-any" {
			t.Errorf("GET %s: %d %v, want 200 with the grant's UIDs", path, resp.StatusCode, resp.Header)
		}
		if d := e.ledger.last("get"); d.GetIsResourceRequest() || d.GetPath() != path {
			t.Errorf("GET %s asked for %v, want a non-resource digest of its path", path, d)
		}
	}
	polltest.Until(t, 10*time.Second, "every seat given back", func() bool {
		ids, released := e.ledger.grants("get")
		for _, id := range ids {
			if released[id] != 1 {
				return false
			}
		}
		return len(ids) == 5
	})

	resp := e.do(t.Context(), "GET", "/version", "")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || resp.StatusCode != http.StatusTooManyRequests || st.Reason != metav1.StatusReasonTooManyRequests ||
		resp.Header.Get("Retry-After") != "3" || resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") != "fs-strict" || resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID") != "pl-strict" {
		t.Errorf("GET /version rejected: %d %v %s, want 429 TooManyRequests, Retry-After 3, the rejecting schema's UIDs", resp.StatusCode, resp.Header, body)
	}
}
