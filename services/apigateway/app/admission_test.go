package app_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/admissiontest"
	"github.com/meridian-cp/meridian/services/apigateway/app"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// gateway is a real gateway in front of a real single-member store, with
// the admission service the test brings; it talks HTTPS with a bearer
// token.
type gateway struct {
	t      *testing.T
	url    string
	client *http.Client
	reg    *prometheus.Registry
}

func startGateway(t *testing.T, admissionAddr string) *gateway {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	store := storetest.Start(t, storeapp.Config{ID: "store-0"})

	ca := pkitest.NewCA(t, "test")
	cert := pkitest.IssueTLS(t, ca, pkitest.LoopbackServer("apiserver"))
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(`secret,alice,1001,"team"`+"\n"+`root-secret,admin,1000,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gw, err := app.New(t.Context(), app.Config{
		StoreAddress: store.Addr, AdmissionAddress: admissionAddr,
		ServingTLS: pki.ServerTLS(cert, nil, tls.NoClientCert), TokenAuthFile: tokens,
		Registerer: reg, Gatherer: reg, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{
		t: t, url: "https://" + daemontest.Serve(t, gw).Addr, reg: reg,
		client: &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(nil, ca.Pool(), "127.0.0.1")}},
	}
	// alice may write the config maps and secrets of "default", all the
	// test's writes: a 403 is admission's.
	g.post("root-secret", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
		`{"metadata":{"name":"writer"},"rules":[{"apiGroups":[""],"resources":["configmaps","secrets"],"verbs":["create","update"]}]}`)
	g.post("root-secret", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
		`{"metadata":{"name":"alice-writes"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"writer"},"subjects":[{"kind":"User","name":"alice"}]}`)
	eventually(t, "alice's grant to apply", func() bool {
		code, _ := g.write(http.MethodPost, "configmaps", "granted")
		return code == http.StatusCreated
	})
	return g
}

// post creates an object from a JSON body as the user of token.
func (g *gateway) post(token, path, body string) {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.url+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		data, _ := io.ReadAll(resp.Body)
		g.t.Fatalf("POST %s: %d %s", path, resp.StatusCode, data)
	}
}

// write sends a write of a configmap or secret named name in namespace
// default and returns the HTTP status and body.
func (g *gateway) write(method, resource, name string) (int, string) {
	g.t.Helper()
	kind := map[string]string{"configmaps": "ConfigMap", "secrets": "Secret"}[resource]
	url := g.url + "/api/v1/namespaces/default/" + resource
	if method != http.MethodPost {
		url += "/" + name
	}
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":%q,"metadata":{"name":%q}}`, kind, name)
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// get reads the object of resource named name in namespace default and
// returns the HTTP status.
func (g *gateway) get(resource, name string) int {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.url+"/api/v1/namespaces/default/"+resource+"/"+name, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer root-secret")
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// synced reads meridian_apigateway_admission_scope_synced.
func (g *gateway) synced() bool {
	g.t.Helper()
	return telemetrytest.Sum(g.t, g.reg, "meridian_apigateway_admission_scope_synced", nil) == 1
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, 20*time.Second, what, cond)
}

// TestAdmissionScope: the gateway calls Admit for writes in the admission
// service's scope and while it holds no scope, skips the others, and
// follows the scope again after the service restarts.
func TestAdmissionScope(t *testing.T) {
	policies := admissiontest.NewPolicies(admissiontest.Scope{})
	adm := admissiontest.Start(t, "127.0.0.1:0", policies, admissiontest.Options{})
	g := startGateway(t, adm.Addr)

	// The empty scope: no write is sent, not even one the policy would
	// deny.
	eventually(t, "the gateway holds the scope", g.synced)
	calls := policies.Calls()
	if code, body := g.write(http.MethodPost, "configmaps", "deny-out-of-scope"); code != http.StatusCreated {
		t.Fatalf("create out of scope: %d %s", code, body)
	}
	if n := policies.Calls() - calls; n != 0 {
		t.Fatalf("%d admission calls for a write out of scope", n)
	}

	// Creates of configmaps come into scope: they are sent (and the one
	// named deny- is denied); other writes are still not.
	policies.SetScope(admissiontest.Scope{Rules: []admissiontest.Rule{{
		Operations: []admissionv1.Operation{admissionv1.Operation_OPERATION_CREATE},
		APIGroups:  []string{""},
		Resources:  []string{"configmaps"},
	}}})
	i := 0
	eventually(t, "configmap creates are sent to admission", func() bool {
		i++
		code, _ := g.write(http.MethodPost, "configmaps", fmt.Sprintf("deny-%d", i))
		return code == http.StatusForbidden
	})
	calls = policies.Calls()
	if code, body := g.write(http.MethodPost, "configmaps", "in-scope"); code != http.StatusCreated || !strings.Contains(body, `"in-scope"`) {
		t.Fatalf("create in scope: %d %s", code, body)
	}
	if code, body := g.write(http.MethodPut, "configmaps", "deny-out-of-scope"); code != http.StatusOK {
		t.Fatalf("update out of scope: %d %s", code, body)
	}
	if code, body := g.write(http.MethodPost, "secrets", "deny-secret"); code != http.StatusCreated {
		t.Fatalf("secret out of scope: %d %s", code, body)
	}
	if n := policies.Calls() - calls; n != 1 {
		t.Fatalf("%d admission calls, want 1 (the create in scope)", n)
	}

	// The service stops: the gateway holds no scope and sends every write,
	// which fails while nothing answers.
	if err := adm.Stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the gateway forgets the scope", func() bool { return !g.synced() })
	if code, body := g.write(http.MethodPost, "secrets", "while-down"); code != http.StatusServiceUnavailable {
		t.Fatalf("write while admission is down and the scope unknown: %d %s, want 503 (sent to admission)", code, body)
	}

	// It comes back with an empty scope: the gateway follows it again.
	policies.SetScope(admissiontest.Scope{})
	adm = admissiontest.Start(t, adm.Addr, policies, admissiontest.Options{})
	eventually(t, "the gateway holds the scope again", g.synced)
	calls = policies.Calls()
	if code, body := g.write(http.MethodPost, "configmaps", "deny-after-restart"); code != http.StatusCreated {
		t.Fatalf("create out of scope after restart: %d %s", code, body)
	}
	if n := policies.Calls() - calls; n != 0 {
		t.Fatalf("%d admission calls after the restart", n)
	}

	// An older service, without WatchScope, gets every write.
	if err := adm.Stop(); err != nil {
		t.Fatal(err)
	}
	admissiontest.Start(t, adm.Addr, policies, admissiontest.Options{Older: true})
	eventually(t, "writes are sent to the older service", func() bool {
		i++
		code, _ := g.write(http.MethodPost, "configmaps", fmt.Sprintf("deny-older-%d", i))
		return code == http.StatusForbidden
	})
	if g.synced() {
		t.Fatal("synced with a service that has no scope")
	}
}
