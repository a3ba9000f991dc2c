// Package cache is watchfanout's watch cache: it follows the store's watch
// stream over /registry/, keeps per-resource current state and a bounded
// event history, and fans each event out to the registered watchers,
// encoding it at most once per wire format.
//
// # Objects
//
// The cache keeps each object as the store holds it (with its
// resourceVersion filled in), not decoded: protobuf frames, lists and
// gets are written from those bytes, byte for byte what decoding and
// encoding give, and nothing is kept per protobuf frame; the object is
// decoded only for JSON and Table frames (encoded once per event and
// format), JSON reads and selectors on a kind's own fields. See object.
//
// # Revisions
//
// The cache's revision is the store revision up to which every event has
// been applied (the "complete" revision). Events are dispatched as soon as
// they arrive; the complete revision advances with the next batch of a
// later revision or with a progress notification, because the store may
// split the events of one revision over several responses. Bookmarks,
// list revisions and consistent reads use the complete revision only.
//
// # Start and re-list
//
// On start the cache lists the store at an old revision (the compacted
// revision, at most StartupReplay revisions back) and replays the store's
// history from there, so that its own history covers what the store still
// has: a client of a restarted replica that re-watches from its last
// resourceVersion loses nothing. When the store watch fails because the
// cache fell behind compaction, the cache lists at the current revision,
// replaces every resource's state and terminates their watchers (ErrReset).
package cache

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/telemetry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Prefix is the store key prefix the cache follows.
const Prefix = "/registry/"

// Defaults of Options fields.
const (
	DefaultHistoryWindow    = 5 * time.Minute
	DefaultHistoryMaxEvents = 10000
	DefaultWatcherBuffer    = 1000
	DefaultBookmarkInterval = time.Minute
	DefaultMaxSnapshots     = 32
	DefaultFrameRetention   = time.Minute
	DefaultStartupReplay    = 10000
	DefaultListPageSize     = 1000
)

// Options configure a Cache. The zero value of each field means its
// default.
type Options struct {
	// Registry lists the served resources; keys of other resources are
	// ignored. Required.
	Registry *registry.Registry
	// Codec decodes stored objects and encodes frames. Required.
	Codec *codec.Codec
	// HistoryWindow is how long events stay in the history; default 5m.
	HistoryWindow time.Duration
	// HistoryMaxEvents caps the history of each resource; default 10000.
	HistoryMaxEvents int
	// WatcherBuffer is how many events may wait for one watcher before it
	// is terminated (ErrTooSlow); default 1000.
	WatcherBuffer int
	// BookmarkInterval is the period of bookmarks to watchers that allow
	// them; default 1m.
	BookmarkInterval time.Duration
	// SnapshotTTL is how long a list snapshot is kept for continue tokens
	// after its last use; default HistoryWindow.
	SnapshotTTL time.Duration
	// FrameRetention is how long the encoded frames of an event (and the
	// JSON a list copies from them) are kept while no watcher or list
	// reads them: unread for a whole period, they are dropped and encoded
	// again when next asked for. Default 1m.
	FrameRetention time.Duration
	// MaxSnapshots caps the kept snapshots per resource; default 32.
	MaxSnapshots int
	// StartupReplay is how many revisions of store history the cache
	// replays on start (bounded by the store's compaction); default 10000.
	StartupReplay int64
	// ListPageSize is the page size of lists from the store; default 1000.
	ListPageSize int64
	// Decrypter decrypts stored values (encryption at rest); nil: values
	// are stored as they are.
	Decrypter Decrypter
	// ConsistentRevision reads the store's current revision linearizably
	// in this process (the store's App.ConsistentRevision, in the
	// all-in-one); nil: ConsistentRev reads it with a Range over the
	// store connection.
	ConsistentRevision func(context.Context) (int64, error)
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// TracerProvider records a "watchfanout.fanout" span (decode and
	// dispatch to the watchers' queues) for every event of a traced
	// write (storev1.Event.traceparent), in the write's trace; nil: none.
	TracerProvider trace.TracerProvider
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem of o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Registry == nil {
		errs = append(errs, errors.New("Registry is required"))
	}
	if o.Codec == nil {
		errs = append(errs, errors.New("Codec is required"))
	}
	for name, d := range map[string]time.Duration{"HistoryWindow": o.HistoryWindow, "BookmarkInterval": o.BookmarkInterval, "SnapshotTTL": o.SnapshotTTL, "FrameRetention": o.FrameRetention} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", name, d))
		}
	}
	for name, n := range map[string]int64{"HistoryMaxEvents": int64(o.HistoryMaxEvents), "WatcherBuffer": int64(o.WatcherBuffer), "MaxSnapshots": int64(o.MaxSnapshots), "StartupReplay": o.StartupReplay, "ListPageSize": o.ListPageSize} {
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s %d is negative", name, n))
		}
	}
	return errors.Join(errs...)
}

