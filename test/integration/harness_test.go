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
	return &env{t: t, cp: cp, config: rc, client: c, dataDir: cfg.DataDir}
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

// storeConn dials the store's own gRPC API with the admin certificate.
func (e *env) storeConn() *grpc.ClientConn {
	e.t.Helper()
	dir := filepath.Join(e.dataDir, "pki")
	pool, err := pki.LoadPool(filepath.Join(dir, "ca.crt"))
	if err != nil {
		e.t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"))
	if err != nil {
		e.t.Fatal(err)
	}
	conn, err := grpc.NewClient(e.cp.StoreAddr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(&cert, pool, ""))))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}

// compact compacts the store to its current revision, through the store's
// own gRPC API, and returns that revision.
func (e *env) compact(ctx context.Context) int64 {
	e.t.Helper()
	kv := storev1.NewKVServiceClient(e.storeConn())
	r, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte{0}, CountOnly: true})
	if err != nil {
		e.t.Fatal(err)
	}
	rev := r.GetHeader().GetRevision()
	if _, err := kv.Compact(ctx, &storev1.CompactRequest{Revision: rev}); err != nil {
		e.t.Fatal(err)
	}
	return rev
}
