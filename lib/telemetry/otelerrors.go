package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
)

// routeOTelErrors sends what the OpenTelemetry SDK and its exporters
// report — the errors they hand to otel.Handle (a failed export, a full
// queue) and the messages of their internal logr logger — to logger,
// instead of Go's log package (the SDK's default), with the secrets of
// the OTLP configuration redacted (see secretsOf).
//
// This is the one piece of global mutable state the package sets: the
// OpenTelemetry API offers no other way to receive these errors than its
// global error handler and logger (otel.SetErrorHandler, otel.SetLogger).
// The process sets them once, where it sets up its trace pipeline
// (TracingFromEnv).
func routeOTelErrors(logger *slog.Logger, getenv func(string) string) {
	l := slog.New(redactingHandler{next: logger.Handler(), secrets: strings.NewReplacer(secretsOf(getenv)...)})
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		l.Error("OpenTelemetry", "error", err)
	}))
	otel.SetLogger(logr.FromSlogHandler(l.Handler()))
}

// redacted replaces a secret in what is logged.
const redacted = "[REDACTED]"

// secretsOf returns strings.NewReplacer pairs that replace the secrets
// of the OTLP exporter configuration: the values of
// OTEL_EXPORTER_OTLP_HEADERS and OTEL_EXPORTER_OTLP_TRACES_HEADERS
// (key=value pairs, values URL-encoded; typically an Authorization
// header or an API key) as written and decoded, and the passwords of the
// endpoints' URLs.
func secretsOf(getenv func(string) string) []string {
	var pairs []string
	add := func(s string) {
		if s = strings.TrimSpace(s); s != "" {
			pairs = append(pairs, s, redacted)
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		for kv := range strings.SplitSeq(getenv(name), ",") {
			_, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			add(v)
			if dec, err := url.PathUnescape(v); err == nil {
				add(dec)
			}
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if u, err := url.Parse(getenv(name)); err == nil && u.User != nil {
			if p, ok := u.User.Password(); ok {
				add(p)
			}
		}
	}
	return pairs
}

// redactingHandler is a slog.Handler that replaces secrets in the
// message and in every string, error or other value it logs, then passes
// the record on.
type redactingHandler struct {
	next    slog.Handler
	secrets *strings.Replacer
}

func (h redactingHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.secrets.Replace(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = h.attr(a)
	}
	return redactingHandler{next: h.next.WithAttrs(clean), secrets: h.secrets}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{next: h.next.WithGroup(name), secrets: h.secrets}
}

// attr returns a with its value redacted: strings and groups member by
// member, anything else but numbers, booleans and times as its text.
func (h redactingHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.secrets.Replace(v.String()))
	case slog.KindAny:
		return slog.String(a.Key, h.secrets.Replace(fmt.Sprint(v.Any())))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, m := range g {
			clean[i] = h.attr(m)
		}
		return slog.Group(a.Key, clean...)
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
}