// EnsureDefaults fills in zero fields.
func (o *Options) EnsureDefaults() {
	o.HistoryWindow = cmp.Or(o.HistoryWindow, DefaultHistoryWindow)
	o.HistoryMaxEvents = cmp.Or(o.HistoryMaxEvents, DefaultHistoryMaxEvents)
	o.WatcherBuffer = cmp.Or(o.WatcherBuffer, DefaultWatcherBuffer)
	o.BookmarkInterval = cmp.Or(o.BookmarkInterval, DefaultBookmarkInterval)
	o.SnapshotTTL = cmp.Or(o.SnapshotTTL, o.HistoryWindow)
	o.MaxSnapshots = cmp.Or(o.MaxSnapshots, DefaultMaxSnapshots)
	o.FrameRetention = cmp.Or(o.FrameRetention, DefaultFrameRetention)
	o.StartupReplay = cmp.Or(o.StartupReplay, DefaultStartupReplay)
	o.ListPageSize = cmp.Or(o.ListPageSize, DefaultListPageSize)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Decrypter decrypts the values the store holds. *storagecrypt.Transformer
// implements it.
type Decrypter interface {
	// Decrypt returns the plain value of what is stored under key.
	Decrypt(ctx context.Context, key string, stored []byte) (plain []byte, stale bool, err error)
}

// Cache is the watch cache of every served resource. Run follows the
// store; everything else is safe for concurrent use.
type Cache struct {
	opts   Options
	kv     storev1.KVServiceClient
	wc     storev1.WatchServiceClient
	m      *metrics
	logger *slog.Logger

	// set is the served resources (resourceset.go); builtin the
	// built-in ones, in it from the start.
	set     atomic.Pointer[resourceSet]
	builtin []*Resource
	// crds are the CRDs followed, by store key (custom.go); crdPrefix
	// is their key prefix, "" when the registry serves no CRDs. Used by
	// Run's goroutine only.
	crds      map[string]*crdEntry
	crdPrefix string

	synced   chan struct{}
	syncOnce sync.Once

	// revMu guards rev and revCh. Never held while taking a Resource's mu.
	revMu sync.Mutex
	rev   int64
	revCh chan struct{} // closed and replaced whenever rev advances

	// streamMu guards stream and progressPending.
	streamMu        sync.Mutex
	stream          storev1.WatchService_WatchClient
	progressPending bool

	fetch revFetcher

	// scratch is newObject's buffer; used by Run's goroutine only.
	scratch []byte
}

// New returns a cache reading the store over conn. It does not contact the
// store until Run.
func New(opts Options, conn grpc.ClientConnInterface) (*Cache, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("cache: invalid options: %w", err)
	}
	opts.EnsureDefaults()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("cache: metrics: %w", err)
	}
	c := &Cache{
		opts: opts, kv: storev1.NewKVServiceClient(conn), m: m, logger: opts.Logger,
		// The watch goes through resumeFilter, which keeps a resumed watch
		// from delivering the same events twice.
		wc:     storev1.NewWatchServiceClient(&resumeFilter{ClientConnInterface: conn}),
		crds:   map[string]*crdEntry{},
		synced: make(chan struct{}), revCh: make(chan struct{}),
	}
	c.fetch.read = opts.ConsistentRevision
	if c.fetch.read == nil {
		c.fetch.read = rangeRev(c.kv)
	}
	for _, gv := range opts.Registry.GroupVersions() {
		for _, res := range opts.Registry.Resources(gv) {
			if res.Custom != nil {
				continue // the cache follows the CRDs itself (custom.go)
			}
			c.builtin = append(c.builtin, newResource(res, newEncoders(opts.Codec, res, nil), &c.opts, m.forResource(res.GVR.Group, res.GVR.Version, res.GVR.Resource)))
		}
	}
	if res, ok := opts.Registry.Lookup(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")); ok {
		c.crdPrefix = res.KeyPrefix("")
	}
	c.set.Store(newResourceSet(c.builtin, nil))
	return c, nil
}

// Resource returns the cache of one resource: a built-in one, or a
// version of an established CRD the cache has seen in its store watch.
func (c *Cache) Resource(gvr schema.GroupVersionResource) (*Resource, bool) {
	r, ok := c.set.Load().byGVR[gvr]
	return r, ok
}

