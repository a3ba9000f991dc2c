package resources

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// annotatingAdmission admits (or denies) every write with audit
// annotations, as a policy with auditAnnotations does; with deny, it
// denies config maps.
type annotatingAdmission struct {
	admissionv1.AdmissionServiceClient
	deny bool
}

func (a annotatingAdmission) Admit(_ context.Context, req *admissionv1.AdmitRequest, _ ...grpc.CallOption) (*admissionv1.AdmitResponse, error) {
	deny := a.deny && req.GetResource().GetResource() == "configmaps"
	resp := &admissionv1.AdmitResponse{Allowed: !deny,
		AuditAnnotations: map[string]string{"check-names.example.com/name": req.GetName()}}
	if deny {
		resp.Status = &admissionv1.DenialStatus{Code: 403, Reason: "Forbidden", Message: "no"}
	}
	return resp, nil
}

// TestAdmissionAuditAnnotations: the admission service's audit
// annotations go on the request's audit event, admitted or denied.
func TestAdmissionAuditAnnotations(t *testing.T) {
	dir := t.TempDir()
	pf := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pf, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit.log")
	a, err := audit.New(audit.Options{PolicyFile: pf, Log: audit.LogOptions{Path: logPath}}, nil, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, deny := range []bool{false, true} {
		e := newEnv(t, Config{Admission: annotatingAdmission{deny: deny}})
		e.namespace("default")
		attrs := audit.Attributes{User: identity.User{Name: "alice"}, Verb: "create", ResourceRequest: true, APIVersion: "v1", Resource: "configmaps", Namespace: "default"}
		ev := a.Begin(&attrs, audit.Meta{AuditID: "create-" + map[bool]string{false: "admitted", true: "denied"}[deny], Received: time.Now()})
		ctx := audit.WithRequest(identity.WithUser(t.Context(), identity.User{Name: "alice"}), ev)
		_, _, err := call(ctx, func(ctx context.Context) (*httpbody.HttpBody, error) {
			return e.s.Create(ctx, &apiv1.CreateRequest{Ref: configMap("default", ""), Body: jsonBody(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"}}`)})
		})
		if (err != nil) != deny {
			t.Fatalf("deny=%v: %v", deny, err)
		}
		ev.Complete(200)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev auditv1.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Stage != auditv1.StageResponseComplete {
			continue
		}
		seen++
		if ev.Annotations["check-names.example.com/name"] != "cm" {
			t.Errorf("%s: annotations %v", ev.AuditID, ev.Annotations)
		}
	}
	if seen != 2 {
		t.Errorf("%d completed events, want 2", seen)
	}
}
