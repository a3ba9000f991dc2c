package worksize

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// TestMutatingWork: a write is charged for its watch notifications as
// kube-apiserver's mutating work estimator charges it — nothing below 10
// watchers, then a seat per 10 watchers for 5ms each, at most 10 seats
// held longer — counting the watches of its namespace and of every
// namespace, while they are open; TokenRequests are never charged.
func TestMutatingWork(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	tr := NewTracker(nil, nil, 0, nil)
	watch := func(gr schema.GroupResource, ns string, n int) []func() {
		var stops []func()
		for range n {
			stops = append(stops, tr.Watching(gr, ns))
		}
		return stops
	}
	check := func(what, ns string, wantSeats uint32, wantLatency time.Duration) {
		t.Helper()
		seats, latency := tr.MutatingWork(cm, "", ns)
		if seats != wantSeats || latency != wantLatency {
			t.Fatalf("%s: %d seats for %s more, want %d for %s", what, seats, latency, wantSeats, wantLatency)
		}
	}
	check("no watchers", "demo", 0, 0)
	nine := watch(cm, "demo", 9)
	check("9 watchers", "demo", 0, 0)
	one := watch(cm, "", 1)
	check("9 of the namespace and 1 of every namespace", "demo", 1, 5*time.Millisecond)
	check("another namespace sees the cluster-wide one only", "other", 0, 0)
	watch(schema.GroupResource{Resource: "secrets"}, "demo", 50)
	check("watches of another resource do not count", "demo", 1, 5*time.Millisecond)
	many := watch(cm, "demo", 90)
	check("100 watchers", "demo", 10, 5*time.Millisecond)
	watch(cm, "", 150)
	check("250 watchers: 25 seats of work reshaped to 10", "demo", 10, 25*5*time.Millisecond/10)
	if s, l := tr.MutatingWork(schema.GroupResource{Resource: "serviceaccounts"}, "token", "demo"); s != 0 || l != 0 {
		t.Fatalf("a TokenRequest is charged %d seats, %s", s, l)
	}

	for _, stop := range append(append(nine, one...), many...) {
		stop()
	}
	if n := tr.Watchers(cm, "demo"); n != 150 {
		t.Fatalf("after 100 watches ended, %d watchers, want the 150 cluster-wide ones", n)
	}

	d := &flowcontrolv1.RequestDigest{Verb: "create", Resource: "configmaps", Namespace: "demo"}
	tr.EstimateWrite(d)
	if d.GetFinalSeats() != 10 || d.GetAdditionalLatency().AsDuration() != 15*5*time.Millisecond/10 {
		t.Fatalf("create with 150 watchers: %d seats, %s", d.GetFinalSeats(), d.GetAdditionalLatency().AsDuration())
	}
	get := &flowcontrolv1.RequestDigest{Verb: "get", Resource: "configmaps", Namespace: "demo"}
	tr.EstimateWrite(get)
	if get.GetFinalSeats() != 0 || get.GetAdditionalLatency() != nil {
		t.Fatalf("a get is charged for notifications: %v", get)
	}
	var none *Tracker
	none.EstimateWrite(d) // no tracker: no panic
}