// Synced is closed once the cache has caught up with the store's revision
// at start.
func (c *Cache) Synced() <-chan struct{} { return c.synced }

// Rev returns the cache's complete revision.
func (c *Cache) Rev() int64 {
	c.revMu.Lock()
	defer c.revMu.Unlock()
	return c.rev
}

// setRev publishes rev as the complete revision (it may go back only in a
// startup list) and advances every resource.
func (c *Cache) setRev(rev int64) {
	now := time.Now()
	for _, r := range c.set.Load().all {
		r.advance(rev, now)
	}
	c.revMu.Lock()
	if rev != c.rev {
		c.rev = rev
		close(c.revCh)
		c.revCh = make(chan struct{})
	}
	c.revMu.Unlock()
	c.m.revision.Set(float64(rev))
}

// WaitForRev waits until the cache has applied every event up to rev, or
// ctx ends. It asks the store for progress notifications while it waits.
func (c *Cache) WaitForRev(ctx context.Context, rev int64) error {
	// The ticker only once there is a wait: in a relist storm thousands of
	// watches find the cache there already.
	var retry *time.Ticker
	for {
		c.revMu.Lock()
		cur, ch := c.rev, c.revCh
		c.revMu.Unlock()
		if cur >= rev {
			return nil
		}
		if retry == nil {
			retry = time.NewTicker(100 * time.Millisecond)
			defer retry.Stop()
		}
		c.requestProgress(false)
		select {
		case <-ch:
		case <-retry.C:
			c.requestProgress(true)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// requestProgress asks the store for a progress notification, unless one
// is pending (force asks again).
func (c *Cache) requestProgress(force bool) {
	c.streamMu.Lock()
	defer c.streamMu.Unlock()
	if c.stream == nil || (c.progressPending && !force) {
		return
	}
	c.progressPending = true
	if err := c.stream.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_ProgressRequest{ProgressRequest: &storev1.WatchProgressRequest{}}}); err != nil {
		c.logger.Debug("watch progress request failed", "err", err)
	}
}

// Run follows the store until ctx ends: it lists, watches, reconnects
// after errors (from the revision it reached) and re-lists after
// compaction. It returns nil when ctx ends.
func (c *Cache) Run(ctx context.Context) error {
	go c.bookmarks(ctx)
	go c.dropUnreadFrames(ctx)
	needList, startup := true, true
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		var err error
		if needList {
			if err = c.list(ctx, startup); err == nil {
				needList, startup = false, false
			}
		}
		if err == nil {
			began := time.Now()
			err = c.follow(ctx)
			if time.Since(began) > 2*time.Second {
				// It was following: the next interruption starts over
				// with a short wait.
				backoff = 50 * time.Millisecond
			}
		}
		if ctx.Err() != nil {
			break
		}
		if isCompacted(err) {
			// Startup lists at an old revision: a compaction in between is
			// retried the same way; later ones re-list at the current one.
			needList = true
			backoff = 50 * time.Millisecond
		}
		c.logger.Warn("store watch interrupted; resuming", "err", err, "rev", c.Rev(), "relist", needList)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	for _, r := range c.set.Load().all {
		r.closeWatchers(ErrClosed)
	}
	return nil
}

func isCompacted(err error) bool {
	var ce *compactedErr
	return errors.As(err, &ce) || status.Code(err) == codes.OutOfRange
}

type compactedErr struct{ rev int64 }

func (e *compactedErr) Error() string {
	return fmt.Sprintf("cache: store watch compacted at %d", e.rev)
}

// list reads the whole /registry/ prefix at one revision and replaces every
// resource's state with it.
func (c *Cache) list(ctx context.Context, startup bool) error {
	head, err := c.kv.Range(ctx, &storev1.RangeRequest{Key: []byte(Prefix)})
	if err != nil {
		return fmt.Errorf("cache: read store revision: %w", err)
	}
	cur, compacted := head.GetHeader().GetRevision(), head.GetHeader().GetCompactRevision()
	at := cur
	if startup {
		at = max(compacted, cur-c.opts.StartupReplay, 1)
		if at > cur {
			at = cur
		}
	}
	// The CRDs first: the objects of their resources are in the list too.
	crds, err := c.readCRDs(ctx, at)
	if err != nil {
		return err
	}
	c.setCRDs(crds)
	set := c.set.Load()
	trees := map[*Resource]*tree{}
	for _, r := range set.all {
		trees[r] = btree.NewG(32, lessEvent)
	}
	n, err := c.scan(ctx, Prefix, at, func(kv *storev1.KeyValue) error {
		c.insert(ctx, set.forKey(string(kv.GetKey())), kv, trees)
		return nil
	})
	if err != nil {
		return err
	}
	for r, t := range trees {
		r.reset(t, at)
	}
	c.setRev(at)
	c.m.relists.Inc()
	c.logger.Info("listed the store", "rev", at, "store_rev", cur, "compacted", compacted, "objects", n, "startup", startup)
	c.syncTarget(cur)
	return nil
}

// insert adds a listed value to the trees of rs, the resources stored
// under its key (none: it is not served).
func (c *Cache) insert(ctx context.Context, rs []*Resource, kv *storev1.KeyValue, trees map[*Resource]*tree) {
	key, rev := string(kv.GetKey()), kv.GetModRevision()
	objs := c.newObjects(ctx, rs, kv)
	for i, r := range rs {
		if objs[i] == nil {
			continue
		}
		trees[r].ReplaceOrInsert(&Event{Rev: rev, Key: key, Namespace: r.namespaceOf(key), obj: objs[i], own: ownEnvelope(objs[i], rev), enc: r.enc, at: time.Now()})
	}
}

// syncTarget records the revision at which the cache counts as synced.
func (c *Cache) syncTarget(rev int64) {
	go func() {
		ctx := context.Background()
		if err := c.WaitForRev(ctx, rev); err == nil {
			c.syncOnce.Do(func() { close(c.synced) })
		}
	}()
}

// follow watches the store from the revision after the cache's until the
// stream fails.
func (c *Cache) follow(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from := c.Rev() + 1
	stream, err := c.wc.Watch(ctx)
	if err != nil {
		return fmt.Errorf("cache: open store watch: %w", err)
	}
	if err := stream.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: &storev1.WatchCreateRequest{
		Key: []byte(Prefix), RangeEnd: storeclient.PrefixEnd(Prefix), StartRevision: from, ProgressNotify: true,
	}}}); err != nil {
		return fmt.Errorf("cache: open store watch: %w", err)
	}
	c.streamMu.Lock()
	c.stream, c.progressPending = stream, false
	c.streamMu.Unlock()
	defer func() {
		c.streamMu.Lock()
		c.stream = nil
		c.streamMu.Unlock()
	}()

	lastEvent := c.Rev()
	batches := map[*Resource][]change{}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("cache: store watch: %w", err)
		}
		if resp.GetCanceled() {
			if cr := resp.GetCompactRevision(); cr > 0 {
				return &compactedErr{rev: cr}
			}
			return fmt.Errorf("cache: store ended the watch: %s", resp.GetCancelReason())
		}
		if resp.GetCreated() {
			c.requestProgress(true)
			continue
		}
		evs := resp.GetEvents()
		if len(evs) == 0 {
			if resp.GetProgressNotify() {
				c.streamMu.Lock()
				c.progressPending = false
				c.streamMu.Unlock()
				if rev := resp.GetHeader().GetRevision(); rev > c.Rev() && rev >= lastEvent {
					c.setRev(rev)
				}
			}
			continue
		}
		// Events of one revision may span responses, but every revision
		// before this batch's last event is complete once it is applied,
		// and the last one too when the store says so.
		lastEvent = evs[len(evs)-1].GetKv().GetModRevision()
		complete := max(c.Rev(), lastEvent-1)
		if resp.GetRevisionComplete() {
			complete = max(c.Rev(), lastEvent)
		} else {
			// Learn soon that lastEvent is complete: the store's answer
			// (a progress notification) comes after this response on
			// the stream, so this goroutine handles it only once the
			// batch is applied. Asked before the batch is applied, not
			// after: the request's send wakes the store connection's
			// writer, and a goroutine woken later runs first (the
			// scheduler's runnext), so the watch senders the batch wakes
			// go ahead of the request instead of waiting behind its
			// write.
			c.requestProgress(false)
		}
		var spans []trace.Span
		// flush applies the batches so far; every revision up to done is
		// complete then.
		flush := func(done int64) {
			now := time.Now()
			for r, chs := range batches {
				r.applyBatch(chs, done, now)
				clear(chs)
				batches[r] = chs[:0]
			}
		}
		set := c.set.Load()
		for _, ev := range evs {
			kv := ev.GetKv()
			key := string(kv.GetKey())
			rev := kv.GetModRevision()
			if c.crdPrefix != "" && strings.HasPrefix(key, c.crdPrefix) {
				// The served custom resources change at this revision:
				// what came before it goes to the resources as they were.
				var crd *apiextensionsv1.CustomResourceDefinition
				if ev.GetType() == storev1.Event_TYPE_PUT {
					if crd, err = c.decodeCRD(ctx, kv); err != nil {
						c.logger.Error("skipping an undecodable CustomResourceDefinition", "key", key, "rev", rev, "err", err)
					}
				}
				if ev.GetType() != storev1.Event_TYPE_PUT || crd != nil {
					done := max(c.Rev(), rev-1)
					flush(done)
					if done > c.Rev() {
						c.setRev(done)
					}
					if err := c.applyCRD(ctx, key, crd, rev); err != nil {
						return err
					}
					set = c.set.Load()
				}
			}
			rs := set.forKey(key)
			if len(rs) == 0 {
				continue
			}
			if tp := ev.GetTraceparent(); tp != "" {
				if _, span := telemetry.StartRemoteSpan(ctx, c.opts.TracerProvider, tp, telemetry.ScopeWatchFanout, "watchfanout.fanout",
					trace.WithAttributes(attribute.String("k8s.resource", rs[0].res.GVR.Resource), attribute.Int64("store.revision", rev))); span.IsRecording() {
					spans = append(spans, span)
				}
			}
			put := ev.GetType() == storev1.Event_TYPE_PUT
			var objs []*object
			if put {
				objs = c.newObjects(ctx, rs, kv)
			}
			for i, r := range rs {
				if rev <= r.born {
					continue // in the state the resource was loaded with
				}
				var obj *object // nil: a delete
				if put {
					if obj = objs[i]; obj == nil {
						continue // undecodable for r
					}
				}
				batches[r] = append(batches[r], change{key: key, rev: rev, obj: obj})
			}
		}
		flush(complete)
		for _, s := range spans {
			s.End()
		}
		if complete > c.Rev() {
			c.setRev(complete)
		}
	}
}

