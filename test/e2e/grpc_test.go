package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/pki"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
)

// TestGRPCAPI drives meridian.api.v1.ResourceService directly: the same
// objects, the same errors (a Kubernetes Status in the gRPC status details),
// the same authentication as REST.
func TestGRPCAPI(t *testing.T) {
	cp := start(t, "")
	dir := filepath.Join(cp.dataDir, "pki")
	pool, err := pki.LoadPool(filepath.Join(dir, "api-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := tls.LoadX509KeyPair(filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	dial := func(cert *tls.Certificate) apiv1.ResourceServiceClient {
		conn, err := grpc.NewClient(cp.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(cert, pool, "127.0.0.1"))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return apiv1.NewResourceServiceClient(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dial(&admin)
	ref := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default"}

	w, err := c.Watch(ctx, &apiv1.WatchRequest{Ref: ref, Accept: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	body := &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"via-grpc"},"data":{"k":"v"}}`)}
	created, err := c.Create(ctx, &apiv1.CreateRequest{Ref: ref, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(created.GetData(), &cm); err != nil || cm.Data["k"] != "v" || cm.ResourceVersion == "" || created.GetContentType() != "application/json" {
		t.Fatalf("created: %v %s", err, created.GetData())
	}
	// The watch sees the create (after its empty first message, and the
	// initial state: default's kube-root-ca.crt).
	var seen string
	for !strings.Contains(seen, `"name":"via-grpc"`) {
		msg, err := w.Recv()
		if err != nil {
			t.Fatalf("watch: %v (seen %q)", err, seen)
		}
		seen += string(msg.GetData())
	}
	if !strings.Contains(seen, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"via-grpc"`) {
		t.Errorf("watch frames: %s", seen)
	}

	getRef := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "via-grpc"}
	got, err := c.Get(ctx, &apiv1.GetRequest{Ref: getRef, Accept: "application/yaml"})
	if err != nil || got.GetContentType() != "application/yaml" || !strings.Contains(string(got.GetData()), "k: v") {
		t.Fatalf("get as YAML: %v %q", err, got.GetData())
	}
	// A second create is AlreadyExists, with the Kubernetes Status attached.
	_, err = c.Create(ctx, &apiv1.CreateRequest{Ref: ref, Body: body})
	st := status.Convert(err)
	if st.Code() != codes.AlreadyExists || !hasStatus(st, 409, "AlreadyExists") {
		t.Errorf("second create: %v", err)
	}

	// An Accept that cannot be served fails with 406 before anything is
	// written.
	notAcceptable := &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"never"}}`)}
	if _, err := c.Create(ctx, &apiv1.CreateRequest{Ref: ref, Body: notAcceptable, Accept: "text/html"}); !hasStatus(status.Convert(err), 406, "NotAcceptable") {
		t.Errorf("create with Accept text/html: %v, want 406", err)
	}
	neverRef := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "never"}
	if _, err := c.Get(ctx, &apiv1.GetRequest{Ref: neverRef}); status.Code(err) != codes.NotFound {
		t.Errorf("the refused create stored its object: %v", err)
	}

	// A bearer token works (alice may read config maps in default);
	// without credentials the caller is system:anonymous, whom RBAC
	// refuses.
	cp.grant("default", "alice-reads", "alice", "get", "configmaps")
	anon := dial(nil)
	tokCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer e2e-token-alice")
	if _, err := anon.Get(tokCtx, &apiv1.GetRequest{Ref: getRef}); err != nil {
		t.Errorf("get with a token: %v", err)
	}
	_, err = anon.Get(ctx, &apiv1.GetRequest{Ref: getRef})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || !hasStatus(st, 403, "Forbidden") || !strings.Contains(st.Message(), `User "system:anonymous" cannot get resource`) {
		t.Errorf("get without credentials: %v", err)
	}
	// A request message may be as large as a REST body (3 MiB), for every
	// caller: an anonymous one is authorized once its message (which names
	// the resource) is read, and a larger one is refused unread.
	big := &httpbody.HttpBody{ContentType: "application/json", Data: make([]byte, 4<<20)}
	if _, err := c.Create(ctx, &apiv1.CreateRequest{Ref: ref, Body: big}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("admin's 4 MiB create: %v, want ResourceExhausted", err)
	}
	if _, err = anon.Create(ctx, &apiv1.CreateRequest{Ref: ref, Body: big}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("anonymous 4 MiB create: %v, want ResourceExhausted", err)
	}
	// Impersonation is refused to a caller outside system:masters.
	asBob := metadata.AppendToOutgoingContext(tokCtx, "impersonate-user", "bob")
	_, err = anon.Get(asBob, &apiv1.GetRequest{Ref: getRef})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || !hasStatus(st, 403, "Forbidden") {
		t.Errorf("alice impersonating bob: %v, want PermissionDenied", err)
	}

	// Health is open to anyone.
	conn, err := grpc.NewClient(cp.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(nil, pool, "127.0.0.1"))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v %v", resp, err)
	}
}

// hasStatus reports whether st carries the Kubernetes Status code and
// reason as its apiv1.Status detail.
func hasStatus(st *status.Status, code int32, reason string) bool {
	s, ok := apistatus.Detail(st)
	return ok && s.GetCode() == code && s.GetReason() == reason
}
