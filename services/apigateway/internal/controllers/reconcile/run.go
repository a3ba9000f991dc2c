package reconcile

import (
	"context"
	"log/slog"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
	"k8s.io/apimachinery/pkg/runtime"
)

// Loop configures Run: the controller of the objects of one resource.
// Every field is required but Logger.
type Loop struct {
	// Store holds the objects.
	Store storewatch.Store
	// Codec decodes them.
	Codec *codec.Codec
	// Resource is their resource; Run follows its keys, KeyPrefix("").
	Resource *registry.Resource
	// What names the objects in logs ("ClusterRoles to aggregate").
	What string
	// User is whom every write of sync is made as.
	User identity.User
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Retry is how soon sync runs again while it reports work left, and
	// how long a failed watch waits before the objects are read again.
	Retry time.Duration
}

// Run keeps the objects of l.Resource in line until ctx ends: it reads
// them (decoded with l.Codec into what newObj returns, by name), follows
// their changes with one store watch, and calls sync with them after
// every batch the watch delivers. Its contract:
//
//   - ordering: batches are applied in the store's order, and sync sees
//     the objects as of the revision of the last batch; a new read (after
//     a failed watch) replaces every object. An object that does not
//     decode is logged and left out.
//   - one goroutine: apply and sync run on the caller's goroutine, one at
//     a time, so sync's map is not shared and needs no lock; sync may
//     make writes, which the watch then reports as changes.
//   - retries: while sync returns false (work left: a write failed, or
//     must wait), it runs again every l.Retry even without a change; a
//     failed watch is replaced by a new read after l.Retry, and sync keeps
//     the objects last read meanwhile.
//   - identity: sync's ctx carries l.User (identity.WithUser).
//   - shutdown: Run returns once ctx ends and the watch's goroutine has
//     stopped; sync is not called after it returns.
func Run[T runtime.Object](ctx context.Context, l Loop, newObj func() T, sync func(ctx context.Context, objects map[string]T) bool) {
	log := l.Logger
	if log == nil {
		log = slog.Default()
	}
	prefix := l.Resource.KeyPrefix("")
	index := storewatch.NewIndex(prefix, func(value []byte, rev int64) (T, error) {
		obj := newObj()
		return obj, l.Codec.DecodeStorage(value, rev, obj)
	}, log)
	storewatch.Reconcile(identity.WithUser(ctx, l.User), storewatch.Config{
		Store: l.Store, Prefix: prefix, What: l.What, Logger: log, Retry: l.Retry,
	}, l.Retry, index.Apply, func(ctx context.Context) bool { return sync(ctx, index.Objects) })
}
