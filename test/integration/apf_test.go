package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
	"github.com/meridian-cp/meridian/lib/polltest"
	gateway "github.com/meridian-cp/meridian/services/apigateway/app"
	flowcontrol "github.com/meridian-cp/meridian/services/flowcontrol/app"
	store "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// apfEnv is a store, a flow-control service reading its configuration
// from it and gateways taking seats from it, with a FlowSchema that sends
// alice to a Reject level of one seat (1 share of a 100-seat limit,
// nothing to borrow), applied.
type apfEnv struct {
	t     *testing.T
	ctx   context.Context
	addrs []string
	ca    *pki.CA
	alice rest.TLSClientConfig
	admin rest.TLSClientConfig
	http  *http.Client // alice's, without client-go's retries after a 429

	storeAddr, fcAddr string
	fc                *daemontest.Served
	serving           tls.Certificate
}

func newAPFEnv(t *testing.T, gateways int) *apfEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	t.Cleanup(cancel)
	quiet := slog.New(slog.DiscardHandler)
	storeAddr := storetest.Start(t, store.Config{ID: "store-0", Logger: quiet}).Addr
	fc, err := flowcontrol.New(ctx, flowcontrol.Config{StoreAddress: storeAddr, ConcurrencyLimit: 100, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e := &apfEnv{t: t, ctx: ctx, ca: pkitest.NewCA(t, "test-ca"), storeAddr: storeAddr, fc: daemontest.Serve(t, fc)}
	e.fcAddr = e.fc.Addr
	e.serving = pkitest.IssueTLS(t, e.ca, pkitest.LoopbackServer("meridian-apiserver"))
	for range gateways {
		e.startGateway()
	}
	e.admin = e.certFor("admin", "system:masters")
	e.alice = e.certFor("alice", "dev")
	admin, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + e.addrs[0], TLSClientConfig: e.admin})
	if err != nil {
		t.Fatal(err)
	}
	if e.http, err = rest.HTTPClientFor(&rest.Config{TLSClientConfig: e.alice}); err != nil {
		t.Fatal(err)
	}

	fs := e.routeToReject(admin, "alice", "one-seat", 1)
	polltest.Until(t, 15*time.Second, "alice classified by her FlowSchema on every gateway", func() bool {
		for _, addr := range e.addrs {
			if resp := e.list(e.http, addr); resp.StatusCode != 200 || resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") != string(fs.UID) {
				return false
			}
		}
		return true
	})
	return e
}

// routeToReject creates, as the admin, a Reject priority level named
// level with shares nominal concurrency shares (of the 100-seat limit)
// and nothing to borrow, a FlowSchema named user sending every resource
// request of user there, and a RoleBinding letting user edit namespace
// default; it returns the FlowSchema.
func (e *apfEnv) routeToReject(admin kubernetes.Interface, user, level string, shares int32) *flowcontrolv1.FlowSchema {
	e.t.Helper()
	zero := int32(0)
	pl, err := admin.FlowcontrolV1().PriorityLevelConfigurations().Create(e.ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: level},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
			NominalConcurrencyShares: &shares, BorrowingLimitPercent: &zero, LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	fs, err := admin.FlowcontrolV1().FlowSchemas().Create(e.ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: pl.Name}, MatchingPrecedence: 100,
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects:      []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: user}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings("default").Create(e.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return fs
}

// startGateway starts one more gateway on the env's store and
// flow-control service and returns its address (also appended to addrs).
func (e *apfEnv) startGateway() string { return e.startGatewayOn(e.fcAddr) }

// startGatewayOn is startGateway with the flow-control service at fcAddr.
func (e *apfEnv) startGatewayOn(fcAddr string) string {
	gw, err := gateway.New(e.ctx, gateway.Config{
		StoreAddress: e.storeAddr, FlowControlAddress: fcAddr, GatewayID: fmt.Sprintf("gw-%d", len(e.addrs)),
		Registry:   registry.New(registry.Standard()...),
		ServingTLS: pki.ServerTLS(e.serving, nil, tls.NoClientCert), ClientCAs: e.ca.Pool(), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	addr := daemontest.Serve(e.t, gw).Addr
	e.addrs = append(e.addrs, addr)
	return addr
}

// certFor issues a client certificate of user in groups.
func (e *apfEnv) certFor(user string, groups ...string) rest.TLSClientConfig {
	kp := pkitest.Issue(e.t, e.ca, pki.CertSpec{CommonName: user, Organizations: groups, Client: true})
	return rest.TLSClientConfig{CAData: e.ca.CertPEM(), CertData: kp.CertPEM, KeyData: kp.KeyPEM}
}

// list lists configmaps through the gateway at addr with client c.
func (e *apfEnv) list(c *http.Client, addr string) *http.Response {
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, "https://"+addr+"/api/v1/namespaces/default/configmaps", nil)
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// hold starts a create of alice's through the gateway at addr and sends
// no body: it holds her seat until the returned func closes it. A create
// answered at once (a 429 while the seat of her previous request is
// still being released: gateways release in batches) is tried again.
func (e *apfEnv) hold(addr string) func() { return e.holdAs(addr, e.alice) }

// holdAs is hold for the user of client configuration c.
func (e *apfEnv) holdAs(addr string, c rest.TLSClientConfig) func() {
	deadline := time.Now().Add(10 * time.Second)
	for {
		holder, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: e.ca.Pool(), NextProtos: []string{"http/1.1"}, Certificates: []tls.Certificate{clientCert(e.t, c)}})
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { holder.Close() })
		if _, err := fmt.Fprintf(holder, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"); err != nil {
			e.t.Fatal(err)
		}
		// No answer within two seconds: it waits for its body, seated.
		// A create refused at once can take over half a second to be
		// answered on a machine busy with other suites, and taking it
		// for seated would leave no seat held.
		_ = holder.SetReadDeadline(time.Now().Add(2 * time.Second))
		var b [1]byte
		if _, err := holder.Read(b[:]); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return func() { holder.Close() }
			}
		}
		holder.Close()
		if time.Now().After(deadline) {
			e.t.Fatal("the create never held a seat")
		}
	}
}

