package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/oidctest"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// credentiallessKubeconfig writes a kubeconfig for cp that trusts its CA
// and holds no credentials, and returns its path. Its user has a user
// name and no password: kubectl asks for credentials on its terminal when
// a user has none at all, and sends this one's as basic auth, which
// meridian, as kube-apiserver since 1.19, does not take for a credential:
// the request is anonymous.
func credentiallessKubeconfig(t *testing.T, cp *controlPlane) string {
	t.Helper()
	ca := filepath.Join(cp.dataDir, "pki", "api-ca.crt")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: meridian
  cluster: {server: %q, certificate-authority: %q}
users:
- name: nobody
  user: {username: nobody}
contexts:
- name: nobody
  context: {cluster: meridian, user: nobody}
current-context: nobody
`, cp.url(""), ca)
	return manifest(t, "nobody.kubeconfig", kc)
}

// kubectlAs runs kubectl with kubeconfig (and args) and returns its
// combined output and exit error.
func kubectlAs(kubeconfig string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// kubectlWithToken runs kubectl against cp with a bearer token and no
// kubeconfig and returns its combined output and exit error.
func kubectlWithToken(cp *controlPlane, token string, args ...string) (string, error) {
	return kubectlAs(os.DevNull, append([]string{"--server", cp.url(""), "--certificate-authority", filepath.Join(cp.dataDir, "pki", "api-ca.crt"), "--token", token}, args...)...)
}

// anonymousGRPCGet gets namespace default over cp's gRPC API with no
// credentials.
func anonymousGRPCGet(t *testing.T, cp *controlPlane) error {
	t.Helper()
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(filepath.Join(cp.dataDir, "pki", "api-ca.crt"))
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("API CA: %v", err)
	}
	conn, err := grpc.NewClient(cp.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = apiv1.NewResourceServiceClient(conn).Get(ctx, &apiv1.GetRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "namespaces", Name: "default"}})
	return err
}

// TestAnonymousRequests, with kubectl and no credentials: by default
// (--anonymous-auth=true, RBAC) /version is served and listing
// namespaces is Forbidden for system:anonymous, over REST and gRPC; with
// --anonymous-auth=false both are Unauthorized (gRPC Unauthenticated);
// under AlwaysAllow anonymous callers read /version and nothing else.
func TestAnonymousRequests(t *testing.T) {
	requireKubectl(t)
	for _, tc := range []struct {
		name               string
		flags              []string
		version, ns, rawNS string // "" succeeds, else in kubectl's output
		grpc               codes.Code
	}{
		{"default", nil, "", "Error from server (Forbidden)",
			`namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" in API group "" at the cluster scope`, codes.PermissionDenied},
		{"anonymous-auth=false", []string{"--anonymous-auth=false"}, "Unauthorized", "You must be logged in to the server", "Unauthorized", codes.Unauthenticated},
		{"AlwaysAllow", []string{"--authorization-mode=AlwaysAllow"}, "", "You must be logged in to the server", "Unauthorized", codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := start(t, "", tc.flags...)
			kc := credentiallessKubeconfig(t, cp)
			out, err := kubectlAs(kc, "get", "--raw", "/version")
			if tc.version == "" {
				var v struct{ GitVersion string }
				if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.GitVersion == "" {
					t.Errorf("kubectl get --raw /version: %v %s", err, out)
				}
			} else if err == nil || !strings.Contains(out, tc.version) {
				t.Errorf("kubectl get --raw /version: %v %s, want %q", err, out, tc.version)
			}
			if out, err := kubectlAs(kc, "get", "ns"); err == nil || !strings.Contains(out, tc.ns) {
				t.Errorf("kubectl get ns: %v %s, want %q", err, out, tc.ns)
			}
			if out, err := kubectlAs(kc, "get", "--raw", "/api/v1/namespaces"); err == nil || !strings.Contains(out, tc.rawNS) {
				t.Errorf("kubectl get --raw /api/v1/namespaces: %v %s, want %q", err, out, tc.rawNS)
			}
			// An invalid token is Unauthorized whatever the policy.
			if out, err := kubectlWithToken(cp, "not-a-token", "get", "--raw", "/version"); err == nil || !strings.Contains(out, "Unauthorized") {
				t.Errorf("kubectl with an invalid token: %v %s", err, out)
			}
			if err := anonymousGRPCGet(t, cp); status.Code(err) != tc.grpc {
				t.Errorf("anonymous gRPC get: %v, want %v", err, tc.grpc)
			}
		})
	}
}

