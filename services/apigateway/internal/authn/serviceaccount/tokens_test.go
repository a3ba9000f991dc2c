package serviceaccount

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

const testIssuer = "https://meridian.test:6443"

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// fixture is Tokens over a real store, with the Index following it.
type fixture struct {
	t        testing.TB
	store    *storage.Store
	codec    *codec.Codec
	reg      *registry.Registry
	clock    *clock
	tokens   *Tokens
	key, pub string
}

func newFixture(t testing.TB, mutate func(*Config)) *fixture {
	t.Helper()
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := &fixture{t: t, store: storagetest.Start(t), codec: c, reg: registry.New(registry.Standard()...),
		clock: &clock{now: time.Now()}, key: filepath.Join(dir, "sa.key"), pub: filepath.Join(dir, "sa.pub")}
	if _, err := pki.LoadOrCreateSigningKey(f.key, f.pub); err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex(f.store, c, f.reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ix.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := ix.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Issuer: testIssuer, SigningKeyFile: f.key, KeyFiles: []string{f.pub}, Objects: ix,
		Store: f.store, Codec: c, Registry: f.reg, Now: f.clock.Now, ReloadInterval: time.Second}
	if mutate != nil {
		mutate(&cfg)
	}
	if f.tokens, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// put stores obj (a ServiceAccount or Secret) with a new UID.
func (f *fixture) put(obj runtime.Object) types.UID {
	f.t.Helper()
	acc := obj.(metav1.Object)
	uid := types.UID(strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", "-") + "-" + acc.GetName())
	acc.SetUID(uid)
	resource := "serviceaccounts"
	if _, ok := obj.(*corev1.Secret); ok {
		resource = "secrets"
	}
	res, _ := f.reg.Lookup(corev1.SchemeGroupVersion.WithResource(resource))
	data, err := f.codec.EncodeStorage(obj)
	if err != nil {
		f.t.Fatal(err)
	}
	key := res.Key(acc.GetNamespace(), acc.GetName())
	ctx := context.Background()
	if kv, _, err := f.store.Get(ctx, key, storage.ReadOptions{}); err == nil {
		if _, err := f.store.Update(ctx, key, data, kv.ModRevision, 0); err != nil {
			f.t.Fatal(err)
		}
	} else if _, err := f.store.Create(ctx, key, data, storage.Parent{}, 0); err != nil {
		f.t.Fatal(err)
	}
	return uid
}

func (f *fixture) remove(resource, ns, name string) {
	f.t.Helper()
	res, _ := f.reg.Lookup(corev1.SchemeGroupVersion.WithResource(resource))
	kv, _, err := f.store.Get(context.Background(), res.Key(ns, name), storage.ReadOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.store.Delete(context.Background(), res.Key(ns, name), kv.ModRevision); err != nil {
		f.t.Fatal(err)
	}
}

func serviceAccount(ns, name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// account stores a ServiceAccount and waits until the index has it.
func (f *fixture) account(ns, name string) types.UID {
	f.t.Helper()
	uid := f.put(serviceAccount(ns, name))
	polltest.Until(f.t, 10*time.Second, "the index has the service account", func() bool {
		got, ok := f.tokens.cfg.Objects.UID(kindServiceAccount, ns, name)
		return ok && got == uid
	})
	return uid
}

func (f *fixture) request(ns, name string, spec authenticationv1.TokenRequestSpec) (*authenticationv1.TokenRequest, error) {
	req := &authenticationv1.TokenRequest{Spec: spec}
	return req, f.tokens.Request(context.Background(), ns, name, req)
}

func (f *fixture) mustToken(ns, name string, spec authenticationv1.TokenRequestSpec) string {
	f.t.Helper()
	req, err := f.request(ns, name, spec)
	if err != nil {
		f.t.Fatal(err)
	}
	return req.Status.Token
}

// segment decodes a JWT's header (0) or payload (1) as JSON.
func segment(t *testing.T, token string, i int) map[string]any {
	t.Helper()
	data, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[i])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// TestTokenRequestClaims: a token has kube-apiserver's claims, exactly,
// its header names the signing key, and the request is defaulted: 1h,
// the API's audiences.
func TestTokenRequestClaims(t *testing.T) {
	f := newFixture(t, nil)
	uid := f.account("demo", "app")
	req, err := f.request("demo", "app", authenticationv1.TokenRequestSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if *req.Spec.ExpirationSeconds != 3600 || !slices.Equal(req.Spec.Audiences, []string{testIssuer}) {
		t.Errorf("spec %+v: want 3600s and the issuer as audience", req.Spec)
	}
	now := f.clock.Now().Unix()
	claims := segment(t, req.Status.Token, 1)
	jti, _ := claims["jti"].(string)
	want := map[string]any{
		"iss": testIssuer, "sub": "system:serviceaccount:demo:app", "aud": testIssuer,
		"iat": float64(now), "nbf": float64(now), "exp": float64(now + 3600), "jti": jti,
		"kubernetes.io": map[string]any{"namespace": "demo", "serviceaccount": map[string]any{"name": "app", "uid": string(uid)}},
	}
	if jti == "" || !reflect.DeepEqual(claims, want) {
		t.Errorf("claims\n%v\nwant\n%v", claims, want)
	}
	if got := req.Status.ExpirationTimestamp.Unix(); got != now+3600 {
		t.Errorf("expirationTimestamp %d, want %d", got, now+3600)
	}
	header := segment(t, req.Status.Token, 0)
	pubs, err := LoadPublicKeys(f.pub)
	if err != nil {
		t.Fatal(err)
	}
	kid, _ := KeyID(pubs[0])
	if header["alg"] != "ES256" || header["kid"] != kid || header["typ"] != "JWT" {
		t.Errorf("header %v, want ES256, kid %s, JWT", header, kid)
	}
}

// TestAuthenticateToken: a valid token is the service account's user, in
// its groups, with its JTI as credential id; audiences must match.
func TestAuthenticateToken(t *testing.T) {
	f := newFixture(t, nil)
	uid := f.account("demo", "app")
	token := f.mustToken("demo", "app", authenticationv1.TokenRequestSpec{})
	u, aud, ok, err := f.tokens.AuthenticateToken(token, nil)
	if err != nil || !ok {
		t.Fatalf("AuthenticateToken: %v, %v", ok, err)
	}
	jti := segment(t, token, 1)["jti"].(string)
	if u.Name != "system:serviceaccount:demo:app" || u.UID != string(uid) ||
		!slices.Equal(u.Groups, []string{"system:serviceaccounts", "system:serviceaccounts:demo", "system:authenticated"}) ||
		!reflect.DeepEqual(u.Extra, map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=" + jti}}) {
		t.Errorf("user %+v", u)
	}
	if !slices.Equal(aud, []string{testIssuer}) {
		t.Errorf("audiences %v, want the issuer", aud)
	}

	// A token for another audience is not the API's, but a review for
	// that audience accepts it.
	other := f.mustToken("demo", "app", authenticationv1.TokenRequestSpec{Audiences: []string{"vault", "db"}})
	if _, _, ok, err := f.tokens.AuthenticateToken(other, nil); ok || !errors.Is(err, errAudience) {
		t.Errorf("token for vault,db against the API: %v, %v; want %v", ok, err, errAudience)
	}
	if _, aud, ok, err := f.tokens.AuthenticateToken(other, []string{"db", "x"}); !ok || err != nil || !slices.Equal(aud, []string{"db"}) {
		t.Errorf("token for vault,db against db,x: %v, %v, %v; want ok, [db]", aud, ok, err)
	}

	// Not this issuer's: left to other authenticators.
	for _, tok := range []string{"static-token", "a.b.c", signForeign(t, "https://other.example")} {
		if _, _, ok, err := f.tokens.AuthenticateToken(tok, nil); ok || err != nil {
			t.Errorf("token %.20q: %v, %v; want not recognized", tok, ok, err)
		}
	}
	// This issuer's name, another key: a forgery.
	if _, _, ok, err := f.tokens.AuthenticateToken(signForeign(t, testIssuer), nil); ok || !errors.Is(err, errSignature) {
		t.Errorf("forged token: %v, %v; want %v", ok, err, errSignature)
	}
}

// signForeign signs service account claims for demo/app with a key of
// its own, as issuer.
func signForeign(t *testing.T, issuer string) string {
	dir := t.TempDir()
	if _, err := pki.LoadOrCreateSigningKey(filepath.Join(dir, "k"), filepath.Join(dir, "p")); err != nil {
		t.Fatal(err)
	}
	priv, err := LoadPrivateKey(filepath.Join(dir, "k"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: priv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(s).Claims(jwt.Claims{Issuer: issuer, Subject: "system:serviceaccount:demo:app", Audience: jwt.Audience{testIssuer},
		Expiry: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now), ID: "x"}).
		Claims(privateClaims{Kubernetes: kubernetesClaims{Namespace: "demo", ServiceAccount: ref{Name: "app", UID: "u"}}}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestExpiration: the bounds of a TokenRequest's expiration, and tokens
// past theirs refused.
func TestExpiration(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxExpiration = 24 * time.Hour })
	f.account("demo", "app")

	_, err := f.request("demo", "app", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(599))})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes") {
		t.Errorf("599s: %v; want 422, less than 10 minutes", err)
	}
	req, err := f.request("demo", "app", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(48 * 3600))})
	if err != nil || *req.Spec.ExpirationSeconds != 24*3600 {
		t.Errorf("48h with a 24h maximum: %v, %v; want cut to 24h", err, req.Spec.ExpirationSeconds)
	}

	token := f.mustToken("demo", "app", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))})
	f.clock.Add(10*time.Minute + 30*time.Second) // within the minute of leeway
	if _, _, ok, err := f.tokens.AuthenticateToken(token, nil); !ok || err != nil {
		t.Errorf("token 30s past exp (leeway): %v, %v; want ok", ok, err)
	}
	f.clock.Add(time.Minute)
	if _, _, ok, err := f.tokens.AuthenticateToken(token, nil); ok || !errors.Is(err, ErrExpired) {
		t.Errorf("expired token: %v, %v; want %v", ok, err, ErrExpired)
	}
	if _, err := f.request("demo", "nobody", authenticationv1.TokenRequestSpec{}); !apierrors.IsNotFound(err) || err.Error() != `serviceaccounts "nobody" not found` {
		t.Errorf("token of a missing account: %v; want 404", err)
	}
}