// TestTwoGatewaysShareOneLimit: two gateways take seats from one
// flow-control service. While a create of alice's through the first
// gateway holds her one seat, her list through the second gateway is a
// 429: the budget is the fleet's, not each gateway's.
func TestTwoGatewaysShareOneLimit(t *testing.T) {
	e := newAPFEnv(t, 2)
	release := e.hold(e.addrs[0])
	polltest.Until(t, 10*time.Second, "a 429 from the other gateway", func() bool {
		resp := e.list(e.http, e.addrs[1])
		return resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != ""
	})
	if resp := e.list(e.http, e.addrs[0]); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the holding gateway: %d, want 429", resp.StatusCode)
	}
	release()
	polltest.Until(t, 10*time.Second, "alice served again once the seat is free", func() bool { return e.list(e.http, e.addrs[1]).StatusCode == 200 })
}

// clientCert is the tls.Certificate of a client configuration.
func clientCert(t *testing.T, c rest.TLSClientConfig) tls.Certificate {
	t.Helper()
	cert, err := tls.X509KeyPair(c.CertData, c.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestWatchGivesSeatBackAfterInitialEvents: alice's watch takes her one
// seat and gives it back once it has sent its initial events (through
// the real gateway, ResourceService and flow-control service), so her
// list is served while the watch stays open; were the seat held for the
// watch's life, the list would be a 429.
func TestWatchGivesSeatBackAfterInitialEvents(t *testing.T) {
	e := newAPFEnv(t, 1)
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, "https://"+e.addrs[0]+
		"/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", nil)
	var watch *http.Response
	polltest.Until(t, 10*time.Second, "alice's watch admitted", func() bool {
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close() // her seat of the setup's lists not released yet
			return false
		}
		watch = resp
		return true
	})
	defer watch.Body.Close()
	lines := bufio.NewScanner(watch.Body)
	for !strings.Contains(lines.Text(), "k8s.io/initial-events-end") {
		if !lines.Scan() {
			t.Fatalf("the watch ended before its initial events did: %v", lines.Err())
		}
	}
	polltest.Until(t, 10*time.Second, "alice's list served while her watch is open", func() bool {
		return e.list(e.http, e.addrs[0]).StatusCode == http.StatusOK
	})
}

