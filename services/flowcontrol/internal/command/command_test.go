package command

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/flowcontrol/decideclient"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// TestRunMTLS runs the binary's Run with mTLS files and checks that a
// client with a CA-signed certificate is served, one without is refused,
// metrics are served, and cancelling shuts down cleanly.
func TestRunMTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir, "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.LoadOrIssue(dir, "flowcontrol", pki.CertSpec{CommonName: "flowcontrol", IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := ca.LoadOrIssue(dir, "gateway", pki.CertSpec{CommonName: "gateway", Organizations: []string{identity.GatewayOrganization}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	addrs := daemontest.FreeAddrs(t, 2)
	addr, metrics := addrs[0], addrs[1]
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{
			"--listen", addr, "--metrics-listen", metrics,
			"--tls-cert-file", srv.CertFile, "--tls-key-file", srv.KeyFile,
			"--client-ca-file", filepath.Join(dir, "ca.crt"),
			"--concurrency-limit", "10", "--log-level", "debug", "--gc-percent", "250",
		}, io.Discard)
	}()
	// --gc-percent sets the process's GC target; the tests' own is put back.
	gogc := debug.SetGCPercent(100)
	debug.SetGCPercent(gogc)
	t.Cleanup(func() { debug.SetGCPercent(gogc) })

	clientTLS, err := pki.LoadClientTLS(gw.CertFile, gw.KeyFile, filepath.Join(dir, "ca.crt"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpcclient.Dial(addr, clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := flowcontrolv1.NewFlowControlServiceClient(conn)
	req := &flowcontrolv1.AcquireRequest{GatewayId: "gw", Digest: &flowcontrolv1.RequestDigest{User: "alice", Verb: "get", Path: "/api"}}
	var resp *flowcontrolv1.AcquireResponse
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err = c.Acquire(ctx, req)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Acquire over mTLS: %v", err)
	}
	if resp.GetGrant().GetPriorityLevel() != "global-default" {
		t.Fatalf("grant %v", resp.GetGrant())
	}
	// The gateways' Decide stream is open to them too.
	dc, err := decideclient.Open(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := dc.Acquire(ctx, req); err != nil || resp.GetGrant().GetPriorityLevel() != "global-default" {
		t.Fatalf("Acquire on a Decide stream over mTLS: %v %v", resp, err)
	}
	if err := dc.Close(); err != nil {
		t.Fatalf("closing the Decide stream: %v", err)
	}

	noCert, err := grpcclient.Dial(addr, pki.ClientTLS(nil, ca.Pool(), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	if _, err := flowcontrolv1.NewFlowControlServiceClient(noCert).Acquire(ctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("Acquire without a client certificate: %v, want Unavailable", err)
	}

	hr, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(hr.Body)
	hr.Body.Close()
	if err != nil || hr.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %d %v", hr.StatusCode, err)
	}
	if !regexp.MustCompile(`(?m)^go_gc_gogc_percent 250$`).Match(body) {
		t.Errorf("metrics do not show --gc-percent 250 as go_gc_gogc_percent:\n%s", regexp.MustCompile(`(?m)^go_gc_gogc.*$`).FindAll(body, -1))
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}
