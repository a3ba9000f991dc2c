// Package storetest runs a real store in process for the tests of the
// store's clients (watchfanout, the gateway): one member (raft, pebble and
// gRPC on loopback) with its data in a temporary directory of the test.
package storetest

import (
	"log/slog"
	"net"
	"testing"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Member is a running store member.
type Member struct {
	// Addr is the member's gRPC address.
	Addr string
	// App is the member; nil once stopped.
	App    *storeapp.App
	served *daemontest.Served
}

// Start starts a single-member store with cfg, whose DataDir (default: a
// temporary directory of t), Bootstrap (true) and Logger (default: none)
// it fills in, serving gRPC (plaintext unless cfg.TLS is set) on a
// loopback port. The member stops when the test ends, if it has not been
// stopped before.
func Start(t testing.TB, cfg storeapp.Config) *Member {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Bootstrap = true
	st, err := storeapp.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return member(daemontest.Serve(t, st), st)
}

// Serve serves a member the caller started (a cluster's, say, whose
// listeners are opened first) on lis until Stop or the end of the test.
// It may be called from any goroutine.
func Serve(t testing.TB, st *storeapp.App, lis net.Listener) *Member {
	return member(daemontest.ServeListener(t, st, lis), st)
}

func member(served *daemontest.Served, st *storeapp.App) *Member {
	return &Member{Addr: served.Addr, App: st, served: served}
}

// Dial returns a plaintext connection to the member, with opts added,
// closed when the test ends. The member must serve without TLS (cfg.TLS
// unset in Start).
func (m *Member) Dial(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(m.Addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Stop closes the member and waits until it has stopped serving; it is
// safe to call more than once (not concurrently).
func (m *Member) Stop() {
	if m.App != nil {
		m.App.Close()
		_ = m.served.Wait()
		m.App = nil
	}
}