// TestWideListTakesManySeats: a LIST of 10,000 ConfigMaps is counted as
// wide, as kube-apiserver's list work estimator counts it (a seat per 100
// objects, at most 10, at most the level's seats). Bob's Reject level
// has a few seats; while one of them is held, a GET of one object is
// served, but his LIST needs them all and gets a 429, and once the seat
// is free the same LIST is served. The gateway that serves him starts
// after the objects exist: it reads the object counts at start (and
// every minute).
func TestWideListTakesManySeats(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 10,000 ConfigMaps")
	}
	e := newAPFEnv(t, 1)
	cfg := &rest.Config{Host: "https://" + e.addrs[0], TLSClientConfig: e.admin, QPS: 1e6, Burst: 1e6}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fs := e.routeToReject(admin, "bob", "few-seats", 3)

	const objects = 10000
	names := make(chan string)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for name := range names {
				if _, err := admin.CoreV1().ConfigMaps("default").Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() {
		defer close(names)
		for i := range objects {
			select {
			case names <- fmt.Sprintf("cm-%05d", i):
			case <-e.ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}

	addr := e.startGateway()
	bob := e.certFor("bob", "dev")
	c, err := rest.HTTPClientFor(&rest.Config{TLSClientConfig: bob})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) *http.Response {
		req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, "https://"+addr+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	const one, all = "/api/v1/namespaces/default/configmaps/cm-00001", "/api/v1/namespaces/default/configmaps"
	polltest.Until(t, 15*time.Second, "bob classified by his FlowSchema, his LIST served", func() bool {
		resp := get(all)
		return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") == string(fs.UID)
	})

	release := e.holdAs(addr, bob)
	if resp := get(one); resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's GET of one object while one seat is held: %d, want 200 (it takes one seat)", resp.StatusCode)
	}
	resp := get(all)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("bob's LIST of %d objects while one seat is held: %d (Retry-After %q), want 429 with Retry-After: it needs every seat of his level",
			objects, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	release()
	polltest.Until(t, 10*time.Second, "bob's LIST served once the seat is free", func() bool { return get(all).StatusCode == http.StatusOK })
}

// get GETs path through the gateway at addr with client c.
func (e *apfEnv) get(c *http.Client, addr, path string) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, "https://"+addr+path, nil)
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestNonResourceRequestsFlowControlled: alice's FlowSchema, given a
// nonResourceRule for GET /version, sends it to her one-seat Reject
// level: while a create of hers holds the seat, her GET /version is a
// 429 with Retry-After and the schema's UID, while her probes, exempt
// by the suggested probes schema, are served. With the flow-control
// service stopped, the probes and /version are still served, by the
// gateway's own classification and limiter.
func TestNonResourceRequestsFlowControlled(t *testing.T) {
	e := newAPFEnv(t, 1)
	addr := e.addrs[0]
	admin, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + addr, TLSClientConfig: e.admin})
	if err != nil {
		t.Fatal(err)
	}
	// The flow-control service writes the schema's status meanwhile:
	// retry the update on a conflict, as a controller would.
	var fs *flowcontrolv1.FlowSchema
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		if fs, err = admin.FlowcontrolV1().FlowSchemas().Get(e.ctx, "alice", metav1.GetOptions{}); err != nil {
			return err
		}
		fs.Spec.Rules[0].NonResourceRules = []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/version"}}}
		_, err = admin.FlowcontrolV1().FlowSchemas().Update(e.ctx, fs, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	probes := awaitFlowSchema(t, e.ctx, admin, "probes")
	polltest.Until(t, 15*time.Second, "alice's /version classified by her FlowSchema", func() bool {
		resp := e.get(e.http, addr, "/version")
		return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") == string(fs.UID)
	})

	release := e.hold(addr)
	polltest.Until(t, 10*time.Second, "alice's /version rejected while her seat is held", func() bool {
		return e.get(e.http, addr, "/version").StatusCode == http.StatusTooManyRequests
	})
	if resp := e.get(e.http, addr, "/version"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") != string(fs.UID) {
		t.Errorf("alice's /version with her seat held: %d %v, want 429 with Retry-After from her FlowSchema", resp.StatusCode, resp.Header)
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		if resp := e.get(e.http, addr, path); resp.StatusCode != http.StatusOK || resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") != string(probes.UID) {
			t.Errorf("alice's %s with her seat held: %d %v, want 200 from probes", path, resp.StatusCode, resp.Header)
		}
	}
	release()
	polltest.Until(t, 10*time.Second, "alice's /version served once the seat is free", func() bool {
		return e.get(e.http, addr, "/version").StatusCode == http.StatusOK
	})

	e.fc.CloseWithin(t, 10*time.Second)
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/version"} {
		if resp := e.get(e.http, addr, path); resp.StatusCode != http.StatusOK {
			t.Errorf("alice's %s with the flow-control service stopped: %d, want 200", path, resp.StatusCode)
		}
	}
}

// TestProbesDoNotWaitForFlowControl: a gateway whose flow-control
// service accepts connections and never answers serves probes at once,
// exempt by the stored probes schema, which it classifies itself; a
// call to that service would wait for gRPC's connect timeout (20s),
// beyond the client's 10s.
func TestProbesDoNotWaitForFlowControl(t *testing.T) {
	e := newAPFEnv(t, 1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	addr := e.startGatewayOn(lis.Addr().String())
	admin, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + e.addrs[0], TLSClientConfig: e.admin})
	if err != nil {
		t.Fatal(err)
	}
	probes := awaitFlowSchema(t, e.ctx, admin, "probes")
	c, err := rest.HTTPClientFor(&rest.Config{TLSClientConfig: e.alice, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 15*time.Second, "alice's /livez classified by the stored probes schema", func() bool {
		resp := e.get(c, addr, "/livez")
		return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") == string(probes.UID)
	})
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		if resp := e.get(c, addr, path); resp.StatusCode != http.StatusOK || resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") != string(probes.UID) {
			t.Errorf("alice's %s: %d %v, want 200 from probes", path, resp.StatusCode, resp.Header)
		}
	}
}

// awaitFlowSchema returns the FlowSchema name once it exists: the
// gateway's APF configuration controller creates the suggested ones after
// start-up, as kube-apiserver's does.
func awaitFlowSchema(t *testing.T, ctx context.Context, c kubernetes.Interface, name string) *flowcontrolv1.FlowSchema {
	t.Helper()
	var fs *flowcontrolv1.FlowSchema
	polltest.Until(t, 15*time.Second, "the FlowSchema "+name, func() bool {
		var err error
		fs, err = c.FlowcontrolV1().FlowSchemas().Get(ctx, name, metav1.GetOptions{})
		return err == nil
	})
	return fs
}
