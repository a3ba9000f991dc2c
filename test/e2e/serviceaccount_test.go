package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// expectRefused runs kubectl with kubeconfig and expects it to fail with
// message, the server's error, at the end of its output.
func expectRefused(t *testing.T, kubeconfig, message string, args ...string) {
	t.Helper()
	_, errOut, err := kubectlWith(kubeconfig, args...)
	if out := strings.TrimSpace(errOut); err == nil || !strings.HasSuffix(out, message) {
		t.Errorf("kubectl %v: %v\n%s\nwant %s", args, err, errOut, message)
	}
}

// saTokenStatus is the status of a request with a bearer token.
func (cp *controlPlane) saTokenStatus(token, path string) int {
	cp.t.Helper()
	req, err := http.NewRequest(http.MethodGet, cp.url(path), nil)
	if err != nil {
		cp.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := cp.anonymousHTTP().Do(req)
	if err != nil {
		cp.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestKubectlServiceAccountToken drives service account tokens with the
// real kubectl: a token from `kubectl create token` is refused (403, as
// kube-apiserver words it) until a Role and RoleBinding let the account
// get and list config maps in one namespace, then allowed there only,
// and not to create; `kubectl auth whoami` shows the account; too short
// a --duration is refused; an expired token, and the token of a deleted
// (and of a re-created) account, are 401.
func TestKubectlServiceAccountToken(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.kubectl("create", "namespace", "team")
	cp.kubectl("create", "namespace", "other")
	cp.kubectl("-n", "team", "create", "configmap", "app", "--from-literal=k=v")
	cp.kubectl("-n", "other", "create", "configmap", "app", "--from-literal=k=v")
	cp.kubectl("-n", "team", "create", "serviceaccount", "app")
	token := strings.TrimSpace(cp.kubectl("-n", "team", "create", "token", "app"))
	sa := cp.tokenKubeconfig(token)
	const user = "system:serviceaccount:team:app"

	expectRefused(t, sa, `configmaps is forbidden: User "`+user+`" cannot list resource "configmaps" in API group "" in the namespace "team"`,
		"-n", "team", "get", "configmaps")

	cp.kubectl("-n", "team", "create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps")
	cp.kubectl("-n", "team", "create", "rolebinding", "app-reads", "--role=cm-reader", "--serviceaccount=team:app")
	deadline := time.Now().Add(10 * time.Second)
	for cp.saTokenStatus(token, "/api/v1/namespaces/team/configmaps") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the RoleBinding did not apply to the service account within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, errOut, err := kubectlWith(sa, "-n", "team", "get", "configmap", "app", "-o", "jsonpath={.data.k}"); err != nil || out != "v" {
		t.Errorf("the account gets team's config map: %v %s %s", err, out, errOut)
	}
	if out, errOut, err := kubectlWith(sa, "-n", "team", "get", "configmaps", "-o", "name"); err != nil || strings.Join(strings.Fields(out), " ") != "configmap/app configmap/kube-root-ca.crt" {
		t.Errorf("the account lists team's config maps: %v %s %s", err, out, errOut)
	}
	expectRefused(t, sa, `configmaps "app" is forbidden: User "`+user+`" cannot get resource "configmaps" in API group "" in the namespace "other"`,
		"-n", "other", "get", "configmap", "app")
	expectRefused(t, sa, `configmaps is forbidden: User "`+user+`" cannot create resource "configmaps" in API group "" in the namespace "team"`,
		"-n", "team", "create", "configmap", "mine", "--from-literal=a=b")

	// kubectl auth whoami shows the account, its groups and the token's id.
	out, errOut, err := kubectlWith(sa, "auth", "whoami", "-o", "json")
	if err != nil {
		t.Fatalf("auth whoami: %v %s", err, errOut)
	}
	var review authenticationv1.SelfSubjectReview
	if err := json.Unmarshal([]byte(out), &review); err != nil {
		t.Fatal(err)
	}
	ui := review.Status.UserInfo
	if ui.Username != user || strings.Join(ui.Groups, ",") != "system:serviceaccounts,system:serviceaccounts:team,system:authenticated" ||
		len(ui.Extra["authentication.kubernetes.io/credential-id"]) != 1 || !strings.HasPrefix(ui.Extra["authentication.kubernetes.io/credential-id"][0], "JTI=") {
		t.Errorf("whoami: %+v", ui)
	}

	// Lifetimes: under 10 minutes is refused; a token past its expiry
	// (signed here with the control plane's key, as it would have been an
	// hour ago) is 401.
	_, errOut, err = cp.kubectlErr("-n", "team", "create", "token", "app", "--duration=5m")
	if err == nil || !strings.Contains(errOut, `TokenRequest.authentication.k8s.io "app" is invalid: spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes`) {
		t.Errorf("--duration=5m: %v %s", err, errOut)
	}
	if out, errOut, err := cp.kubectlErr("-n", "team", "create", "token", "app", "--duration=15m"); err != nil || strings.Count(out, ".") != 2 {
		t.Errorf("--duration=15m: %v %s", err, errOut)
	}
	expired := cp.signSAToken(t, token, -time.Hour)
	expectRefused(t, cp.tokenKubeconfig(expired), "error: You must be logged in to the server (Unauthorized)", "-n", "team", "get", "configmaps")
	if valid := cp.signSAToken(t, token, time.Hour); cp.saTokenStatus(valid, "/api/v1/namespaces/team/configmaps") != http.StatusOK {
		t.Error("the same claims, unexpired, are refused: the expiry test proves nothing")
	}

	// A deleted account's token is refused within a second.
	cp.kubectl("-n", "team", "delete", "serviceaccount", "app")
	deleted := time.Now()
	for cp.saTokenStatus(token, "/api/v1/namespaces/team/configmaps") != http.StatusUnauthorized {
		if time.Since(deleted) > time.Second {
			t.Fatal("the deleted account's token was accepted a second after the delete")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the deleted account's token was refused %v after the delete", time.Since(deleted).Round(time.Millisecond))
	cp.kubectl("-n", "team", "create", "serviceaccount", "app")
	fresh := strings.TrimSpace(cp.kubectl("-n", "team", "create", "token", "app"))
	if got := cp.saTokenStatus(fresh, "/api/v1/namespaces/team/configmaps"); got != http.StatusOK {
		t.Errorf("the re-created account's new token: %d, want 200", got)
	}
	expectRefused(t, sa, "error: You must be logged in to the server (Unauthorized)", "-n", "team", "get", "configmaps")
}

// signSAToken signs, with the control plane's signing key, the claims of
// token with its times moved so that it expires at now+expiresIn.
func (cp *controlPlane) signSAToken(t *testing.T, token string, expiresIn time.Duration) string {
	t.Helper()
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := parsed.UnsafeClaimsWithoutVerification(&claims); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(expiresIn)
	claims["exp"], claims["iat"], claims["nbf"] = exp.Unix(), exp.Add(-2*time.Hour).Unix(), exp.Add(-2*time.Hour).Unix()
	data, err := os.ReadFile(filepath.Join(cp.dataDir, "pki", "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("pki/sa.key holds no PEM block")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: parsed.Headers[0].KeyID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fetchJSON GETs path with a bearer token and decodes the JSON answer
// into into; it returns the Content-Type.
func (cp *controlPlane) fetchJSON(t *testing.T, token, url string, into any) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := cp.anonymousHTTP().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, into); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
	return resp.Header.Get("Content-Type")
}

// TestServiceAccountIssuerDiscovery: another system verifies a service
// account token as an OIDC client would: it reads the issuer's discovery
// document and its JWKS (each service account may, by the bootstrap
// policy), and checks the token's signature, issuer and audience with
// go-jose. TokenReview authenticates tokens over REST for whoever may
// create tokenreviews, and is in discovery. A key rotation with `meridian
// pki rotate-sa-key` keeps old tokens valid and signs new ones with the
// new key.
func TestServiceAccountIssuerDiscovery(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.kubectl("create", "namespace", "team")
	cp.kubectl("-n", "team", "create", "serviceaccount", "app")
	token := strings.TrimSpace(cp.kubectl("-n", "team", "create", "token", "app"))
	issuer := "https://" + cp.addr

	var config struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	cp.fetchJSON(t, token, cp.url("/.well-known/openid-configuration"), &config)
	if config.Issuer != issuer || config.JWKSURI != issuer+"/openid/v1/jwks" || strings.Join(config.Algs, ",") != "ES256" {
		t.Fatalf("discovery document %+v", config)
	}
	var set jose.JSONWebKeySet
	if ct := cp.fetchJSON(t, token, config.JWKSURI, &set); ct != "application/jwk-set+json" {
		t.Errorf("JWKS Content-Type %q", ct)
	}
	verify := func(tok string) string {
		t.Helper()
		parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256, jose.RS256})
		if err != nil {
			t.Fatal(err)
		}
		kid := parsed.Headers[0].KeyID
		keys := set.Key(kid)
		if len(keys) != 1 {
			t.Fatalf("the JWKS has no key %q", kid)
		}
		var claims jwt.Claims
		if err := parsed.Claims(keys[0].Key, &claims); err != nil {
			t.Fatalf("the token does not verify with the JWKS: %v", err)
		}
		if err := claims.Validate(jwt.Expected{Issuer: issuer, AnyAudience: jwt.Audience{issuer}, Subject: "system:serviceaccount:team:app", Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
		return kid
	}
	oldKID := verify(token)

	// TokenReview: the admin may; the account may not (403).
	admin := cp.client()
	ctx := context.Background()
	tr, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Status.Authenticated || tr.Status.User.Username != "system:serviceaccount:team:app" || strings.Join(tr.Status.Audiences, ",") != issuer {
		t.Errorf("TokenReview of a valid token: %+v", tr.Status)
	}
	tr, err = admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{"vault"}}}, metav1.CreateOptions{})
	if err != nil || tr.Status.Authenticated || tr.Status.Error == "" || strings.Contains(tr.Status.Error, token) {
		t.Errorf("TokenReview for another audience: %v %+v", err, tr.Status)
	}
	tr, err = admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "e2e-token-carol"}}, metav1.CreateOptions{})
	if err != nil || !tr.Status.Authenticated || tr.Status.User.Username != "carol" {
		t.Errorf("TokenReview of a static token: %v %+v", err, tr.Status)
	}
	saClient := kubernetes.NewForConfigOrDie(cp.bearerConfig(token))
	_, err = saClient.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "system:serviceaccount:team:app" cannot create resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope`) {
		t.Errorf("TokenReview by the account: %v; want 403", err)
	}
	if out := cp.kubectl("api-resources", "--api-group=authentication.k8s.io", "--no-headers"); !strings.Contains(out, "tokenreviews") || !strings.Contains(out, "TokenReview") {
		t.Errorf("kubectl api-resources does not list tokenreviews:\n%s", out)
	}

	// Rotation: the old token still works, new tokens carry the new key.
	rotate := exec.Command(binary, "pki", "rotate-sa-key", "--dir", cp.dataDir)
	if out, err := rotate.CombinedOutput(); err != nil {
		t.Fatalf("meridian pki rotate-sa-key: %v\n%s", err, out)
	}
	var fresh string
	deadline := time.Now().Add(30 * time.Second)
	for {
		fresh = strings.TrimSpace(cp.kubectl("-n", "team", "create", "token", "app"))
		parsed, err := jwt.ParseSigned(fresh, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatal(err)
		}
		if parsed.Headers[0].KeyID != oldKID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("new tokens are still signed with the old key 30s after the rotation")
		}
		time.Sleep(200 * time.Millisecond)
	}
	cp.fetchJSON(t, token, config.JWKSURI, &set)
	if len(set.Keys) != 2 {
		t.Errorf("the JWKS after a rotation has %d keys, want 2", len(set.Keys))
	}
	verify(fresh)
	verify(token)
	for name, tok := range map[string]string{"old": token, "new": fresh} {
		if got := cp.saTokenStatus(tok, "/.well-known/openid-configuration"); got != http.StatusOK {
			t.Errorf("the %s token after the rotation: %d", name, got)
		}
	}
}

// bearerConfig is a client configuration that trusts the API CA and
// presents token, and nothing else.
func (cp *controlPlane) bearerConfig(token string) *rest.Config {
	return &rest.Config{Host: "https://" + cp.addr, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(cp.dataDir, "pki", "api-ca.crt")}}
}

// TestClientGoServiceAccountClusterRole: client-go running as a service
// account (rest.Config.BearerToken) may do exactly what the ClusterRole
// bound to it allows, across namespaces, and gets 403 for the rest.
func TestClientGoServiceAccountClusterRole(t *testing.T) {
	cp := start(t, "")
	admin := cp.client()
	ctx := context.Background()
	for _, ns := range []string{"a", "b", "ops"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"a", "b"} {
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().ServiceAccounts("ops").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "operator"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "operator"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "update"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "operator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "operator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "ops", Name: "operator"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := admin.CoreV1().ServiceAccounts("ops").CreateToken(ctx, "operator", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(tr.Status.ExpirationTimestamp.Time); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("the token expires in %v, want 1h", d)
	}
	sa := kubernetes.NewForConfigOrDie(cp.bearerConfig(tr.Status.Token))

	var list *corev1.ConfigMapList
	deadline := time.Now().Add(10 * time.Second)
	for {
		if list, err = sa.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || len(list.Items) < 2 {
		t.Fatalf("list config maps in every namespace: %v", err)
	}
	cm, err := sa.CoreV1().ConfigMaps("b").Get(ctx, "cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"by": "operator"}
	if _, err := sa.CoreV1().ConfigMaps("b").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update (granted): %v", err)
	}
	w, err := sa.CoreV1().ConfigMaps("a").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Errorf("watch (granted): %v", err)
	} else {
		w.Stop()
	}
	refused := map[string]error{}
	_, refused["create configmaps"] = sa.CoreV1().ConfigMaps("a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{})
	refused["delete configmaps"] = sa.CoreV1().ConfigMaps("a").Delete(ctx, "cm", metav1.DeleteOptions{})
	_, refused["list secrets"] = sa.CoreV1().Secrets("a").List(ctx, metav1.ListOptions{})
	_, refused["list namespaces"] = sa.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	_, refused["create token"] = sa.CoreV1().ServiceAccounts("ops").CreateToken(ctx, "operator", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want 403", what, err)
		}
	}
	if err := refused["create token"]; err != nil && !strings.Contains(err.Error(), `User "system:serviceaccount:ops:operator" cannot create resource "serviceaccounts/token" in API group "" in the namespace "ops"`) {
		t.Errorf("create token: %v", err)
	}
}
