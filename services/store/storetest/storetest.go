// Package storetest runs a real store in process for the tests of the
// store's clients (watchfanout, the gateway): one member (raft, pebble and
// gRPC on loopback) with its data in a temporary directory of the test.
package storetest

import (
	"io"
	"log/slog"
	"net"
	"testing"

	storeapp "github.com/meridian-cp/meridian/services/store/app"
)

// Member is a running store member.
type Member struct {
	// Addr is the member's gRPC address.
	Addr string
	// App is the member.
	App    *storeapp.App
	served chan error
}

// Start starts a single-member store with cfg, whose DataDir (default: a
// temporary directory of t), Bootstrap (true) and Logger (default: none)
// it fills in, serving plaintext gRPC on a loopback port. The member stops
// when the test ends, if it has not been stopped before.
func Start(t testing.TB, cfg storeapp.Config) *Member {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.Bootstrap = true
	st, err := storeapp.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	m := Serve(st, lis)
	t.Cleanup(m.Stop)
	return m
}

// Serve serves a member the caller started (a cluster's, say, whose
// listeners are opened first) on lis until Stop.
func Serve(st *storeapp.App, lis net.Listener) *Member {
	m := &Member{Addr: lis.Addr().String(), App: st, served: make(chan error, 1)}
	go func() { m.served <- st.Serve(lis) }()
	return m
}

// Stop closes the member and waits until it has stopped serving; it is
// safe to call more than once (not concurrently).
func (m *Member) Stop() {
	if m.App != nil {
		m.App.Close()
		<-m.served
		m.App = nil
	}
}
