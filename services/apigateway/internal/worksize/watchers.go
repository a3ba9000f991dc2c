package worksize

import (
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/runtime/schema"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// Estimates of a write's watch notifications, as kube-apiserver's
// mutating work estimator's defaults.
const (
	// WatchesPerSeat is how many watchers' notifications cost a seat.
	WatchesPerSeat = 10
	// MaxMutatingSeats caps the seats a write is charged for its
	// notifications.
	MaxMutatingSeats = 10
	// EventAdditionalDuration is how long one seat of notifications
	// lasts after the write.
	EventAdditionalDuration = 5 * time.Millisecond
)

// watchKey is a resource's watches of one namespace ("" for watches of
// every namespace, or of a cluster-scoped resource).
type watchKey struct {
	gr        schema.GroupResource
	namespace string
}

// Watching counts a watch of gr in namespace (all namespaces when "")
// served by this gateway until the returned func is called (once).
func (t *Tracker) Watching(gr schema.GroupResource, namespace string) func() {
	if t == nil {
		return func() {}
	}
	k := watchKey{gr, namespace}
	t.mu.Lock()
	t.watches[k]++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		if t.watches[k]--; t.watches[k] <= 0 {
			delete(t.watches, k)
		}
		t.mu.Unlock()
	}
}

// Watchers returns how many watches a change of an object of gr in
// namespace is sent to: those of the namespace and those of every
// namespace, as kube-apiserver's watch tracker counts them (a watch's
// selectors are not looked at).
func (t *Tracker) Watchers(gr schema.GroupResource, namespace string) int {
	if t == nil {
		return 0
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := t.watches[watchKey{gr, ""}]
	if namespace != "" {
		n += t.watches[watchKey{gr, namespace}]
	}
	return n
}

// MutatingWork returns what a write (create, update, patch, delete) of
// an object of gr in namespace costs for the watch notifications it
// causes, as kube-apiserver's mutating work estimator: nothing below
// WatchesPerSeat watchers; else ceil(watchers / WatchesPerSeat) seats for
// EventAdditionalDuration each, reshaped to at most MaxMutatingSeats
// seats held that much longer (same seat-seconds). The write holds
// finalSeats while it runs and for additionalLatency after it ends. A
// TokenRequest (serviceaccounts/token) causes no event.
func (t *Tracker) MutatingWork(gr schema.GroupResource, subresource, namespace string) (finalSeats uint32, additionalLatency time.Duration) {
	if gr == (schema.GroupResource{Resource: "serviceaccounts"}) && subresource == "token" {
		return 0, 0
	}
	watchers := t.Watchers(gr, namespace)
	if watchers < WatchesPerSeat {
		return 0, 0
	}
	seats := math.Ceil(float64(watchers) / WatchesPerSeat)
	work := seats * float64(EventAdditionalDuration)
	capped := min(seats, MaxMutatingSeats)
	return uint32(capped), time.Duration(work / capped)
}

// EstimateWrite sets the final seats and additional latency of d when it
// is a write (create, update, patch, delete) whose notifications cost
// any (MutatingWork); it leaves any other request as it is. Both front
// doors (REST and gRPC) estimate with it.
func (t *Tracker) EstimateWrite(d *flowcontrolv1.RequestDigest) {
	switch d.GetVerb() {
	case "create", "update", "patch", "delete":
	default:
		return
	}
	seats, latency := t.MutatingWork(schema.GroupResource{Group: d.GetApiGroup(), Resource: d.GetResource()}, d.GetSubresource(), d.GetNamespace())
	if seats > 0 {
		d.FinalSeats, d.AdditionalLatency = seats, durationpb.New(latency)
	}
}