// TestDeletedServiceAccount: the token of a deleted service account, and
// of one deleted and made again under the same name, is refused.
func TestDeletedServiceAccount(t *testing.T) {
	f := newFixture(t, nil)
	f.account("demo", "app")
	token := f.mustToken("demo", "app", authenticationv1.TokenRequestSpec{})
	f.remove("serviceaccounts", "demo", "app")
	polltest.Until(t, 10*time.Second, "the deleted account's token is refused", func() bool {
		_, _, ok, err := f.tokens.AuthenticateToken(token, nil)
		return !ok && errors.Is(err, errNoAccount)
	})
	f.account("demo", "app")
	if _, _, ok, err := f.tokens.AuthenticateToken(token, nil); ok || !errors.Is(err, errNoAccount) {
		t.Errorf("token of the re-created account: %v, %v; want %v", ok, err, errNoAccount)
	}
}

// TestBoundSecret: a token bound to a Secret names it, lives only as long
// as it, and binding checks the UID the request names.
func TestBoundSecret(t *testing.T) {
	f := newFixture(t, nil)
	f.account("demo", "app")
	uid := f.put(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "s"}})
	polltest.Until(t, 10*time.Second, "the index has the secret", func() bool { _, ok := f.tokens.cfg.Objects.UID(kindSecret, "demo", "s"); return ok })

	ref := &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "s", UID: "wrong"}
	if _, err := f.request("demo", "app", authenticationv1.TokenRequestSpec{BoundObjectRef: ref}); !apierrors.IsConflict(err) {
		t.Errorf("wrong UID: %v; want 409", err)
	}
	ref.UID = ""
	req, err := f.request("demo", "app", authenticationv1.TokenRequestSpec{BoundObjectRef: ref})
	if err != nil || req.Spec.BoundObjectRef.UID != uid {
		t.Fatalf("bound to the secret: %v (%v)", err, req.Spec.BoundObjectRef)
	}
	k := segment(t, req.Status.Token, 1)["kubernetes.io"].(map[string]any)
	if want := map[string]any{"name": "s", "uid": string(uid)}; !reflect.DeepEqual(k["secret"], want) {
		t.Errorf("secret claim %v, want %v", k["secret"], want)
	}
	if _, _, ok, err := f.tokens.AuthenticateToken(req.Status.Token, nil); !ok || err != nil {
		t.Fatalf("bound token: %v, %v", ok, err)
	}
	f.remove("secrets", "demo", "s")
	polltest.Until(t, 10*time.Second, "the token of the deleted secret is refused", func() bool {
		_, _, ok, err := f.tokens.AuthenticateToken(req.Status.Token, nil)
		return !ok && errors.Is(err, errBoundDeleted)
	})
	if _, err := f.request("demo", "app", authenticationv1.TokenRequestSpec{BoundObjectRef: ref}); !apierrors.IsNotFound(err) {
		t.Errorf("bound to a deleted secret: %v; want 404", err)
	}
	ref.Kind = "ConfigMap"
	if _, err := f.request("demo", "app", authenticationv1.TokenRequestSpec{BoundObjectRef: ref}); !apierrors.IsBadRequest(err) {
		t.Errorf("bound to a ConfigMap: %v; want 400", err)
	}
}

