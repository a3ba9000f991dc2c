// Package server implements meridian.watch.v1.WatchService on top of the
// watch cache: watches with the Kubernetes resourceVersion semantics, and
// List/Get served from the cache.
package server

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"google.golang.org/grpc/mem"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Defaults of Config fields.
const (
	DefaultWatchTimeout    = 30 * time.Minute
	DefaultReadWaitTimeout = 3 * time.Second
	// DefaultMaxBatchBytes keeps an encoded WatchManyResponse within
	// 32 KiB: batches are encoded into buffers from gRPC's size-tiered
	// pool (…, 16 KiB, 32 KiB, 1 MiB), and so are they on the client's
	// side, where a batch over 32 KiB takes a 1 MiB buffer for as long as
	// it is in flight.
	DefaultMaxBatchBytes            = 32<<10 - 64
	DefaultInitialEventsConcurrency = 16
)

// Config configures a Server. Zero fields mean their defaults.
type Config struct {
	// Cache serves everything. Required.
	Cache *cache.Cache
	// Codec encodes lists and objects. Required.
	Codec *codec.Codec
	// KV reads the store for what the cache cannot serve: lists at an
	// exact revision it does not hold, and continue tokens whose snapshot
	// expired. Required.
	KV storev1.KVServiceClient
	// Stopping is closed when the service shuts down: WatchMany streams
	// then end once their watches have (a client keeps an idle stream open
	// for as long as it likes, and a graceful stop would wait for it).
	// Nil: streams end only when their clients end them.
	Stopping <-chan struct{}
	// WatchTimeout ends watches that asked for no timeout; default 30m.
	WatchTimeout time.Duration
	// ReadWaitTimeout bounds how long a read or watch waits for the cache
	// to reach a resourceVersion (NotOlderThan, consistent reads); default
	// 3s, then 504 Timeout (ResourceVersionTooLarge).
	ReadWaitTimeout time.Duration
	// MaxBatchBytes caps the frames of one WatchResponse; default just
	// under 32 KiB (see DefaultMaxBatchBytes).
	MaxBatchBytes int
	// InitialEventsConcurrency caps the watches sending initial state at
	// once (a relist storm), which bounds memory; default 16.
	InitialEventsConcurrency int
	// Now is the clock of Table ages; nil is time.Now.
	Now func() time.Time
	// BufferPool provides the buffers watch batches are encoded into;
	// gRPC returns each once it has written it. nil is gRPC's default
	// pool (mem.DefaultBufferPool).
	BufferPool mem.BufferPool
}

// Server serves watch.v1.WatchService. Its gRPC server must use
// batchcodec.Codec (grpc.ForceServerCodecV2): watch batches are sent encoded.
type Server struct {
	watchv1.UnimplementedWatchServiceServer
	cfg Config
	// initialSlots caps the watches sending initial events at once.
	initialSlots *slots
	pool         mem.BufferPool
	// deadlines ends watches at their timeout.
	deadlines deadlines
	// listBufs holds the *[]byte buffers (capacity streamChunkBytes) that
	// StreamList writes JSON chunks into, reused from list to list and
	// chunk to chunk instead of one new buffer per call.
	listBufs sync.Pool
	// compressors holds *gzsplice.Compressor for gzip-compressed lists
	// (streamlistgzip.go): each holds a deflate compressor's tables.
	compressors sync.Pool
	// runSeed hashes object keys to where compressed list runs start
	// (streamlistgzip.go): the same for every list the server writes.
	runSeed maphash.Seed
}

var _ watchv1.WatchServiceServer = (*Server)(nil)

// New returns a server.
func New(cfg Config) (*Server, error) {
	if cfg.Cache == nil || cfg.Codec == nil || cfg.KV == nil {
		return nil, errors.New("server: Cache, Codec and KV are required")
	}
	if cfg.WatchTimeout <= 0 {
		cfg.WatchTimeout = DefaultWatchTimeout
	}
	if cfg.ReadWaitTimeout <= 0 {
		cfg.ReadWaitTimeout = DefaultReadWaitTimeout
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.InitialEventsConcurrency <= 0 {
		cfg.InitialEventsConcurrency = DefaultInitialEventsConcurrency
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pool := cfg.BufferPool
	if pool == nil {
		pool = mem.DefaultBufferPool()
	}
	return &Server{cfg: cfg, initialSlots: newSlots(cfg.InitialEventsConcurrency), pool: pool, runSeed: maphash.MakeSeed()}, nil
}

// resolve finds the cache of a resource; 404 when it is not served, 503
// before the cache has synced.
//
// A resource the cache does not serve may be a custom resource whose CRD
// the caller (a gateway, following the CRDs on its own) saw established
// a moment before this replica's store watch did: resolve then waits,
// once, for the cache to reach the store's current revision (as a
// consistent read does) and looks again, so a CRD established before the
// request is served, never answered 404.
func (s *Server) resolve(ctx context.Context, ref *watchv1.Resource) (*cache.Resource, error) {
	gvr := schema.GroupVersionResource{Group: ref.GetGroup(), Version: ref.GetVersion(), Resource: ref.GetResource()}
	select {
	case <-s.cfg.Cache.Synced():
	default:
		if _, ok := s.cfg.Cache.Resource(gvr); !ok {
			return nil, apierrors.NewNotFound(gvr.GroupResource(), "")
		}
		return nil, notSynced()
	}
	r, ok := s.cfg.Cache.Resource(gvr)
	if !ok {
		if _, err := s.waitConsistent(ctx); err != nil {
			return nil, err
		}
		if r, ok = s.cfg.Cache.Resource(gvr); !ok {
			return nil, apierrors.NewNotFound(gvr.GroupResource(), "")
		}
	}
	return r, nil
}

// current returns the resource of r's GVR the cache serves now: after a
// wait for a revision, r may have been replaced (its CRD changed at a
// revision the wait covers) or dropped (404).
func (s *Server) current(r *cache.Resource) (*cache.Resource, error) {
	gvr := r.Registry().GVR
	cur, ok := s.cfg.Cache.Resource(gvr)
	if !ok {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), "")
	}
	return cur, nil
}

// filter parses selectors. Without any it is the resource's shared
// filter.
func filter(r *cache.Resource, labelSel, fieldSel string) (*selection.Filter, error) {
	if labelSel == "" && fieldSel == "" {
		if f := r.Everything(); f != nil {
			return f, nil
		}
	}
	return selection.New(r.Registry(), labelSel, fieldSel)
}

// waitConsistent waits until the cache has every write acknowledged before
// the call: it reads the store's revision linearizably and waits for the
// cache to reach it, bounded by ReadWaitTimeout.
func (s *Server) waitConsistent(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadWaitTimeout)
	defer cancel()
	rev, err := s.cfg.Cache.ConsistentRev(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return 0, apierrors.NewTimeoutError("could not read the store's current revision in time", 1)
		}
		return 0, apierrors.NewServiceUnavailable(fmt.Sprintf("could not read the store's current revision: %v", err))
	}
	if err := s.cfg.Cache.WaitForRev(ctx, rev); err != nil {
		return 0, tooLargeResourceVersion(rev, s.cfg.Cache.Rev())
	}
	return rev, nil
}

// waitNotOlder waits until the cache reaches rev, bounded by
// ReadWaitTimeout, then 504 ResourceVersionTooLarge.
func (s *Server) waitNotOlder(ctx context.Context, rev int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadWaitTimeout)
	defer cancel()
	if err := s.cfg.Cache.WaitForRev(ctx, rev); err != nil {
		return tooLargeResourceVersion(rev, s.cfg.Cache.Rev())
	}
	return nil
}
