package audit

import (
	"testing"
	"time"
)

type discardSink struct{}

func (discardSink) Write([]byte) {}
func (discardSink) Close() error { return nil }

// BenchmarkMetadataEvent is the gateway's audit work for a GET at
// Metadata: the policy, the event's RequestReceived and ResponseComplete
// stages encoded (the sink discards them).
func BenchmarkMetadataEvent(b *testing.B) {
	a, err := NewAuditor(mustPolicy(b, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  users: [system:kube-proxy]\n- level: Metadata\n"), nil, nil, nil, discardSink{})
	if err != nil {
		b.Fatal(err)
	}
	attrs := resourceAttrs("alice", []string{"dev", "system:authenticated"}, "get", "", "configmaps", "", "team", "cm")
	m := Meta{AuditID: "6f1c2e4a-8a43-4b7e-9d0b-2f5c1a9e7d31", RequestURI: "/api/v1/namespaces/team/configmaps/cm", UserAgent: "kubectl/v1.32.4", SourceIPs: []string{"127.0.0.1"}}
	b.ReportAllocs()
	for b.Loop() {
		m.Received = time.Now()
		r := a.Begin(attrs, m)
		AnnotateDecision(r, true, "")
		r.ResponseHeader(200, "application/json")
		r.ResponseBody([]byte(`{"kind":"ConfigMap"}`))
		r.Complete(200)
	}
}

// BenchmarkNoPolicy is the cost with no auditor: nil checks.
func BenchmarkNoPolicy(b *testing.B) {
	var a *Auditor
	attrs := resourceAttrs("alice", nil, "get", "", "configmaps", "", "team", "cm")
	b.ReportAllocs()
	for b.Loop() {
		r := a.Begin(attrs, Meta{})
		r.ResponseHeader(200, "application/json")
		r.Complete(200)
	}
}
