// Package integration runs the control plane in-process (the all-in-one,
// with every service on its own gRPC server on loopback) and checks API
// semantics through client-go and raw HTTP, with direct access to the
// store where a test needs to force compaction.
package integration

import (
	"context"
	"crypto/tls"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/lib/pki"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

type env struct {
	t       *testing.T
	cp      *allinone.ControlPlane
	config  *rest.Config
	client  kubernetes.Interface
	dataDir string
}

// eachWatchServer runs f in a subtest for each server of watches:
// watchfanout, and the store with watchfanout disabled (as when it is
// down). Each gets an environment of its own with the gRPC API on and
// tune applied; i numbers them.
func eachWatchServer(t *testing.T, f func(t *testing.T, i int, e *env), tune ...func(*allinone.Config)) {
	for i, server := range []struct {
		name    string
		disable bool
	}{{"watchfanout", false}, {"store", true}} {
		t.Run(server.name, func(t *testing.T) {
			e := newEnv(t, append([]func(*allinone.Config){func(c *allinone.Config) {
				c.GRPCListen = "127.0.0.1:0"
				c.DisableWatchfanout = server.disable
			}}, tune...)...)
			f(t, i, e)
		})
	}
}

// newEnv starts a control plane in a new data directory; tune adjusts its
// configuration (setting DataDir restarts one on an earlier env's data).
func newEnv(t *testing.T, tune ...func(*allinone.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := allinone.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}
	for _, f := range tune {
		f(&cfg)
	}
	cp, err := allinone.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Close() })
	rc, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The tests seed hundreds of objects: lift client-go's default 5 QPS.
	rc.QPS, rc.Burst = 2000, 2000
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, cp: cp, config: rc, client: c, dataDir: cfg.DataDir}
	e.waitNamespaceDefaults("default")
	return e
}

// rootCA is the ConfigMap kube-controller-manager's root CA publisher
// (the gateway's rootcacert) keeps in every namespace: a namespace's list
// of ConfigMaps holds it, after the tests' own (their names sort before
// it).
const rootCA = "kube-root-ca.crt"

// createNamespace creates namespace ns and waits for its default
// ServiceAccount and kube-root-ca.crt (waitNamespaceDefaults).
func (e *env) createNamespace(ns string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitNamespaceDefaults(ns)
}

// waitNamespaceDefaults waits until namespace ns holds what every
// namespace gets (the "default" ServiceAccount and kube-root-ca.crt), so
// that a test that counts or watches its objects starts from them, as the
// Kubernetes e2e framework waits for them (a bound that catches a hang).
func (e *env) waitNamespaceDefaults(ns string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, saErr := e.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		_, cmErr := e.client.CoreV1().ConfigMaps(ns).Get(ctx, rootCA, metav1.GetOptions{})
		cancel()
		if saErr == nil && cmErr == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("namespace %s has no default ServiceAccount or %s after 30s: %v, %v", ns, rootCA, saErr, cmErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// withoutRootCA returns items without kube-root-ca.crt, in order, and
// fails t unless it was there once.
func withoutRootCA(t testing.TB, items []corev1.ConfigMap) []corev1.ConfigMap {
	t.Helper()
	var out []corev1.ConfigMap
	for _, it := range items {
		if it.Name != rootCA {
			out = append(out, it)
		}
	}
	if len(out) != len(items)-1 {
		t.Errorf("%d of the %d ConfigMaps listed are %s, want 1", len(items)-len(out), len(items), rootCA)
	}
	return out
}

// clientFor returns a clientset that sends and accepts contentType
// (application/json or application/vnd.kubernetes.protobuf).
func (e *env) clientFor(t testing.TB, contentType string) kubernetes.Interface {
	t.Helper()
	return clientWith(t, e.config, contentType)
}

// clientWith returns a clientset for config that sends and accepts
// contentType.
func clientWith(t testing.TB, config *rest.Config, contentType string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(config)
	cfg.ContentType, cfg.AcceptContentTypes = contentType, contentType
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// inParallel calls f(0) … f(n-1), 16 at a time, and returns when all have;
// each error fails t.
func inParallel(t testing.TB, n int, f func(i int) error) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// Certificates in <data-dir>/pki the tests dial the store with, each an
// identity the store serves.
const (
	// gatewayCert reads and writes keys.
	gatewayCert = "apigateway-client"
	// operatorCert compacts (and changes membership, takes snapshots).
	operatorCert = "operator"
)

// storeConn dials the store's own gRPC API with the certificate
// <data-dir>/pki/<cert>.crt, verifying the store with the internal CA.
func (e *env) storeConn(cert string) *grpc.ClientConn {
	e.t.Helper()
	return dialInternal(e.t, e.dataDir, e.cp.StoreAddr, cert)
}

// dialInternal dials an internal service at addr with the certificate
// <dataDir>/pki/<cert>.crt, verifying the service with the internal CA.
func dialInternal(t testing.TB, dataDir, addr, cert string) *grpc.ClientConn {
	t.Helper()
	dir := filepath.Join(dataDir, "pki")
	pool, err := pki.LoadPool(filepath.Join(dir, "internal-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(filepath.Join(dir, cert+".crt"), filepath.Join(dir, cert+".key"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(&kp, pool, ""))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// compact compacts the store to its current revision, through the store's
// own gRPC API with the operator's certificate, and returns that
// revision.
func (e *env) compact(ctx context.Context) int64 {
	e.t.Helper()
	conn := e.storeConn(operatorCert)
	st, err := storev1.NewMaintenanceServiceClient(conn).Status(ctx, &storev1.StatusRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	rev := st.GetHeader().GetRevision()
	if _, err := storev1.NewKVServiceClient(conn).Compact(ctx, &storev1.CompactRequest{Revision: rev}); err != nil {
		e.t.Fatal(err)
	}
	return rev
}
