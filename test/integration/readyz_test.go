package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/admission/admissiontest"
	gateway "github.com/meridian-cp/meridian/services/apigateway/app"
	flowcontrol "github.com/meridian-cp/meridian/services/flowcontrol/app"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
	watchfanout "github.com/meridian-cp/meridian/services/watchfanout/app"
)

// apiGateway is a real gateway serving HTTPS on loopback in front of
// real services the test starts separately (so that it can stop each),
// with a bearer token for its caller.
type apiGateway struct {
	t      *testing.T
	app    *gateway.App
	url    string
	client *http.Client
	reg    *prometheus.Registry
}

// startAPIGateway starts a gateway with cfg, whose serving certificate,
// token file, metrics and logger it fills in.
func startAPIGateway(t *testing.T, cfg gateway.Config) *apiGateway {
	t.Helper()
	ca := pkitest.NewCA(t, "test")
	cert := pkitest.IssueTLS(t, ca, pkitest.LoopbackServer("apiserver"))
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(`secret,alice,1001,"team"`+"\n"+`root-secret,admin,1000,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg.ServingTLS = pki.ServerTLS(cert, nil, tls.NoClientCert)
	cfg.TokenAuthFile = tokens
	cfg.Registerer, cfg.Gatherer = reg, reg
	cfg.Logger = slog.New(slog.DiscardHandler)
	gw, err := gateway.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := &apiGateway{
		t: t, app: gw, url: "https://" + daemontest.Serve(t, gw).Addr, reg: reg,
		client: &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(nil, ca.Pool(), "127.0.0.1")}},
	}
	g.grantConfigMaps()
	return g
}

// grantConfigMaps lets alice create and read the config maps of
// "default", what the tests of this file do as her, with a Role and a
// RoleBinding the admin creates, and waits until the grant applies.
func (g *apiGateway) grantConfigMaps() {
	g.t.Helper()
	for path, body := range map[string]string{
		"/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles":        `{"metadata":{"name":"configmaps"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["create","get","list","watch"]}]}`,
		"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings": `{"metadata":{"name":"alice"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"configmaps"},"subjects":[{"kind":"User","name":"alice"}]}`,
	} {
		req, err := http.NewRequest(http.MethodPost, g.url+path, strings.NewReader(body))
		if err != nil {
			g.t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer root-secret")
		req.Header.Set("Content-Type", "application/json")
		resp, err := g.client.Do(req)
		if err != nil {
			g.t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			g.t.Fatalf("POST %s: %d %s", path, resp.StatusCode, data)
		}
	}
	polltest.Until(g.t, 30*time.Second, "alice's grant to apply", func() bool {
		code, _ := g.must(http.MethodGet, "/api/v1/namespaces/default/configmaps", "")
		return code == http.StatusOK
	})
}

// do sends a request as alice and returns the status and body; err is
// that of a request that got no response.
func (g *apiGateway) do(ctx context.Context, method, path, body string) (int, string, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.url+path, r)
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), err
}

// must is do for requests that must get a response.
func (g *apiGateway) must(method, path, body string) (int, string) {
	g.t.Helper()
	code, out, err := g.do(g.t.Context(), method, path, body)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, out
}

// createConfigMap creates configmap name in namespace default and returns
// its resourceVersion.
func (g *apiGateway) createConfigMap(name string) string {
	g.t.Helper()
	code, body := g.must(http.MethodPost, "/api/v1/namespaces/default/configmaps", fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q}}`, name))
	if code != http.StatusCreated {
		g.t.Fatalf("create configmap %s: %d %s", name, code, body)
	}
	var obj struct {
		Metadata struct{ ResourceVersion string } `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(body), &obj); err != nil {
		g.t.Fatal(err)
	}
	return obj.Metadata.ResourceVersion
}

// degraded reads meridian_apigateway_dependency_degraded of dependency.
func (g *apiGateway) degraded(dependency string) float64 {
	g.t.Helper()
	return telemetrytest.Sum(g.t, g.reg, "meridian_apigateway_dependency_degraded", map[string]string{"dependency": dependency})
}

// readyzUntil polls /readyz?verbose until cond holds of its answer and
// returns that answer.
func (g *apiGateway) readyzUntil(what string, cond func(code int, body string) bool) (int, string) {
	g.t.Helper()
	var code int
	var body string
	polltest.Until(g.t, 30*time.Second, what, func() bool {
		var err error
		code, body, err = g.do(g.t.Context(), http.MethodGet, "/readyz?verbose", "")
		return err == nil && cond(code, body)
	})
	return code, body
}

// TestReadinessFollowsWhatTheGatewayCanServe: /readyz fails only when the
// gateway cannot serve. With flow control, watchfanout and admission down
// it serves (limited by its own flow control, from the store, refusing only writes
// that need admission), so /readyz is 200 and ?verbose and
// meridian_apigateway_dependency_degraded name each as degraded; with the
// store down it cannot, and /readyz fails. /livez stays 200 throughout.
func TestReadinessFollowsWhatTheGatewayCanServe(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	store := storetest.Start(t, storeapp.Config{ID: "store-0"})
	flow, err := flowcontrol.New(t.Context(), flowcontrol.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	flowServed := daemontest.Serve(t, flow)
	fanout, err := watchfanout.New(t.Context(), watchfanout.Config{StoreAddress: store.Addr, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	fanoutServed := daemontest.Serve(t, fanout)
	adm := admissiontest.Start(t, "127.0.0.1:0", admissiontest.NewPolicies(admissiontest.Scope{}), admissiontest.Options{})
	g := startAPIGateway(t, gateway.Config{
		StoreAddress: store.Addr, FlowControlAddress: flowServed.Addr, AdmissionAddress: adm.Addr,
		WatchFanoutAddresses: []string{fanoutServed.Addr},
	})

	healthy := func(name string) string { return "[+]" + name + " ok\n" }
	degradedLine := map[string]string{
		"flowcontrol": "[+]flowcontrol ok (degraded: requests are limited by this gateway alone)\n",
		"watchfanout": "[+]watchfanout ok (degraded: watches and reads are served by the store)\n",
		"admission":   "[+]admission ok (degraded: writes that need admission fail)\n",
	}
	g.readyzUntil("every dependency healthy", func(code int, body string) bool {
		return code == http.StatusOK && strings.Contains(body, healthy("store")) && strings.Contains(body, healthy("flowcontrol")) &&
			strings.Contains(body, healthy("watchfanout")) && strings.Contains(body, healthy("admission"))
	})
	livez := func() {
		t.Helper()
		if code, body := g.must(http.MethodGet, "/livez", ""); code != http.StatusOK || body != "ok" {
			t.Errorf("/livez: %d %q, want 200 ok", code, body)
		}
	}

	// Flow control stops: requests are served without it, and the
	// gateway stays ready.
	flowServed.CloseWithin(t, 30*time.Second)
	code, body := g.readyzUntil("the gateway notices flow control is down", func(_ int, body string) bool {
		return !strings.Contains(body, healthy("flowcontrol"))
	})
	if code != http.StatusOK || !strings.Contains(body, degradedLine["flowcontrol"]) || !strings.Contains(body, "readyz check passed\n") {
		t.Fatalf("/readyz?verbose with flow control down: %d\n%s", code, body)
	}
	for dep, want := range map[string]float64{"flowcontrol": 1, "watchfanout": 0, "admission": 0} {
		if got := g.degraded(dep); got != want {
			t.Errorf("meridian_apigateway_dependency_degraded{dependency=%q} = %v, want %v", dep, got, want)
		}
	}
	if got := telemetrytest.Sum(t, g.reg, "kubernetes_healthcheck", map[string]string{"name": "flowcontrol", "type": "readyz"}); got != 1 {
		t.Errorf("kubernetes_healthcheck{name=flowcontrol,type=readyz} = %v, want 1 (it passed, degraded)", got)
	}
	g.createConfigMap("without-flow-control")
	if code, body := g.must(http.MethodGet, "/api/v1/namespaces/default/configmaps/without-flow-control", ""); code != http.StatusOK {
		t.Fatalf("get without flow control: %d %s", code, body)
	}
	livez()

	// watchfanout and admission stop too: reads come from the store,
	// writes that need admission fail, and the gateway stays ready.
	fanoutServed.CloseWithin(t, 30*time.Second)
	if err := adm.Stop(); err != nil {
		t.Fatal(err)
	}
	code, body = g.readyzUntil("the gateway notices watchfanout and admission are down", func(_ int, body string) bool {
		return !strings.Contains(body, healthy("watchfanout")) && !strings.Contains(body, healthy("admission"))
	})
	if code != http.StatusOK || !strings.Contains(body, degradedLine["watchfanout"]) || !strings.Contains(body, degradedLine["admission"]) ||
		!strings.Contains(body, degradedLine["flowcontrol"]) || !strings.Contains(body, healthy("store")) {
		t.Fatalf("/readyz?verbose with flow control, watchfanout and admission down: %d\n%s", code, body)
	}
	for _, dep := range []string{"flowcontrol", "watchfanout", "admission"} {
		if got := g.degraded(dep); got != 1 {
			t.Errorf("meridian_apigateway_dependency_degraded{dependency=%q} = %v, want 1", dep, got)
		}
	}
	if code, body := g.must(http.MethodGet, "/api/v1/namespaces/default/configmaps/without-flow-control", ""); code != http.StatusOK {
		t.Fatalf("get from the store: %d %s", code, body)
	}
	if code, body := g.must(http.MethodGet, "/api/v1/namespaces/default/configmaps", ""); code != http.StatusOK || !strings.Contains(body, `"without-flow-control"`) {
		t.Fatalf("list from the store: %d %s", code, body)
	}
	livez()

	// The store stops: the gateway cannot serve, and says so.
	store.Stop()
	code, body = g.readyzUntil("/readyz fails without the store", func(code int, _ string) bool { return code != http.StatusOK })
	if code != http.StatusInternalServerError || !strings.Contains(body, "[-]store failed: reason withheld\n") || !strings.HasSuffix(body, "readyz check failed\n") {
		t.Fatalf("/readyz?verbose with the store down: %d\n%s", code, body)
	}
	if got := telemetrytest.Sum(t, g.reg, "kubernetes_healthcheck", map[string]string{"name": "store", "type": "readyz"}); got != 0 {
		t.Errorf("kubernetes_healthcheck{name=store,type=readyz} = %v, want 0", got)
	}
	livez()
}

// TestReadinessDuringShutdown: once shutdown begins /readyz fails
// ("shutdown") while the gateway goes on serving for its shutdown delay:
// a watch open before keeps delivering events, new requests are served,
// /livez stays 200. When the delay ends the listener closes and the watch
// ends.
func TestReadinessDuringShutdown(t *testing.T) {
	store := storetest.Start(t, storeapp.Config{ID: "store-0"})
	// The delay is longer than the test: it ends when the test cancels
	// Shutdown's context.
	g := startAPIGateway(t, gateway.Config{StoreAddress: store.Addr, ShutdownDelay: time.Hour})
	g.readyzUntil("ready", func(code int, body string) bool {
		return code == http.StatusOK && strings.Contains(body, "[+]shutdown ok\n")
	})
	rv := g.createConfigMap("before")

	watchCtx, stopWatch := context.WithTimeout(t.Context(), time.Minute)
	defer stopWatch()
	req, err := http.NewRequestWithContext(watchCtx, http.MethodGet, g.url+"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion="+rv, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer secret")
	watch, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Body.Close()
	if watch.StatusCode != http.StatusOK {
		t.Fatalf("watch: %d", watch.StatusCode)
	}
	events := json.NewDecoder(watch.Body)
	health := g.grpcHealth()
	if st := health(); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health before shutdown: %v, want SERVING", st)
	}

	shutdownCtx, endDelay := context.WithCancel(context.Background())
	defer endDelay()
	shutdown := make(chan error, 1)
	go func() { shutdown <- g.app.Shutdown(shutdownCtx) }()

	code, body := g.readyzUntil("/readyz fails once shutdown has begun", func(code int, _ string) bool { return code != http.StatusOK })
	if code != http.StatusInternalServerError || !strings.Contains(body, "[-]shutdown failed: reason withheld\n") || !strings.Contains(body, "[+]store ok\n") {
		t.Fatalf("/readyz?verbose during shutdown: %d\n%s", code, body)
	}
	if code, body := g.must(http.MethodGet, "/livez", ""); code != http.StatusOK {
		t.Errorf("/livez during shutdown: %d %q, want 200", code, body)
	}
	if st := health(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health during shutdown: %v, want NOT_SERVING", st)
	}
	if code, body := g.must(http.MethodGet, "/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz during shutdown: %d %q, want 200 (it has no shutdown check)", code, body)
	}

	// Still serving: a new request, and the watch in flight sees it.
	g.createConfigMap("during")
	var ev struct {
		Type   string `json:"type"`
		Object struct {
			Metadata struct{ Name string } `json:"metadata"`
		} `json:"object"`
	}
	if err := events.Decode(&ev); err != nil {
		t.Fatalf("watch during shutdown: %v", err)
	}
	if ev.Type != "ADDED" || ev.Object.Metadata.Name != "during" {
		t.Fatalf("watch during shutdown: %s %s, want ADDED during", ev.Type, ev.Object.Metadata.Name)
	}

	// The delay ends: the listener closes, the watch is cut, Shutdown
	// returns.
	endDelay()
	select {
	case err := <-shutdown:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return after its context ended")
	}
	if err := events.Decode(&ev); err == nil {
		t.Fatalf("the watch goes on after shutdown: %s %s", ev.Type, ev.Object.Metadata.Name)
	}
	if _, _, err := g.do(t.Context(), http.MethodGet, "/readyz", ""); err == nil {
		t.Fatal("/readyz answered after shutdown")
	}
}

// grpcHealth serves the gateway's gRPC API on loopback and returns a
// function that asks its health service about the ResourceService.
func (g *apiGateway) grpcHealth() func() healthpb.HealthCheckResponse_ServingStatus {
	g.t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		g.t.Fatal(err)
	}
	go func() { _ = g.app.ServeGRPC(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(g.client.Transport.(*http.Transport).TLSClientConfig)))
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { conn.Close() })
	client := healthpb.NewHealthClient(conn)
	return func() healthpb.HealthCheckResponse_ServingStatus {
		g.t.Helper()
		resp, err := client.Check(g.t.Context(), &healthpb.HealthCheckRequest{Service: apiv1.ResourceService_ServiceDesc.ServiceName})
		if err != nil {
			g.t.Fatalf("gRPC health check: %v", err)
		}
		return resp.GetStatus()
	}
}
