// Package admissionclient is the gateway's client of the admission
// service. Beyond Admit it follows the service's scope (WatchScope): which
// requests any configured policy could match. The write path asks InScope
// first and calls Admit only for requests inside the scope, so a write
// that no policy can match costs no admission round trip.
//
// # Consistency
//
// A request outside the scope this gateway holds is admitted here without
// asking the service. A policy added to the service's set therefore
// applies to this gateway's requests once the scope update reaches it —
// one stream message after the change, like kube-apiserver's informer-fed
// admission policies, which also apply shortly after they are created. It
// never applies later than that: while the client holds no scope (the
// stream not yet established, broken, or the service older than
// WatchScope, answering UNIMPLEMENTED) every write is sent to Admit.
//
// # Availability
//
// Admission fails closed: a write that must be admitted is not stored
// while the service cannot be asked. Admit waits for an unreachable
// service for a while (UnreachableWait) so that a restart is a delay, not
// a failure; past that the gateway answers 503 with Retry-After, since
// the write was not applied.
package admissionclient

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/follow"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// Client is an admission service client that knows the service's scope.
// It is safe for concurrent use. Run must run for InScope to ever skip a
// call: without it every request is in scope.
type Client struct {
	admissionv1.AdmissionServiceClient
	conn    *grpc.ClientConn
	log     *slog.Logger
	metrics *metrics
	// wait bounds how long Admit waits for an unreachable service.
	wait time.Duration

	// scope is the latest scope received; nil while not synced.
	scope atomic.Pointer[matcher]
}

// New returns a Client of the admission service on conn; metrics go to
// reg (nil: none).
func New(conn *grpc.ClientConn, log *slog.Logger, reg prometheus.Registerer) (*Client, error) {
	if log == nil {
		log = slog.Default()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Client{AdmissionServiceClient: admissionv1.NewAdmissionServiceClient(conn), conn: conn, log: log, metrics: m, wait: UnreachableWait}, nil
}

// InScope reports whether a request may match an admission policy and must
// be sent to Admit: always while the client holds no scope. subresource
// is empty for the main resource. A request out of scope is counted as
// skipped.
func (c *Client) InScope(op admissionv1.Operation, group, resource, subresource string) bool {
	m := c.scope.Load()
	if m == nil {
		return true
	}
	if m.covers(op, group, resource, subresource) {
		return true
	}
	c.metrics.skipped.Inc()
	return false
}

// Synced reports whether the client holds a scope from the service.
func (c *Client) Synced() bool { return c.scope.Load() != nil }

// Run follows the service's scope until ctx ends, reopening the stream
// after it breaks. Between streams the client holds no scope.
func (c *Client) Run(ctx context.Context) {
	follow.Run(ctx, follow.Config{What: "admission scope", Open: c.follow, Lost: c.unsync, Logger: c.log})
}

// follow opens one scope stream and applies every scope it receives until
// it ends. established reports whether a scope arrived.
func (c *Client) follow(ctx context.Context) (established bool, err error) {
	open := func(ctx context.Context) (grpc.ServerStreamingClient[admissionv1.WatchScopeResponse], error) {
		return c.WatchScope(ctx, &admissionv1.WatchScopeRequest{})
	}
	return follow.Receive(ctx, open, func(resp *admissionv1.WatchScopeResponse, first bool) {
		m := compile(resp.GetScope())
		c.scope.Store(m)
		c.metrics.synced.Set(1)
		if first {
			c.log.Info("admission scope synced", "everything", m.everything, "rules", len(m.rules))
		}
	})
}

func (c *Client) unsync() {
	c.scope.Store(nil)
	c.metrics.synced.Set(0)
}
