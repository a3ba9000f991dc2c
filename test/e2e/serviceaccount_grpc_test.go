package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/pki"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestServiceAccountTokenWithForeignCertificate: a service account token
// authenticates over REST and the gRPC API even on a connection that
// presents a client certificate the API refuses (another CA's): the
// bearer token is tried first and alone. Over gRPC, the account may do
// what its grant allows (PermissionDenied otherwise), and the token of a
// deleted account is Unauthenticated.
func TestServiceAccountTokenWithForeignCertificate(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.kubectl("create", "namespace", "team")
	cp.kubectl("-n", "team", "create", "configmap", "app", "--from-literal=k=v")
	cp.kubectl("-n", "team", "create", "serviceaccount", "app")
	cp.kubectl("-n", "team", "create", "role", "cm-reader", "--verb=get", "--resource=configmaps")
	cp.kubectl("-n", "team", "create", "rolebinding", "app-reads", "--role=cm-reader", "--serviceaccount=team:app")
	token := strings.TrimSpace(cp.kubectl("-n", "team", "create", "token", "app"))

	other, err := pki.NewCA("not-the-api-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := other.Issue(pki.CertSpec{CommonName: "mallory", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pki.LoadPool(filepath.Join(cp.dataDir, "pki", "api-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}

	// foreignTLS presents the foreign certificate whatever CAs the server
	// names as acceptable (Go's client would otherwise send none, and the
	// request would be anonymous).
	foreignTLS := func() *tls.Config {
		c := pki.ClientTLS(nil, pool, "127.0.0.1")
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil }
		return c
	}

	// REST: the foreign certificate alone is 401; with the token, 200.
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: foreignTLS()}}
	restStatus := func(withToken bool) int {
		req, _ := http.NewRequest(http.MethodGet, cp.url("/api/v1/namespaces/team/configmaps/app"), nil)
		if withToken {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := restStatus(false); got != http.StatusUnauthorized {
		t.Errorf("the foreign certificate alone: %d, want 401", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for restStatus(true) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the token on a connection with a foreign certificate is not 200 (10s after the grant)")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// gRPC, on a connection with the foreign certificate.
	conn, err := grpc.NewClient(cp.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(foreignTLS())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := apiv1.NewResourceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tokCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	ref := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "team", Name: "app"}
	if _, err := c.Get(tokCtx, &apiv1.GetRequest{Ref: ref}); err != nil {
		t.Errorf("gRPC get with the token: %v", err)
	}
	body := &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"new"}}`)}
	_, err = c.Create(tokCtx, &apiv1.CreateRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "team"}, Body: body})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("gRPC create with the token: %v, want PermissionDenied", err)
	}
	if _, err := c.Get(ctx, &apiv1.GetRequest{Ref: ref}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC get with the foreign certificate alone: %v, want Unauthenticated", err)
	}
	cp.kubectl("-n", "team", "delete", "serviceaccount", "app")
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, err := c.Get(tokCtx, &apiv1.GetRequest{Ref: ref})
		if status.Code(err) == codes.Unauthenticated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gRPC get with a deleted account's token: %v, want Unauthenticated", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
