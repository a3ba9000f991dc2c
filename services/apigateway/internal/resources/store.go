package resources

import (
	"context"
	"time"

	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// Store is the store as the API uses it: whole objects under string keys,
// read at a revision, written guarded by mod revisions, and watched (see
// package storage for the contract and the errors of each method).
// *storage.Store implements it.
type Store interface {
	// Get reads one key; storage.ErrNotFound, with the revision read at,
	// when it does not exist.
	Get(ctx context.Context, key string, opts storage.ReadOptions) (storage.KV, int64, error)
	// List reads the keys under prefix, a page when opts has a Limit.
	List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error)
	// Revision returns the store's current revision.
	Revision(ctx context.Context, serializable bool) (int64, error)
	// Create stores a new key, guarded by its parent (a namespace).
	Create(ctx context.Context, key string, value []byte, parent storage.Parent, lease int64) (int64, error)
	// Update replaces a key whose mod revision is modRevision.
	Update(ctx context.Context, key string, value []byte, modRevision, lease int64) (int64, error)
	// Delete removes a key whose mod revision is modRevision.
	Delete(ctx context.Context, key string, modRevision int64) (int64, error)
	// Lease returns a lease that ends no earlier than ttl from now.
	Lease(ctx context.Context, ttl time.Duration) (int64, error)
	// Watch follows the changes under prefix from startRevision.
	Watch(ctx context.Context, prefix string, startRevision int64, progress bool) (*storage.Watcher, error)
}
