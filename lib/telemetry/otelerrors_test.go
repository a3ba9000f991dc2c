package telemetry

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
)

// TestOTelErrorsGoToTheLoggerRedacted: with tracing on, an error the SDK
// or the exporter reports (otel.Handle, as the batch span processor does
// when an export fails) is a record of the process's slog logger — not a
// line of Go's log package — with the values of the OTLP headers and the
// endpoint's password replaced.
func TestOTelErrorsGoToTheLoggerRedacted(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://user:pa55word@127.0.0.1:4318",
		"OTEL_EXPORTER_OTLP_HEADERS":         "authorization=Bearer%20s3cret-token,x-tenant=acme",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS":  "x-api-key=k3y-k3y",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
	}
	tr, err := tracingFrom(t.Context(), "test", logger, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(t.Context())
	otel.Handle(errors.New("export to http://user:pa55word@127.0.0.1:4318/v1/traces failed; sent authorization: Bearer s3cret-token, x-api-key: k3y-k3y"))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("logged %d lines, want 1:\n%s", len(lines), buf.String())
	}
	var rec struct {
		Level, Msg, Error string
	}
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("not a JSON slog record: %q: %v", lines[0], err)
	}
	want := "export to http://user:[REDACTED]@127.0.0.1:4318/v1/traces failed; sent authorization: [REDACTED], x-api-key: [REDACTED]"
	if rec.Level != "ERROR" || rec.Msg != "OpenTelemetry" || rec.Error != want {
		t.Fatalf("logged %+v, want level ERROR, msg OpenTelemetry, error %q", rec, want)
	}
}

// TestRedactingHandler: secrets are replaced in the message, in string,
// error and group values, and in attributes added with With.
func TestRedactingHandler(t *testing.T) {
	var buf bytes.Buffer
	h := redactingHandler{next: slog.NewTextHandler(&buf, nil), secrets: strings.NewReplacer(secretsOf(func(k string) string {
		if k == "OTEL_EXPORTER_OTLP_HEADERS" {
			return "api-key=t0ps3cret"
		}
		return ""
	})...)}
	slog.New(h).With("cfg", "key t0ps3cret").Info("sending t0ps3cret", "err", errors.New("bad t0ps3cret"), slog.Group("g", "h", "t0ps3cret"), "n", 3)
	got := buf.String()
	if strings.Contains(got, "t0ps3cret") || strings.Count(got, redacted) != 4 || !strings.Contains(got, "n=3") {
		t.Fatalf("logged %q", got)
	}
}
