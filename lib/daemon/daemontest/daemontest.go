// Package daemontest serves a built service (each service's app.App, a
// daemon.Server or the gateway's) on loopback for the length of a test.
package daemontest

import (
	"net"
	"testing"
	"time"
)

// Service is what Serve serves: the serving half of daemon.Server.
type Service interface {
	// Serve serves on lis until Close, then returns nil.
	Serve(lis net.Listener) error
	// Close stops the service gracefully; safe to call twice.
	Close() error
}

// Served is a service serving on loopback.
type Served struct {
	// Addr is the address it serves on.
	Addr string

	srv  Service
	done chan struct{} // closed once Serve returned
	err  error         // what Serve returned; set before done is closed
}

// Serve serves s on a new listener on 127.0.0.1. When the test ends, s is
// closed and Serve's return awaited, so that no server outlives its test;
// what they return is not checked there: tests that check it call Close
// themselves (every service's Close is safe to call twice) and Wait.
// When no listener can be opened, s is closed and the test fails.
func Serve(t testing.TB, s Service) *Served {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = s.Close()
		t.Fatal(err)
	}
	return ServeListener(t, s, lis)
}

// ServeListener is Serve on a listener the caller opened: one whose
// address s was configured with before it was built (a store member's
// client address, say). It may be called from any goroutine.
func ServeListener(t testing.TB, s Service, lis net.Listener) *Served {
	sv := &Served{Addr: lis.Addr().String(), srv: s, done: make(chan struct{})}
	go func() {
		sv.err = s.Serve(lis)
		close(sv.done)
	}()
	t.Cleanup(func() {
		_ = s.Close()
		<-sv.done
	})
	return sv
}

// CloseWithin closes the service and fails the test (Fatal) unless Close
// returns nil within d: for tests that check that Close does not wait for
// what clients hold open, such as a stream.
func (s *Served) CloseWithin(t testing.TB, d time.Duration) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- s.srv.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(d):
		t.Fatalf("Close did not return within %v", d)
	}
}

// Wait waits until Serve returned and returns what it returned.
func (s *Served) Wait() error {
	<-s.done
	return s.err
}
