package distributed

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// otlpReceiver is an OTLP/gRPC trace receiver in the test: what a
// collector would be to the processes, keeping every span they export.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []receivedSpan
}

// receivedSpan is what the tests check of an exported span.
type receivedSpan struct {
	service, name            string
	trace, id, parent, scope string
}

func (s receivedSpan) String() string {
	return fmt.Sprintf("%s/%s [%s] span %s parent %s", s.service, s.name, s.scope, s.id, s.parent)
}

// startOTLPReceiver serves an OTLP trace receiver on a loopback port until
// the test ends.
func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r
}

// Env is the environment that makes a meridian process export its spans
// here, every request sampled, in batches sent within 100ms.
func (r *otlpReceiver) Env() []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + r.addr,
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_TRACES_SAMPLER=parentbased_always_on",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}
}

// Export keeps the spans of req.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{
					service: service, name: s.GetName(), scope: ss.GetScope().GetName(),
					trace: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()), parent: hex.EncodeToString(s.GetParentSpanId()),
				})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (r *otlpReceiver) Spans() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

// crossProcessCreate checks, in spans, a trace of a ConfigMap create
// whose spans cross processes with the right parents: the gateway's
// server span, under it the store's gRPC server span in a store process,
// the proposal under that, the raft log append (fsync) and the apply
// under the proposal, and the watch tier's fan-out, in a watchfanout
// process, under the apply.
func crossProcessCreate(spans []receivedSpan) error {
	byID := map[string]receivedSpan{}
	for _, s := range spans {
		byID[s.trace+s.id] = s
	}
	parentOf := func(s receivedSpan) (receivedSpan, bool) {
		p, ok := byID[s.trace+s.parent]
		return p, ok
	}
	var problems []string
	for _, f := range spans {
		if f.name != "watchfanout.fanout" || f.service != "watchfanout" {
			continue
		}
		apply, ok := parentOf(f)
		if !ok || apply.name != "store.apply" || apply.service != "store" {
			problems = append(problems, fmt.Sprintf("%v: parent %v is not a store's store.apply", f, apply))
			continue
		}
		propose, ok := parentOf(apply)
		if !ok || propose.name != "store.propose" {
			problems = append(problems, fmt.Sprintf("%v: parent %v is not store.propose", apply, propose))
			continue
		}
		wal := false
		for _, s := range spans {
			wal = wal || s.name == "store.wal.append" && s.trace == propose.trace && s.parent == propose.id
		}
		storeServer, ok := parentOf(propose)
		if !ok || storeServer.service != "store" || !strings.HasPrefix(storeServer.name, "meridian.store.v1.KVService/") {
			problems = append(problems, fmt.Sprintf("%v: parent %v is not the store's gRPC server span", propose, storeServer))
			continue
		}
		// The gateway's client span, possibly through a follower's
		// forwarding, leads up to the gateway's server span.
		s, found := storeServer, false
		for hops := 0; hops < 6; hops++ {
			p, ok := parentOf(s)
			if !ok {
				break
			}
			if p.service == "apigateway" && p.name == "POST configmaps" {
				found = true
				break
			}
			s = p
		}
		if !found {
			problems = append(problems, fmt.Sprintf("%v: no apigateway \"POST configmaps\" span above it", storeServer))
			continue
		}
		if !wal {
			problems = append(problems, fmt.Sprintf("%v: no store.wal.append under it", propose))
			continue
		}
		return nil
	}
	if len(problems) == 0 {
		problems = append(problems, fmt.Sprintf("no watchfanout.fanout span among %d spans", len(spans)))
	}
	return fmt.Errorf("no create trace crosses gateway, store and watchfanout:\n  %s", strings.Join(problems, "\n  "))
}