// TestOIDC: kubectl with an ID token of an OpenID issuer (a real one,
// serving discovery and keys over HTTPS) given with --token, against
// meridian started with the --oidc-* flags while the issuer is down.
// Until it is up the token is Unauthorized; then the user is the
// prefixed claim, forbidden until a RoleBinding on its prefixed group
// grants it, allowed there only; a token failing a required claim, for
// another client, or expired is Unauthorized; after the issuer rotates
// its key, a token of the new key works.
func TestOIDC(t *testing.T) {
	requireKubectl(t)
	is := oidctest.Start(t)
	is.SetDown(true)
	cp := start(t, "", "--oidc-issuer-url", is.URL, "--oidc-client-id", "meridian", "--oidc-ca-file", is.CAFile,
		"--oidc-username-claim", "email", "--oidc-username-prefix", "oidc:", "--oidc-groups-claim", "groups", "--oidc-groups-prefix", "oidc:",
		"--oidc-required-claim", "tenant=blue")
	claims := func(kv ...any) map[string]any {
		now := time.Now()
		c := map[string]any{"iss": is.URL, "aud": "meridian", "sub": "1234", "email": "jane@example.com", "email_verified": true,
			"groups": []string{"devs"}, "tenant": "blue", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		return c
	}
	token := is.Sign(claims())
	if out, err := kubectlWithToken(cp, token, "auth", "whoami"); err == nil || !strings.Contains(out, "Unauthorized") {
		t.Errorf("issuer down: %v %s, want Unauthorized", err, out)
	}
	is.SetDown(false)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := kubectlWithToken(cp, token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
		if err == nil {
			if out != `oidc:jane@example.com ["oidc:devs","system:authenticated"]` {
				t.Fatalf("whoami: %s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the issuer's token was not accepted within 60s of the issuer coming up: %v %s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}

	cp.kubectl("create", "namespace", "team")
	cp.kubectl("create", "namespace", "other")
	if out, err := kubectlWithToken(cp, token, "-n", "team", "get", "configmaps"); err == nil ||
		!strings.Contains(out, `User "oidc:jane@example.com" cannot list resource "configmaps" in API group "" in the namespace "team"`) {
		t.Errorf("before the grant: %v %s", err, out)
	}
	cp.kubectl("-n", "team", "create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps")
	cp.kubectl("-n", "team", "create", "rolebinding", "devs", "--role=cm-reader", "--group=oidc:devs")
	deadline = time.Now().Add(30 * time.Second)
	for {
		out, err := kubectlWithToken(cp, token, "-n", "team", "get", "configmaps", "kube-root-ca.crt", "-o", "name")
		if err == nil && strings.TrimSpace(out) == "configmap/kube-root-ca.crt" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group's grant did not apply in 30s: %v %s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out, err := kubectlWithToken(cp, token, "-n", "other", "get", "configmaps"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("in another namespace: %v %s", err, out)
	}
	if out, err := kubectlWithToken(cp, token, "-n", "team", "create", "configmap", "x"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("create: %v %s", err, out)
	}
	for name, bad := range map[string]string{
		"wrong tenant":   is.Sign(claims("tenant", "red")),
		"another client": is.Sign(claims("aud", "someone-else")),
		"expired":        is.Sign(claims("iat", time.Now().Add(-2*time.Hour).Unix(), "exp", time.Now().Add(-time.Hour).Unix())),
		"unverified":     is.Sign(claims("email_verified", false)),
	} {
		if out, err := kubectlWithToken(cp, bad, "-n", "team", "get", "configmaps"); err == nil || !strings.Contains(out, "Unauthorized") {
			t.Errorf("%s: %v %s, want Unauthorized", name, err, out)
		}
	}
	// Static tokens still work beside OIDC.
	if out, err := kubectlWithToken(cp, "e2e-token-alice", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != "alice" {
		t.Errorf("static token: %v %s", err, out)
	}
	// A new key is fetched when a token names it, at most every 10s.
	is.Rotate(false)
	rotated := is.Sign(claims())
	deadline = time.Now().Add(60 * time.Second)
	for {
		out, err := kubectlWithToken(cp, rotated, "-n", "team", "get", "configmaps", "kube-root-ca.crt", "-o", "name")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a token of the rotated key was not accepted within 60s: %v %s", err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestNamespaceDefaults: a namespace created with kubectl gets the
// "default" ServiceAccount and the kube-root-ca.crt ConfigMap, whose CA
// verifies the API's serving certificate; deleted, both come back.
func TestNamespaceDefaults(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.kubectl("create", "namespace", "x")
	waitFor := func(what string, args ...string) string {
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, _, err := cp.kubectlErr(args...)
			if err == nil {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not there after 30s: %v", what, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("sa default", "-n", "x", "get", "sa", "default")
	ca := waitFor("cm kube-root-ca.crt", "-n", "x", "get", "cm", "kube-root-ca.crt", "-o", `jsonpath={.data.ca\.crt}`)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ca)) {
		t.Fatalf("kube-root-ca.crt holds no certificate: %q", ca)
	}
	conn, err := tls.Dial("tcp", cp.addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("the published CA does not verify the API's serving certificate: %v", err)
	}
	conn.Close()
	if desc := cp.kubectl("-n", "x", "get", "cm", "kube-root-ca.crt", "-o", `jsonpath={.metadata.annotations.kubernetes\.io/description}`); !strings.HasPrefix(desc, "Contains a CA bundle") {
		t.Errorf("description annotation: %q", desc)
	}
	cp.kubectl("-n", "x", "delete", "sa", "default")
	cp.kubectl("-n", "x", "delete", "cm", "kube-root-ca.crt")
	waitFor("sa default again", "-n", "x", "get", "sa", "default")
	waitFor("cm kube-root-ca.crt again", "-n", "x", "get", "cm", "kube-root-ca.crt")
	for _, ns := range []string{"default", "kube-system", "kube-public"} {
		waitFor("sa default in "+ns, "-n", ns, "get", "sa", "default")
	}
}
