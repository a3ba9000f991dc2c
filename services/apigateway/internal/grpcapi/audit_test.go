package grpcapi

import (
	"context"
	"strings"
	"testing"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit/audittest"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// serveAudited starts the front door with an auditor logging everything
// at RequestResponse to a file; events reads it.
func serveAudited(t *testing.T, svc apiv1.ResourceServiceServer) (addr string, events func() []auditv1.Event) {
	t.Helper()
	a, events := audittest.LogFile(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: RequestResponse\n")
	return serveConfig(t, Config{Authorizer: testPolicy(), Auditor: a, Resources: svc}), events
}

func stagesOf(evs []auditv1.Event, id string) (stages []string, last auditv1.Event) {
	for _, ev := range evs {
		if string(ev.AuditID) == id {
			stages = append(stages, string(ev.Stage))
			last = ev
		}
	}
	return stages, last
}

// TestAuditedCalls: gRPC calls are audited as REST requests are, and
// every answer carries its audit-id (in the header, or with the status of
// a refused call).
func TestAuditedCalls(t *testing.T) {
	addr, events := serveAudited(t, &recordingService{})
	c := client(t, addr)
	withToken := func(token string, md ...string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), append([]string{"authorization", "Bearer " + token}, md...)...)
	}

	var header metadata.MD
	ref := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default"}
	body := &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"v"}}`)}
	if _, err := c.Create(withToken("alice-token", "audit-id", "my-id"), &apiv1.CreateRequest{Ref: ref, Body: body}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if got := header.Get("audit-id"); len(got) != 1 || got[0] != "my-id" {
		t.Errorf("create's audit-id: %v", got)
	}
	stages, ev := stagesOf(events(), "my-id")
	if strings.Join(stages, ",") != "RequestReceived,ResponseComplete" || ev.Verb != "create" || ev.User.Username != "alice" ||
		ev.ObjectRef.Name != "cm" || ev.ObjectRef.Resource != "configmaps" || ev.ResponseStatus.Code != 201 ||
		!strings.Contains(string(ev.RequestObject.Raw), `"k":"v"`) || string(ev.ResponseObject.Raw) != "{}" ||
		ev.Annotations[audit.DecisionAnnotation] != "allow" || ev.RequestURI != apiv1.ResourceService_Create_FullMethodName ||
		!strings.HasPrefix(ev.Annotations[audit.ReasonAnnotation], `RBAC: allowed by RoleBinding "alice/default"`) {
		t.Errorf("create: stages %v, event %+v", stages, ev)
	}

	// Refused: no credentials (401), and alice outside her namespace (403).
	var trailer metadata.MD
	_, err := c.Get(context.Background(), &apiv1.GetRequest{Ref: ref}, grpc.Header(&header), grpc.Trailer(&trailer))
	if err == nil || len(trailer.Get("audit-id")) != 1 {
		t.Fatalf("anonymous get: %v, trailer %v", err, trailer)
	}
	if _, ev := stagesOf(events(), trailer.Get("audit-id")[0]); ev.ResponseStatus == nil || ev.ResponseStatus.Code != 401 || ev.User.Username != "" {
		t.Errorf("401: %+v", ev)
	}
	anon, err := c.Watch(context.Background(), &apiv1.WatchRequest{Ref: ref})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.Recv(); err == nil || len(anon.Trailer().Get("audit-id")) != 1 {
		t.Fatalf("anonymous watch: %v, trailer %v", err, anon.Trailer())
	}
	if _, ev := stagesOf(events(), anon.Trailer().Get("audit-id")[0]); ev.ResponseStatus == nil || ev.ResponseStatus.Code != 401 || ev.Verb != "watch" {
		t.Errorf("anonymous watch's 401: %+v", ev)
	}
	header = nil
	other := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "kube-system", Name: "x"}
	if _, err := c.Get(withToken("alice-token"), &apiv1.GetRequest{Ref: other}, grpc.Header(&header)); err == nil || len(header.Get("audit-id")) != 1 {
		t.Fatalf("forbidden get: %v, header %v", err, header)
	}
	if _, ev := stagesOf(events(), header.Get("audit-id")[0]); ev.ResponseStatus.Code != 403 || ev.Annotations[audit.DecisionAnnotation] != "forbid" ||
		!strings.Contains(ev.ResponseStatus.Message, `User "alice" cannot get resource "configmaps"`) {
		t.Errorf("403: %+v", ev)
	}

	// An impersonated list, its messages the response object.
	header = nil
	stream, err := c.List(withToken("admin-token", "impersonate-user", "alice"), &apiv1.ListRequest{Ref: ref})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	header, _ = stream.Header()
	if len(header.Get("audit-id")) != 1 {
		t.Fatalf("list: header %v", header)
	}
	if _, ev := stagesOf(events(), header.Get("audit-id")[0]); ev.User.Username != "admin" || ev.ImpersonatedUser.Username != "alice" ||
		ev.Verb != "list" || ev.ResponseStatus.Code != 200 {
		t.Errorf("list: %+v", ev)
	}

	// A watch has ResponseStarted once admitted.
	ctx, cancel := context.WithCancel(withToken("alice-token"))
	w, err := c.Watch(ctx, &apiv1.WatchRequest{Ref: ref})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	header, _ = w.Header()
	cancel()
	if stages, _ := stagesOf(events(), header.Get("audit-id")[0]); len(stages) < 2 || stages[1] != "ResponseStarted" {
		t.Errorf("watch stages: %v", stages)
	}
}
