package app_test

import (
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/services/apigateway/app"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// TestServingCertificateRotation serves the HTTPS API with the serving
// configuration the apigateway binary builds (pki.LoadServerTLS of
// --tls-cert-file and --tls-key-file): once a new pair replaces the files
// and the reload interval has passed, new connections get the new
// certificate from the running gateway.
func TestServingCertificateRotation(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	store := storetest.Start(t, storeapp.Config{ID: "store-0"})

	dir := t.TempDir()
	ca, err := pki.NewCA("api")
	if err != nil {
		t.Fatal(err)
	}
	spec := pki.CertSpec{CommonName: "apiserver", DNSNames: []string{"localhost"}, Server: true}
	issue := func() string {
		kp, err := ca.IssueFiles(dir, "apiserver", spec)
		if err != nil {
			t.Fatal(err)
		}
		c, err := kp.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.SerialNumber.String()
	}
	first := issue()
	serving, err := pki.LoadServerTLS(filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key"), "", quiet)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gw, err := app.New(t.Context(), app.Config{
		StoreAddress: store.Addr, ServingTLS: serving, ClientCAs: ca.Pool(),
		Registerer: reg, Gatherer: reg, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := daemontest.Serve(t, gw).Addr

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: pki.ClientTLS(nil, ca.Pool(), "localhost"), DisableKeepAlives: true,
	}}
	// served returns the serial number of the certificate a new
	// connection gets.
	served := func() string {
		t.Helper()
		resp, err := client.Get("https://" + addr + "/livez")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	if got := served(); got != first {
		t.Fatalf("serving %s, want %s", got, first)
	}
	second := issue()
	time.Sleep(pki.DefaultReloadInterval)
	if got := served(); got != second {
		t.Fatalf("after rotation serving %s, want the new certificate %s", got, second)
	}
}