// TestRotation: after the signing key is rotated, new tokens are signed
// with the new key, tokens of the old one verify while its public key is
// in a key file, and are refused once it is removed.
func TestRotation(t *testing.T) {
	f := newFixture(t, nil)
	f.account("demo", "app")
	old := f.mustToken("demo", "app", authenticationv1.TokenRequestSpec{})
	oldKID := segment(t, old, 0)["kid"]

	if err := pki.RotateSigningKey(f.key, f.pub); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(2 * time.Second) // past the reload interval
	fresh := f.mustToken("demo", "app", authenticationv1.TokenRequestSpec{})
	if kid := segment(t, fresh, 0)["kid"]; kid == oldKID {
		t.Fatalf("a token after the rotation is signed with the old key %v", kid)
	}
	for name, tok := range map[string]string{"old": old, "new": fresh} {
		if _, _, ok, err := f.tokens.AuthenticateToken(tok, nil); !ok || err != nil {
			t.Errorf("%s token after the rotation: %v, %v", name, ok, err)
		}
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(f.tokens.JWKS(), &set); err != nil || len(set.Keys) != 2 {
		t.Fatalf("JWKS after a rotation: %v, %d keys; want 2", err, len(set.Keys))
	}

	// Drop the old public key: its tokens are refused.
	pubs, err := LoadPublicKeys(f.pub)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(f.pub)
	first := strings.SplitAfter(string(data), "-----END PUBLIC KEY-----\n")[0]
	tmp := f.pub + ".tmp"
	if err := os.WriteFile(tmp, []byte(first), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f.pub); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(2 * time.Second)
	if _, _, ok, err := f.tokens.AuthenticateToken(old, nil); ok || !errors.Is(err, errSignature) {
		t.Errorf("old token once its key is dropped (%d keys before): %v, %v; want %v", len(pubs), ok, err, errSignature)
	}
	if _, _, ok, err := f.tokens.AuthenticateToken(fresh, nil); !ok || err != nil {
		t.Errorf("new token once the old key is dropped: %v, %v", ok, err)
	}
}

// TestDiscovery: the discovery document and the JWKS let another system
// verify a token, as an OIDC client would.
func TestDiscovery(t *testing.T) {
	f := newFixture(t, nil)
	f.account("demo", "app")
	if !f.tokens.DiscoveryServed() {
		t.Fatal("an https issuer's discovery is not served")
	}
	doc, err := f.tokens.OpenIDConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(doc, &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"issuer": testIssuer, "jwks_uri": testIssuer + "/openid/v1/jwks",
		"response_types_supported": []any{"id_token"}, "subject_types_supported": []any{"public"},
		"id_token_signing_alg_values_supported": []any{"ES256"}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("discovery %v\nwant %v", cfg, want)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(f.tokens.JWKS(), &set); err != nil {
		t.Fatal(err)
	}
	token := f.mustToken("demo", "app", authenticationv1.TokenRequestSpec{})
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	keys := set.Key(parsed.Headers[0].KeyID)
	if len(keys) != 1 || keys[0].Use != "sig" || keys[0].Algorithm != "ES256" {
		t.Fatalf("JWKS %s has no key for the token's kid", f.tokens.JWKS())
	}
	var claims jwt.Claims
	if err := parsed.Claims(keys[0].Key, &claims); err != nil {
		t.Fatal(err)
	}
	if err := claims.Validate(jwt.Expected{Issuer: testIssuer, AnyAudience: jwt.Audience{testIssuer}, Time: time.Now()}); err != nil {
		t.Error(err)
	}

	g := newFixture(t, func(c *Config) { c.Issuer = "kubernetes/serviceaccount" })
	if g.tokens.DiscoveryServed() {
		t.Error("discovery served for an issuer that is not an https URL")
	}
}
