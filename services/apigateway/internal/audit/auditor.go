package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Sink receives the events of an Auditor, each one JSON-encoded
// audit.k8s.io/v1 Event ending in '\n', which nothing changes once
// written: a sink may keep it. Write runs on the request's goroutine: it
// must not block for long.
type Sink interface {
	Write(event []byte)
	Close() error
}

// Auditor evaluates the policy for each request and writes its events to
// the sinks. A nil *Auditor audits nothing.
type Auditor struct {
	policy  *Policy
	sinks   []Sink
	convert Converter
	log     *slog.Logger
	metrics *metrics
	// lastErrorLog is when a sink's failure was last logged (Unix
	// seconds): at most one line a minute, however many events fail.
	lastErrorLog atomic.Int64
}

// Converter returns the JSON form of a protobuf-encoded Kubernetes
// object, for the request and response objects of events.
type Converter func(protobuf []byte) ([]byte, error)

// NewAuditor returns an auditor of policy writing to sinks; Close closes
// the sinks. convert, when not nil, records protobuf bodies (as JSON);
// without it they are left out of events. reg may be nil.
func NewAuditor(policy *Policy, convert Converter, log *slog.Logger, reg prometheus.Registerer, sinks ...Sink) (*Auditor, error) {
	if policy == nil || len(sinks) == 0 {
		return nil, errors.New("audit: an auditor needs a policy and a sink")
	}
	if log == nil {
		log = slog.Default()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	a := &Auditor{policy: policy, sinks: sinks, convert: convert, log: log, metrics: m}
	for _, s := range sinks {
		if r, ok := s.(failureReporter); ok {
			r.reportFailures(a.failed)
		}
	}
	return a, nil
}

// failureReporter is a Sink that reports events it loses (the webhook's
// full buffer, a failed write) to the auditor's metrics and log.
type failureReporter interface {
	reportFailures(failed func(plugin string, n int, err error))
}

// Begin evaluates the policy for a request and, unless its level is None,
// starts its event and writes the RequestReceived stage. Requests for
// sensitive resources (Secrets and the like, see sensitive) are audited
// at Metadata at most: their objects are never written. Begin returns nil
// when a is nil or the request is not audited.
func (a *Auditor) Begin(attrs *Attributes, m Meta) *Request {
	if a == nil {
		return nil
	}
	d := a.policy.Evaluate(attrs)
	if d.Level == auditv1.LevelNone {
		return nil
	}
	if rank(d.Level) > rank(auditv1.LevelMetadata) && sensitive(attrs) {
		d.Level = auditv1.LevelMetadata
	}
	return a.begin(attrs, d, m)
}

func (a *Auditor) write(event []byte) {
	a.metrics.events.Inc()
	for _, s := range a.sinks {
		s.Write(event)
	}
}

// failed counts and (at most once a minute) logs a failure to write
// events.
func (a *Auditor) failed(plugin string, n int, err error) {
	a.metrics.errors.WithLabelValues(plugin).Add(float64(n))
	logFailure(a.log, &a.lastErrorLog, plugin, err)
}

// logFailure logs err unless a failure was logged less than a minute
// ago (by last).
func logFailure(log *slog.Logger, last *atomic.Int64, plugin string, err error) {
	now := time.Now().Unix()
	if prev := last.Load(); now-prev < 60 || !last.CompareAndSwap(prev, now) {
		return
	}
	log.Error("audit events lost", "plugin", plugin, "error", err)
}

// Close flushes and closes the sinks.
func (a *Auditor) Close() error {
	if a == nil {
		return nil
	}
	var errs []error
	for _, s := range a.sinks {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

type ctxKey struct{}

// WithRequest returns ctx carrying r, for the code below the front end
// that adds to the event (admission's annotations).
func WithRequest(ctx context.Context, r *Request) context.Context {
	return context.WithValue(ctx, ctxKey{}, r)
}

// FromContext returns the event of ctx's request; nil when it is not
// audited.
func FromContext(ctx context.Context) *Request {
	r, _ := ctx.Value(ctxKey{}).(*Request)
	return r
}

// AddAnnotations adds annotations (admission's audit annotations) to the
// event of ctx's request, if it is audited.
func AddAnnotations(ctx context.Context, annotations map[string]string) {
	if len(annotations) == 0 {
		return
	}
	r := FromContext(ctx)
	for k, v := range annotations {
		r.AddAnnotation(k, v)
	}
}

// AnnotateDecision records the authorizer's decision on the request of r,
// as kube-apiserver's annotations: authorization.k8s.io/decision "allow"
// or "forbid", and authorization.k8s.io/reason when there is one.
func AnnotateDecision(r *Request, allowed bool, reason string) {
	if r == nil {
		return
	}
	decision := "forbid"
	if allowed {
		decision = "allow"
	}
	r.AddAnnotation(DecisionAnnotation, decision)
	if reason != "" {
		r.AddAnnotation(ReasonAnnotation, reason)
	}
}
