package daemon_test

import (
	"context"
	"crypto/tls"
	"flag"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
)

// grpcService is a daemon.Server around a gRPC server that reports the
// address it serves on.
type grpcService struct {
	srv    *grpc.Server
	health *health.Server
	addr   chan string
}

func (s *grpcService) Serve(lis net.Listener) error {
	s.addr <- lis.Addr().String()
	return s.srv.Serve(lis)
}

func (s *grpcService) Close() error { s.srv.Stop(); return nil }

func (s *grpcService) Health() (*health.Server, []string) { return s.health, nil }

// TestRunServesRotatedCertificate runs a service as every service binary
// does (--tls-cert-file, --tls-key-file, --client-ca-file) and dials it
// with a client configuration from pki.LoadClientTLS. After both pairs'
// files are replaced and the reload interval has passed, a new
// connection of the same client sees the server's new certificate and the
// server the client's, without a restart.
func TestRunServesRotatedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	serverSpec := pki.CertSpec{CommonName: "svc", DNSNames: []string{"localhost"}, Server: true}
	clientSpec := pki.CertSpec{CommonName: "gw", Organizations: []string{identity.GatewayOrganization}, Client: true}
	issue := func(name string, spec pki.CertSpec) string {
		kp, err := ca.IssueFiles(dir, name, spec)
		if err != nil {
			t.Fatal(err)
		}
		c, err := kp.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.SerialNumber.String()
	}
	serverA, clientA := issue("svc", serverSpec), issue("gw", clientSpec)

	var f daemon.Flags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Register(fs, "127.0.0.1:0", "")
	if err := daemon.ParseFlags(fs, []string{
		"--tls-cert-file=" + filepath.Join(dir, "svc.crt"), "--tls-key-file=" + filepath.Join(dir, "svc.key"),
		"--client-ca-file=" + filepath.Join(dir, "ca.crt"), "--log-level=error",
	}); err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		seenClient string
	)
	svc := &grpcService{addr: make(chan string, 1)}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, "svc", &f, io.Discard, func(_ context.Context, env daemon.Env) (daemon.Server, error) {
			conf := env.TLS.Clone()
			conf.VerifyConnection = func(cs tls.ConnectionState) error {
				mu.Lock()
				seenClient = cs.PeerCertificates[0].SerialNumber.String()
				mu.Unlock()
				return nil
			}
			srv, hs, err := grpcserver.New(grpcserver.Options{TLS: conf})
			svc.srv, svc.health = srv, hs
			return svc, err
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var addr string
	select {
	case addr = <-svc.addr:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}

	clientTLS, err := pki.LoadClientTLS(filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key"), filepath.Join(dir, "ca.crt"), "localhost", nil)
	if err != nil {
		t.Fatal(err)
	}
	// call makes a health check on a new connection and returns the
	// serial numbers of the certificates each end presented.
	call := func() (server, client string) {
		t.Helper()
		conn, err := grpcclient.Dial(addr, clientTLS)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var p peer.Peer
		if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber.String(), seenClient
	}
	if s, c := call(); s != serverA || c != clientA {
		t.Fatalf("before rotation: server %s client %s, want %s %s", s, c, serverA, clientA)
	}

	serverB, clientB := issue("svc", serverSpec), issue("gw", clientSpec)
	// Each end last looked at its files before the first call ended, so
	// one interval from now the next handshake looks again.
	time.Sleep(pki.DefaultReloadInterval)
	if s, c := call(); s != serverB || c != clientB {
		t.Fatalf("after rotation: server %s client %s, want %s %s", s, c, serverB, clientB)
	}
}
