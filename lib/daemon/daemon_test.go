package daemon_test

import (
	"context"
	"flag"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/daemon"
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
