package command

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/pki/pkitest"
)

// servingFiles writes a serving certificate and key for loopback and a
// token file, the least the gateway starts with, and returns the flags
// naming them.
func servingFiles(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	ca := pkitest.NewCA(t, "api-ca")
	kp, err := ca.IssueFiles(dir, "apiserver", pkitest.LoopbackServer("apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("t,alice,1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--tls-cert-file", kp.CertFile, "--tls-key-file", kp.KeyFile, "--token-auth-file", tokens, "--log-level", "error"}
}

// TestAddressInUseNamesTheFlag: a second gateway on one host with the
// same --listen or --grpc-listen fails at once, before it contacts any
// service, with an error naming the flag to set.
func TestAddressInUseNamesTheFlag(t *testing.T) {
	files := servingFiles(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, tc := range []struct{ name, other string }{{"listen", "grpc-listen"}, {"grpc-listen", "listen"}} {
		// No store listens at 127.0.0.1:1: the gateway must fail before it
		// tries.
		args := append([]string{"--" + tc.name, addr, "--" + tc.other, "127.0.0.1:0", "--store-address", "127.0.0.1:1"}, files...)
		err := Run(t.Context(), args, io.Discard)
		want := "--" + tc.name + " " + addr + " is in use (by another process, or another instance on this host): set --" + tc.name + " to a free address"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--%s at a taken address: %v; want it to say %q", tc.name, err, want)
		}
	}
}

// TestPprofServesProfiles: with --pprof the gateway serves Go's profiles
// there over plain HTTP (the loadtest's --watch-pprof reads the heap and
// goroutine profiles), from before it reaches the store; a taken --pprof
// address fails at once naming the flag.
func TestPprofServesProfiles(t *testing.T) {
	files := servingFiles(t)
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	// No store listens at 127.0.0.1:1: the gateway keeps trying while the
	// profiles are read.
	args := append([]string{"--pprof", addr, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--store-address", "127.0.0.1:1"}, files...)
	go func() { done <- Run(ctx, args, io.Discard) }()
	var body []byte
	var code int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			continue
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		code = resp.StatusCode
		break
	}
	cancel()
	<-done
	if code != http.StatusOK || !strings.HasPrefix(string(body), "goroutine profile:") {
		t.Fatalf("GET /debug/pprof/goroutine?debug=1 on --pprof: %d %.200q; want 200 and the goroutine profile", code, body)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	args = append([]string{"--pprof", taken.Addr().String(), "--listen", "127.0.0.1:0", "--grpc-listen", "", "--store-address", "127.0.0.1:1"}, files...)
	want := "--pprof " + taken.Addr().String() + " is in use"
	if err := Run(t.Context(), args, io.Discard); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("--pprof at a taken address: %v; want it to say %q", err, want)
	}
}

// TestBadCommandLines: what cannot run is refused before anything
// starts, naming the flags; -h prints the usage, whose --store-address
// says that it takes every member.
func TestBadCommandLines(t *testing.T) {
	files := servingFiles(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--tls-cert-file and --tls-key-file are required"},
		{[]string{"--tls-cert-file", "c", "--tls-key-file", "k"}, "set --client-ca-file, --token-auth-file and/or --oidc-issuer-url"},
		{append([]string{"--service-cert-file", "c"}, files...), "--service-cert-file and --service-key-file must be set together"},
		{append([]string{"--service-cert-file", "c", "--service-key-file", "k"}, files...), "--service-cert-file needs --service-ca-file"},
		{append([]string{"--store-address", ""}, files...), "--store-address is required"},
		{append([]string{"extra"}, files...), "unexpected arguments"},
		{append([]string{"--oidc-issuer-url", "http://issuer.example", "--oidc-client-id", "k"}, files...), `issuer URL "http://issuer.example" is not an https URL`},
		{append([]string{"--oidc-issuer-url", "https://issuer.example"}, files...), "a client ID is required"},
		{append([]string{"--oidc-issuer-url", "https://issuer.example", "--oidc-client-id", "k", "--oidc-signing-algs", "HS256"}, files...), `signing algorithm "HS256" is not supported`},
		{append([]string{"--oidc-required-claim", "novalue"}, files...), "want key=value"},
		{append([]string{"--anonymous-auth=maybe"}, files...), "invalid boolean value"},
	} {
		if err := Run(t.Context(), tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want it to say %q", tc.args, err, tc.want)
		}
	}
	// Audit settings are refused before any service is contacted.
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  verb: [get]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	local := append([]string{"--listen", "127.0.0.1:0", "--grpc-listen", "", "--store-address", "127.0.0.1:1"}, files...)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--audit-policy-file", policy}, "--audit-policy-file needs a backend"},
		{[]string{"--audit-policy-file", policy, "--audit-log-path", "-"}, `unknown field "verb"`},
		{[]string{"--audit-policy-file", policy, "--audit-log-path", "-", "--audit-log-format", "legacy"}, "only json is supported"},
		{[]string{"--audit-policy-file", policy, "--audit-log-path", "-", "--audit-webhook-mode", "blocking"}, "only batch is supported"},
	} {
		if err := Run(t.Context(), append(tc.args, local...), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want it to say %q", tc.args, err, tc.want)
		}
	}

	var usage strings.Builder
	if err := Run(t.Context(), []string{"-h"}, &usage); err != nil {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(usage.String(), "comma-separated gRPC addresses of the store's members") {
		t.Fatalf("usage does not say --store-address takes every member:\n%s", usage.String())
	}
}
