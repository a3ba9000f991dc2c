package daemon_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/health"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/identity"
)

// fakeServer accepts connections until closed.
type fakeServer struct {
	lis    atomic.Pointer[net.Listener]
	closed atomic.Int32
	served chan struct{}
}

func (s *fakeServer) Serve(lis net.Listener) error {
	s.lis.Store(&lis)
	close(s.served)
	for {
		c, err := lis.Accept()
		if err != nil {
			if s.closed.Load() > 0 {
				return nil
			}
			return err
		}
		c.Close()
	}
}

// Health reports no gRPC health server: the fake is never ready.
func (s *fakeServer) Health() (*health.Server, []string) { return nil, nil }

func (s *fakeServer) Close() error {
	if s.closed.Add(1) == 1 {
		if l := s.lis.Load(); l != nil {
			(*l).Close()
		}
	}
	return nil
}

func TestRunShutsDownOnCancel(t *testing.T) {
	var f daemon.Flags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Register(fs, "127.0.0.1:0", "127.0.0.1:0")
	if err := daemon.ParseFlags(fs, []string{"--log-format=text"}); err != nil {
		t.Fatal(err)
	}
	srv := &fakeServer{served: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		done <- daemon.Run(ctx, "test", &f, io.Discard, func(_ context.Context, env daemon.Env) (daemon.Server, error) {
			if env.Registry == nil || env.Logger == nil || env.Trust == nil || env.TLS != nil || len(env.Callers) != 1 || env.Callers[0] != identity.GatewayOrganization {
				t.Errorf("env %+v", env)
			}
			return srv, nil
		})
	}()
	select {
	case <-srv.served:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if srv.closed.Load() == 0 {
		t.Fatal("server not closed")
	}
}

func TestFlagsValidate(t *testing.T) {
	f := daemon.Flags{TLSCertFile: "c", ClientCAFile: "ca", LogLevel: "loud", LogFormat: "json"}
	err := f.Validate()
	if err == nil {
		t.Fatal("bad flags accepted")
	}
	for _, want := range []string{"--listen", "--tls-key-file", "log level", "--caller-organizations"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	// TLS without client certificates could authorize nobody.
	f = daemon.Flags{Listen: ":1", TLSCertFile: "c", TLSKeyFile: "k", CallerOrganizations: identity.GatewayOrganization, LogLevel: "info", LogFormat: "json"}
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "--client-ca-file") {
		t.Fatalf("TLS without --client-ca-file: %v", err)
	}
}

// TestCommand: -h and Check's refusal build nothing; otherwise the
// service's own flags are parsed, Check may adjust the common ones, and
// what Build builds is served until the context ends.
func TestCommand(t *testing.T) {
	var (
		size    int
		checked *daemon.Flags
		srv     = &fakeServer{served: make(chan struct{})}
		built   int
	)
	cmd := daemon.Command{
		Name: "test", Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0",
		Flags: func(fs *flag.FlagSet) { fs.IntVar(&size, "size", 1, "a size") },
		Check: func(common *daemon.Flags) error {
			checked = common
			if size < 0 {
				return errors.New("negative size")
			}
			common.MetricsListen = ""
			return nil
		},
		Build: func(context.Context, daemon.Env) (daemon.Server, error) {
			built++
			return srv, nil
		},
	}
	var usage strings.Builder
	if err := cmd.Run(t.Context(), []string{"-h"}, &usage); err != nil || !strings.Contains(usage.String(), "-size") || !strings.Contains(usage.String(), "-listen") {
		t.Fatalf("-h: %v, usage %q", err, usage.String())
	}
	if err := cmd.Run(t.Context(), []string{"--size=-1"}, io.Discard); err == nil || err.Error() != "negative size" {
		t.Fatalf("refused by Check: %v", err)
	}
	if err := cmd.Run(t.Context(), []string{"extra"}, io.Discard); err == nil || !strings.Contains(err.Error(), "unexpected arguments") {
		t.Fatalf("extra argument: %v", err)
	}
	if built != 0 {
		t.Fatalf("built %d times before a valid command line", built)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cmd.Run(ctx, []string{"--size=7", "--log-level=error"}, io.Discard) }()
	select {
	case <-srv.served:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	}
	if size != 7 || checked == nil || checked.MetricsListen != "" || checked.Listen != "127.0.0.1:0" {
		t.Fatalf("size %d, common flags %+v", size, checked)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if built != 1 || srv.closed.Load() == 0 {
		t.Fatalf("built %d times, closed %d times", built, srv.closed.Load())
	}
}

// TestAddressInUseNamesTheFlag: when the address of --listen or
// --metrics-listen is taken (as when two instances run on one host with
// the same defaults), the command fails before building anything, with an
// error that names the flag to set.
func TestAddressInUseNamesTheFlag(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	built := 0
	cmd := daemon.Command{
		Name: "test", Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0",
		Build: func(context.Context, daemon.Env) (daemon.Server, error) {
			built++
			return &fakeServer{served: make(chan struct{})}, nil
		},
	}
	addr := taken.Addr().String()
	for _, name := range []string{"listen", "metrics-listen"} {
		err := cmd.Run(t.Context(), []string{"--" + name + "=" + addr, "--log-level=error"}, io.Discard)
		want := "--" + name + " " + addr + " is in use (by another process, or another instance on this host): set --" + name + " to a free address"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--%s at a taken address: %v; want it to say %q", name, err, want)
		}
	}
	if built != 0 {
		t.Fatalf("built %d times with an address in use", built)
	}
}

// TestPprof: --pprof serves net/http/pprof beside /metrics on the metrics
// listener; without it only /metrics is served there; without a metrics
// listener it is refused.
func TestPprof(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("pprof=%v", on), func(t *testing.T) {
			metrics := daemontest.FreeAddrs(t, 1)[0]
			srv := &fakeServer{served: make(chan struct{})}
			cmd := daemon.Command{
				Name: "test", Listen: "127.0.0.1:0", MetricsListen: metrics,
				Build: func(context.Context, daemon.Env) (daemon.Server, error) { return srv, nil },
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			args := []string{"--log-level=error"}
			if on {
				args = append(args, "--pprof")
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Run(ctx, args, io.Discard) }()
			select {
			case <-srv.served:
			case err := <-done:
				t.Fatalf("Run returned early: %v", err)
			}
			if code := get(t, "http://"+metrics+"/metrics"); code != http.StatusOK {
				t.Fatalf("/metrics: %d", code)
			}
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			if code := get(t, "http://"+metrics+"/debug/pprof/goroutine?debug=1"); code != want {
				t.Fatalf("/debug/pprof/goroutine: %d, want %d", code, want)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
	cmd := daemon.Command{Name: "test", Listen: "127.0.0.1:0", Build: func(context.Context, daemon.Env) (daemon.Server, error) {
		t.Fatal("built with --pprof and no metrics listener")
		return nil, nil
	}}
	if err := cmd.Run(t.Context(), []string{"--pprof", "--metrics-listen="}, io.Discard); err == nil || !strings.Contains(err.Error(), "--pprof needs --metrics-listen") {
		t.Fatalf("--pprof without a metrics listener: %v", err)
	}
}

// get returns the status code of a GET of url; the server is listening.
func get(t *testing.T, url string) int {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
