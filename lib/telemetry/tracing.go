package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing is a process's trace pipeline: the tracer provider the gRPC
// servers and the API's HTTP handler start spans with, and how to flush
// and stop it.
type Tracing struct {
	// Provider starts spans; a no-op provider when tracing is off.
	Provider trace.TracerProvider
	shutdown func(context.Context) error
}

// Enabled reports whether spans are recorded and exported.
func (t *Tracing) Enabled() bool { return t != nil && t.shutdown != nil }

// Shutdown exports the spans still buffered and stops the exporter;
// bounded by ctx. Safe on a nil or disabled Tracing.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	if err := t.shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: tracing shutdown: %w", err)
	}
	return nil
}

// TracingFromEnv sets up tracing from the standard OpenTelemetry
// environment variables (the OpenTelemetry SDK configuration
// specification), for the service named service (the default of
// service.name; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override
// it):
//
//   - off (a no-op provider, no exporter, no collector needed) unless
//     OTEL_TRACES_EXPORTER is "otlp" or OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; OTEL_TRACES_EXPORTER=none
//     and OTEL_SDK_DISABLED=true turn it off whatever else is set;
//   - the OTLP exporter speaks OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
//     OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" or "http/protobuf" (the
//     default, as the specification says); the exporters read the other
//     OTEL_EXPORTER_OTLP_* variables (endpoint, headers, TLS, timeout)
//     themselves;
//   - the sampler is OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG
//     (e.g. parentbased_traceidratio with 0.01), read by the SDK; the
//     default is parentbased_always_on.
//
// Spans are batched (OTEL_BSP_* tune the batch). With tracing on, what
// the SDK and the exporter report (a failed export, say) is logged to
// logger, with the OTLP headers' values and endpoint passwords redacted;
// this sets OpenTelemetry's global error handler and logger (see
// routeOTelErrors).
func TracingFromEnv(ctx context.Context, service string, logger *slog.Logger) (*Tracing, error) {
	return tracingFrom(ctx, service, logger, os.Getenv)
}

func tracingFrom(ctx context.Context, service string, logger *slog.Logger, getenv func(string) string) (*Tracing, error) {
	off := &Tracing{Provider: noop.NewTracerProvider()}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return off, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return off, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return off, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exp)
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	routeOTelErrors(logger, getenv)
	var exporter sdktrace.SpanExporter
	var err error
	switch proto {
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	case "http/protobuf", "":
		exporter, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: OTLP protocol %q: want grpc or http/protobuf", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	tp, err := NewTracerProvider(ctx, service, sdktrace.WithBatcher(exporter))
	if err != nil {
		return nil, errors.Join(err, exporter.Shutdown(ctx))
	}
	return &Tracing{Provider: tp, shutdown: tp.Shutdown}, nil
}

// NewTracerProvider returns an SDK tracer provider for service with the
// sampler of OTEL_TRACES_SAMPLER (see TracingFromEnv) and opts (the span
// processors: an exporter's batcher, or in tests a synchronous in-memory
// exporter). The caller shuts it down.
func NewTracerProvider(ctx context.Context, service string, opts ...sdktrace.TracerProviderOption) (*sdktrace.TracerProvider, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: trace resource: %w", err)
	}
	return sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithResource(res)}, opts...)...), nil
}

// Propagator is the trace context propagation every meridian server and
// client uses: W3C traceparent/tracestate and baggage, which kubectl and
// client-go send. Passed explicitly, never set globally.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// TracerProvider returns tp, or a no-op provider when tp is nil: the
// value a component's optional TracerProvider setting stands for.
func TracerProvider(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return noop.NewTracerProvider()
	}
	return tp
}
