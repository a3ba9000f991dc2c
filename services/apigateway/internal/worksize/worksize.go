// Package worksize estimates how many seats a request takes in flow
// control, as kube-apiserver's list work estimator does: a LIST costs a
// seat per 100 objects it will process, at least 1 and at most 10, from
// each resource's object count, which a Tracker reads from the store
// every minute (kube-apiserver's object count tracker does the same).
// A write is charged for the watch notifications it causes, from the
// number of watches of its resource this gateway serves, as
// kube-apiserver's mutating work estimator (watchers.go). Every other
// request takes one seat.
package worksize

import (
	"context"
	"log/slog"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/kube/registry"
)

// Estimates, as kube-apiserver's defaults.
const (
	// ObjectsPerSeat is how many objects a LIST processes per seat.
	ObjectsPerSeat = 100
	// MaxListSeats caps a LIST's seats (the service also caps a
	// request's width at its priority level's seats).
	MaxListSeats = 10
	// DefaultInterval is how often the counts are read.
	DefaultInterval = time.Minute
)

// Counter counts the keys under a prefix. *storage.Store implements it.
type Counter interface {
	Count(ctx context.Context, prefix string) (int64, error)
}

// Tracker keeps each served resource's object count. The zero count of
// a resource not read yet (or whose last read failed) makes its LISTs
// one seat, as kube-apiserver treats a count it does not know.
type Tracker struct {
	reg      *registry.Registry
	counter  Counter
	interval time.Duration
	log      *slog.Logger

	mu     sync.RWMutex
	counts map[schema.GroupVersionResource]int64
	// watches are the watches this gateway serves, by resource and
	// namespace (watchers.go).
	watches map[watchKey]int
}

// NewTracker returns a Tracker of reg's resources; interval 0 means
// DefaultInterval.
func NewTracker(reg *registry.Registry, counter Counter, interval time.Duration, log *slog.Logger) *Tracker {
	if interval == 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = slog.Default()
	}
	return &Tracker{reg: reg, counter: counter, interval: interval, log: log, counts: map[schema.GroupVersionResource]int64{}, watches: map[watchKey]int{}}
}

// Run reads the counts at once and every interval until ctx ends.
func (t *Tracker) Run(ctx context.Context) {
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		t.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Refresh reads every resource's count once.
func (t *Tracker) Refresh(ctx context.Context) {
	for _, gv := range t.reg.GroupVersions() {
		for _, res := range t.reg.Resources(gv) {
			n, err := t.counter.Count(ctx, res.KeyPrefix(""))
			if err != nil {
				if ctx.Err() == nil {
					t.log.Debug("object count: reading failed; its lists count one seat", "resource", res.GVR.String(), "error", err)
				}
				n = 0
			}
			t.mu.Lock()
			t.counts[res.GVR] = n
			t.mu.Unlock()
		}
	}
}

// Count returns the last count of gvr's objects.
func (t *Tracker) Count(gvr schema.GroupVersionResource) int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.counts[gvr]
}

// ListSeats returns the seats of a LIST of gvr with query (its URL
// parameters) that names one object when single is true (a name in the
// path or a metadata.name field selector). As kube-apiserver: a list the
// cache serves (here watchfanout: every list but resourceVersionMatch=Exact)
// processes every object of the resource; one from the store processes
// twice its limit, or every object plus its limit with a selector.
func (t *Tracker) ListSeats(gvr schema.GroupVersionResource, query url.Values, single bool) uint32 {
	if t == nil {
		return 1
	}
	stored := t.Count(gvr)
	limit := stored
	var opts metav1.ListOptions
	if err := metav1.Convert_url_Values_To_v1_ListOptions(&query, &opts, nil); err != nil {
		return MaxListSeats // destined to fail validation; as kube-apiserver
	}
	if opts.Limit > 0 && opts.Limit < stored {
		limit = opts.Limit
	}
	single = single || strings.HasPrefix(opts.FieldSelector, "metadata.name=") && !strings.Contains(opts.FieldSelector, ",")
	var objects int64
	switch {
	case single:
		objects = 1
	case opts.ResourceVersionMatch != metav1.ResourceVersionMatchExact:
		objects = stored
	case opts.FieldSelector != "" || opts.LabelSelector != "":
		objects = stored + limit
	default:
		objects = 2 * limit
	}
	seats := math.Ceil(float64(objects) / ObjectsPerSeat)
	return uint32(min(max(seats, 1), MaxListSeats))
}
