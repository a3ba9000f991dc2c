package server_test

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/admissiontest"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

// noSecretsInDefault denies creating secrets in namespace "default" and
// warns about every configmap.
type noSecretsInDefault struct{}

func (noSecretsInDefault) Evaluate(_ context.Context, req *admissionv1.AdmitRequest) (policy.Decision, error) {
	var d policy.Decision
	if req.GetResource().GetResource() == "configmaps" {
		d.Warnings = append(d.Warnings, "configmaps are deprecated here")
		d.AuditAnnotations = map[string]string{"test/checked": "configmap"}
	}
	if req.GetResource().GetResource() == "secrets" && req.GetNamespace() == "default" {
		d.Warnings = append(d.Warnings, "use a namespace")
		d.Denial = &policy.Denial{Code: 403, Reason: "Forbidden", Message: "secrets may not be created in default"}
	}
	return d, nil
}

// warnAll warns about every request.
type warnAll struct{}

func (warnAll) Evaluate(context.Context, *admissionv1.AdmitRequest) (policy.Decision, error) {
	return policy.Decision{Warnings: []string{"audited"}}, nil
}

type testSet struct{}

func (testSet) Matching(*admissionv1.AdmitRequest) []policy.Policy {
	return []policy.Policy{warnAll{}, noSecretsInDefault{}, warnAll{}}
}

func (testSet) Scope() (policy.Scope, <-chan struct{}) { return policy.Scope{Everything: true}, nil }

// start serves the policies of set through a server.Server on loopback
// (admissiontest's service, metrics to reg) and returns a client of it
// and the service.
func start(t *testing.T, set policy.Set, reg prometheus.Registerer) (admissionv1.AdmissionServiceClient, *admissiontest.Service) {
	t.Helper()
	svc := admissiontest.Start(t, "127.0.0.1:0", set, admissiontest.Options{Registerer: reg})
	conn, err := grpcclient.Dial(svc.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return admissionv1.NewAdmissionServiceClient(conn), svc
}

func req(resource, ns string) *admissionv1.AdmitRequest {
	return &admissionv1.AdmitRequest{
		Uid:       "0000-1",
		Operation: admissionv1.Operation_OPERATION_CREATE,
		Resource:  &admissionv1.GroupVersionResource{Version: "v1", Resource: resource},
		Kind:      &admissionv1.GroupVersionKind{Version: "v1", Kind: "Secret"},
		Namespace: ns,
		Name:      "x",
		UserInfo:  &admissionv1.UserInfo{Username: "alice"},
		Object:    []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}`),
	}
}

func TestDenialAndWarningsPropagate(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, _ := start(t, testSet{}, reg)
	ctx := t.Context()

	resp, err := c.Admit(ctx, req("secrets", "default"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAllowed() {
		t.Fatal("denied request allowed")
	}
	st := resp.GetStatus()
	if st.GetCode() != 403 || st.GetReason() != "Forbidden" || st.GetMessage() != "secrets may not be created in default" {
		t.Fatalf("status %v", st)
	}
	// The third policy runs after the denial, so its warning is absent.
	if want := []string{"audited", "use a namespace"}; !slices.Equal(resp.GetWarnings(), want) {
		t.Fatalf("warnings %q, want %q", resp.GetWarnings(), want)
	}

	resp, err = c.Admit(ctx, req("configmaps", "default"))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || resp.GetStatus() != nil {
		t.Fatalf("allowed request: %v", resp)
	}
	if want := []string{"audited", "configmaps are deprecated here", "audited"}; !slices.Equal(resp.GetWarnings(), want) {
		t.Fatalf("warnings %q, want %q", resp.GetWarnings(), want)
	}
	if resp.GetAuditAnnotations()["test/checked"] != "configmap" {
		t.Fatalf("audit annotations %v", resp.GetAuditAnnotations())
	}

	if n := testutil.CollectAndCount(reg, "meridian_admission_duration_seconds"); n != 2 {
		t.Fatalf("%d histogram series, want 2 (allowed and denied)", n)
	}
}

func TestEmptySetAdmits(t *testing.T) {
	c, _ := start(t, policy.Empty{}, nil)
	for _, op := range []admissionv1.Operation{admissionv1.Operation_OPERATION_CREATE, admissionv1.Operation_OPERATION_DELETE} {
		r := req("secrets", "default")
		r.Operation = op
		resp, err := c.Admit(t.Context(), r)
		if err != nil || !resp.GetAllowed() || len(resp.GetWarnings()) != 0 || len(resp.GetPatch()) != 0 {
			t.Fatalf("%v: %v %v", op, resp, err)
		}
	}
}

func TestInvalid(t *testing.T) {
	c, _ := start(t, policy.Empty{}, nil)
	noOp := req("secrets", "default")
	noOp.Operation = admissionv1.Operation_OPERATION_UNSPECIFIED
	badOp := req("secrets", "default")
	badOp.Operation = 42
	noResource := req("secrets", "default")
	noResource.Resource = nil
	emptyResource := req("", "default")
	for name, r := range map[string]*admissionv1.AdmitRequest{
		"no operation": noOp, "unknown operation": badOp, "no resource": noResource,
		"empty resource": emptyResource, "empty request": {},
	} {
		if _, err := c.Admit(t.Context(), r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

func TestWatchScope(t *testing.T) {
	p := admissiontest.NewPolicies(admissiontest.Scope{})
	c, s := start(t, p, nil)

	stream, err := c.WatchScope(t.Context(), &admissionv1.WatchScopeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recv := func() *admissionv1.Scope {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetScope()
	}
	if sc := recv(); sc.GetEverything() || len(sc.GetRules()) != 0 {
		t.Fatalf("initial scope %v, want empty", sc)
	}
	p.SetScope(admissiontest.Scope{Rules: []admissiontest.Rule{{
		Operations: []admissionv1.Operation{admissionv1.Operation_OPERATION_CREATE},
		APIGroups:  []string{"apps"},
		Resources:  []string{"deployments", "deployments/scale"},
	}}})
	want := &admissionv1.Scope{Rules: []*admissionv1.ScopeRule{{
		Operations: []admissionv1.Operation{admissionv1.Operation_OPERATION_CREATE},
		ApiGroups:  []string{"apps"},
		Resources:  []string{"deployments", "deployments/scale"},
	}}}
	if sc := recv(); !proto.Equal(sc, want) {
		t.Fatalf("scope %v, want %v", sc, want)
	}
	p.SetScope(admissiontest.Scope{Everything: true, Rules: []admissiontest.Rule{{APIGroups: []string{"apps"}}}})
	if sc := recv(); !sc.GetEverything() || len(sc.GetRules()) != 0 {
		t.Fatalf("scope %v, want everything", sc)
	}

	// Close ends the stream with UNAVAILABLE, so that GracefulStop does
	// not wait for it, and new streams end at once.
	s.CloseStreams()
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("after Close: %v, want Unavailable", err)
	}
	again, err := c.WatchScope(t.Context(), &admissionv1.WatchScopeRequest{})
	if err == nil {
		_, err = again.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("new stream after Close: %v, want Unavailable", err)
	}
	s.CloseStreams()
}