// newObjects returns the objects of a stored value for rs, the resources
// stored under its key (nil when a resource cannot decode it: it is
// skipped), decrypted once here: a value that does not decrypt is kept
// as an unreadable object, whose reads fail with the reason (the object
// is there; the cache cannot show it). The versions of a CRD share one
// object (stored as JSON, it does not depend on the resource): each
// decodes it as its own version.
func (c *Cache) newObjects(ctx context.Context, rs []*Resource, kv *storev1.KeyValue) []*object {
	out := make([]*object, len(rs))
	if len(rs) == 0 {
		return out
	}
	key, rev := string(kv.GetKey()), kv.GetModRevision()
	value, err := c.Plain(ctx, key, kv.GetValue())
	if err != nil {
		c.logger.Error("a stored value does not decrypt", "key", key, "rev", rev, "err", err)
		c.m.undecryptable.Inc()
		o := unreadable(rev, err)
		for i := range out {
			out[i] = o
		}
		return out
	}
	var spare []byte
	if len(rs) > 1 {
		spare = bytes.Clone(value) // newObject may write to value
	}
	for i, r := range rs {
		if i > 0 && out[0] != nil && !out[0].spliceable {
			if _, err := out[0].decodeRaw(r.enc, rev); err == nil {
				out[i] = out[0]
				continue
			}
		}
		v := value
		if i > 0 {
			v = bytes.Clone(spare)
		}
		o, err := newObject(r.enc, v, rev, &c.scratch)
		if err != nil {
			c.logger.Error("skipping undecodable object", "key", key, "rev", rev, "resource", r.res.GVR.String(), "err", err)
			continue
		}
		out[i] = o
	}
	return out
}

// Plain returns the plain value of what the store holds under key
// (Options.Decrypter).
func (c *Cache) Plain(ctx context.Context, key string, stored []byte) ([]byte, error) {
	if c.opts.Decrypter == nil {
		return stored, nil
	}
	plain, _, err := c.opts.Decrypter.Decrypt(ctx, key, stored)
	return plain, err
}

// bookmarks sends periodic bookmarks until ctx ends.
func (c *Cache) bookmarks(ctx context.Context) {
	c.everyResource(ctx, c.opts.BookmarkInterval, func(r *Resource) {
		if err := r.bookmark(); err != nil {
			c.logger.Error("bookmark", "err", err)
		}
	})
}

// everyResource calls fn with each served resource every period until
// ctx ends.
func (c *Cache) everyResource(ctx context.Context, period time.Duration, fn func(*Resource)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, r := range c.set.Load().all {
				fn(r)
			}
		}
	}
}
