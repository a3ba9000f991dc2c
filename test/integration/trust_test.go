package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/store/accesstest"
)

// storeProbes calls one method of each kind: data (Range, Txn writing key,
// Watch), membership, compaction, snapshot, status.
func storeProbes(key string) []accesstest.Call {
	return accesstest.Only(accesstest.Calls(accesstest.Target{Key: key, Member: "store-0"}),
		"Range", "Txn", "Watch", "MemberList", "MemberRemove", "TransferLeadership", "Compact", "Snapshot", "Status")
}

// dialWith dials addr presenting the pair <dataDir>/pki/<cert>.crt and
// verifying the server against the CA in <dataDir>/pki/<caFile>.
func dialWith(t *testing.T, dataDir, addr, cert, caFile string) *grpc.ClientConn {
	t.Helper()
	conf, err := pki.LoadClientTLS(filepath.Join(dataDir, "pki", cert+".crt"), filepath.Join(dataDir, "pki", cert+".key"), filepath.Join(dataDir, "pki", caFile), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rawKey reports whether the store holds key, read with the gateway's
// certificate.
func (e *env) rawKey(ctx context.Context, key string) bool {
	e.t.Helper()
	r, err := storev1.NewKVServiceClient(e.storeConn(gatewayCert)).Range(ctx, &storev1.RangeRequest{Key: []byte(key)})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(r.GetKvs()) > 0
}

// TestAdminCertificateRefusedByStoreAndWatchfanout: the admin kubeconfig's
// client certificate, the API's trust domain, reaches neither the store
// (no data, membership, compaction or snapshot call, and nothing written)
// nor watchfanout.
func TestAdminCertificateRefusedByStoreAndWatchfanout(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := dialWith(t, e.dataDir, e.cp.StoreAddr, "admin", "internal-ca.crt")
	const key = "/registry/configmaps/default/written-raw"
	for _, p := range storeProbes(key) {
		if err := p.Do(ctx, admin); err == nil {
			t.Errorf("store %s accepted the admin certificate", p.Method)
		}
	}
	if e.rawKey(ctx, key) {
		t.Error("the admin certificate wrote a raw key")
	}
	wf := watchv1.NewWatchServiceClient(dialWith(t, e.dataDir, e.cp.WatchFanoutAddr, "admin", "internal-ca.crt"))
	if _, err := wf.List(ctx, listConfigMaps()); err == nil {
		t.Error("watchfanout accepted the admin certificate")
	}
}

func listConfigMaps() *watchv1.ListRequest {
	return &watchv1.ListRequest{Resource: &watchv1.Resource{Version: "v1", Resource: "configmaps"}, Namespace: "default", ResourceVersion: "0"}
}

// TestStoreAndWatchfanoutAuthorizeEachIdentity: the store gives each
// internal identity only what it uses — the gateway the data RPCs,
// watchfanout reads, the operator membership, compaction, snapshots and
// status and no keys — and watchfanout answers only the gateway.
// Refusals are PermissionDenied naming what the method needs.
func TestStoreAndWatchfanoutAuthorizeEachIdentity(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	allowed := map[string][]string{
		gatewayCert:   {"Range", "Txn", "Watch", "MemberList"},
		"watchfanout": {"Range", "Watch", "MemberList"},
		operatorCert:  {"MemberList", "MemberRemove", "TransferLeadership", "Compact", "Snapshot", "Status"},
	}
	for cert, want := range allowed {
		conn := e.storeConn(cert)
		key := "/registry/configmaps/default/raw-by-" + cert
		for _, p := range storeProbes(key) {
			err := p.Do(ctx, conn)
			c := status.Code(err)
			switch ok := slices.Contains(want, p.Method); {
			case ok && (c == codes.PermissionDenied || c == codes.Unauthenticated || c == codes.Unavailable):
				t.Errorf("%s: %s refused: %v", cert, p.Method, err)
			case !ok && c != codes.PermissionDenied:
				t.Errorf("%s: %s: %v, want PermissionDenied", cert, p.Method, err)
			case !ok && !strings.Contains(status.Convert(err).Message(), "needs a client certificate with organization"):
				t.Errorf("%s: %s: message %q does not say what it needs", cert, p.Method, status.Convert(err).Message())
			}
		}
		if got := e.rawKey(ctx, key); got != slices.Contains(want, "Txn") {
			t.Errorf("%s: raw key written: %t", cert, got)
		}
	}

	for cert, want := range map[string]codes.Code{gatewayCert: codes.OK, operatorCert: codes.PermissionDenied, "watchfanout": codes.PermissionDenied, "store": codes.PermissionDenied} {
		wf := watchv1.NewWatchServiceClient(dialInternal(t, e.dataDir, e.cp.WatchFanoutAddr, cert))
		if _, err := wf.List(ctx, listConfigMaps()); status.Code(err) != want {
			t.Errorf("watchfanout List with the %s certificate: %v, want %s", cert, err, want)
		}
	}
}

// TestInternalCertificatesCannotLogIn: no certificate of the internal
// CA authenticates to the API, whatever its subject — the services' own,
// the operator's, or one minted with the internal CA's key as
// CN=admin,O=system:masters. The HTTPS API answers 401 with an
// Unauthorized Status and the gRPC API Unauthenticated; the admin's
// certificate still works on both.
func TestInternalCertificatesCannotLogIn(t *testing.T) {
	e := newEnv(t, func(c *allinone.Config) { c.GRPCListen = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pkiDir := filepath.Join(e.dataDir, "pki")
	internalCA, err := pki.LoadOrCreateCA(filepath.Join(e.dataDir, "ca", "internal"), "unused")
	if err != nil {
		t.Fatal(err)
	}
	minted, err := internalCA.Issue(pki.CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkiDir, "minted.crt"), minted.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkiDir, "minted.key"), minted.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	apiCA := filepath.Join(pkiDir, "api-ca.crt")
	for _, cert := range []string{"admin", gatewayCert, operatorCert, "store", "watchfanout", "minted"} {
		conf := presenting(t, filepath.Join(pkiDir, cert), apiCA)
		wantCode, wantGRPC := http.StatusUnauthorized, codes.Unauthenticated
		if cert == "admin" {
			wantCode, wantGRPC = http.StatusOK, codes.OK
		}

		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}}
		resp, err := hc.Get("https://" + e.cp.Addr.String() + "/api/v1/namespaces/default/configmaps")
		if err != nil {
			t.Fatalf("%s: HTTPS: %v", cert, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		hc.CloseIdleConnections()
		if resp.StatusCode != wantCode {
			t.Errorf("%s: HTTPS answered %d, want %d: %s", cert, resp.StatusCode, wantCode, body)
		}
		if wantCode == http.StatusUnauthorized {
			var st metav1.Status
			if err := json.Unmarshal(body, &st); err != nil || st.Reason != metav1.StatusReasonUnauthorized || st.Code != http.StatusUnauthorized {
				t.Errorf("%s: 401 body is not an Unauthorized Status: %v %s", cert, err, body)
			}
		}

		conn, err := grpc.NewClient(e.cp.GRPCAddr.String(), grpc.WithTransportCredentials(credentials.NewTLS(conf)))
		if err != nil {
			t.Fatal(err)
		}
		ref := &apiv1.ResourceRef{Version: "v1", Resource: "namespaces", Name: "default"}
		_, err = apiv1.NewResourceServiceClient(conn).Get(ctx, &apiv1.GetRequest{Ref: ref})
		conn.Close()
		if status.Code(err) != wantGRPC {
			t.Errorf("%s: gRPC API: %v, want %s", cert, err, wantGRPC)
		}
	}
	// Nothing an internal certificate asked for was created.
	if _, err := e.client.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}

// presenting returns a client configuration verifying the server with the
// CA in caFile and presenting the pair <name>.crt, <name>.key whatever CAs
// the server names as acceptable: Go's client would otherwise send no
// certificate of another CA, and the server's own verification would go
// untested.
func presenting(t *testing.T, name, caFile string) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(name+".crt", name+".key")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pki.LoadPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	conf := pki.ClientTLS(nil, pool, "127.0.0.1")
	conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return conf
}

// TestNoCAKeyWhereServicesReadCertificates: <data-dir>/pki, which the
// services read, holds no key that can sign for either CA; the CA keys
// are under <data-dir>/ca, readable by the owner only.
func TestNoCAKeyWhereServicesReadCertificates(t *testing.T) {
	e := newEnv(t)
	var caCerts [][]byte
	for _, name := range []string{"api", "internal"} {
		dir := filepath.Join(e.dataDir, "ca", name)
		pem, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		caCerts = append(caCerts, pem)
		fi, err := os.Stat(filepath.Join(dir, "ca.key"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s CA key mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	if fi, err := os.Stat(filepath.Join(e.dataDir, "ca")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("ca dir: %v %v, want mode 0700", fi, err)
	}
	if a, b := caCerts[0], caCerts[1]; string(a) == string(b) {
		t.Fatal("one CA for the API and the services")
	}
	keys := 0
	err := filepath.WalkDir(filepath.Join(e.dataDir, "pki"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), "PRIVATE KEY") {
			return nil
		}
		keys++
		for _, ca := range caCerts {
			if _, err := tls.X509KeyPair(ca, data); err == nil {
				t.Errorf("%s is a CA's private key", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if keys == 0 {
		t.Fatal("no service key found under pki/")
	}
}

// TestDataDirWithSingleCAStarts: a data directory whose pki/ holds one CA
// (pki/ca.crt and pki/ca.key, which signed every certificate) starts: the
// objects are kept, the old CA's key is gone, its certificates are
// refused, and the rewritten kubeconfig works.
func TestDataDirWithSingleCAStarts(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"}}
	if _, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := e.dataDir
	if err := e.cp.Close(); err != nil {
		t.Fatal(err)
	}

	// The single-CA layout: one CA in pki/, every certificate signed by
	// it, no ca/.
	pkiDir := filepath.Join(dir, "pki")
	if err := os.RemoveAll(filepath.Join(dir, "ca")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"api-ca.crt", "internal-ca.crt"} {
		if err := os.Remove(filepath.Join(pkiDir, f)); err != nil {
			t.Fatal(err)
		}
	}
	old, err := pki.LoadOrCreateCA(pkiDir, "meridian-ca")
	if err != nil {
		t.Fatal(err)
	}
	oldAdmin, err := old.Issue(pki.CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"admin", gatewayCert, "store", "watchfanout", "admission", "flowcontrol", "apiserver"} {
		kp, err := old.Issue(pki.CertSpec{CommonName: "meridian-" + name, Organizations: []string{identity.GatewayOrganization}, DNSNames: []string{"localhost"}, Server: true, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkiDir, name+".crt"), kp.CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkiDir, name+".key"), kp.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"operator.crt", "operator.key"} {
		if err := os.Remove(filepath.Join(pkiDir, f)); err != nil {
			t.Fatal(err)
		}
	}

	again := newEnv(t, func(c *allinone.Config) { c.DataDir = dir })
	got, err := again.client.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("object after the restart: %v %v", got, err)
	}
	for _, f := range []string{"ca.key", "ca.crt"} {
		if _, err := os.Stat(filepath.Join(pkiDir, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("pki/%s of the single CA is still there: %v", f, err)
		}
	}
	// The old CA's certificates are refused: by the API ...
	cert, err := oldAdmin.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pki.LoadPool(filepath.Join(pkiDir, "api-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	oldConf := pki.ClientTLS(nil, pool, "127.0.0.1")
	oldConf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: oldConf}}
	resp, err := hc.Get("https://" + again.cp.Addr.String() + "/api/v1/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hc.CloseIdleConnections()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old CA's admin certificate: %d, want 401", resp.StatusCode)
	}
	// ... and by the store; the re-issued operator certificate works.
	internal, err := pki.LoadPool(filepath.Join(pkiDir, "internal-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(again.cp.StoreAddr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(&cert, internal, ""))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := storev1.NewMaintenanceServiceClient(conn).Status(ctx, &storev1.StatusRequest{}); err == nil {
		t.Error("the store accepted the old CA's certificate")
	}
	if _, err := storev1.NewMaintenanceServiceClient(again.storeConn(operatorCert)).Status(ctx, &storev1.StatusRequest{}); err != nil {
		t.Errorf("re-issued operator certificate: %v", err)
	}
}
