package serviceaccount

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// The kinds a token names (its service account) or may be bound to.
const (
	kindServiceAccount = "ServiceAccount"
	kindPod            = "Pod"
	kindSecret         = "Secret"
	kindNode           = "Node"
)

// indexedKinds are the kinds the Index follows, by kind, with their
// resources.
var indexedKinds = map[string]string{
	kindServiceAccount: "serviceaccounts",
	kindPod:            "pods",
	kindSecret:         "secrets",
	kindNode:           "nodes",
}

// Index holds the UID of every ServiceAccount, Pod, Secret and Node, kept
// current by one store watch per kind (package storewatch, as the RBAC
// policy is kept), so that verifying a token reads no store: a token
// whose service account or bound object was deleted, or deleted and made
// again (a new UID), is refused as soon as the watch delivers the change,
// within milliseconds. It is safe for concurrent use.
type Index struct {
	store storewatch.Store
	codec *codec.Codec
	log   *slog.Logger
	kinds map[string]*kindIndex
}

// kindIndex holds the UIDs of one kind by "namespace/name" (or "name").
type kindIndex struct {
	prefix string
	codec  *codec.Codec
	log    *slog.Logger
	newObj func() runtime.Object

	mu   sync.RWMutex
	uids map[string]types.UID // guarded by mu
	// next is the map a list fills (Run's goroutine only); nil between
	// lists.
	next       map[string]types.UID
	syncedOnce sync.Once
	synced     chan struct{}
}

// NewIndex returns an Index of the kinds reg serves; Run fills it.
func NewIndex(store storewatch.Store, c *codec.Codec, reg *registry.Registry, log *slog.Logger) (*Index, error) {
	if store == nil || c == nil || reg == nil {
		return nil, errors.New("serviceaccount: an index needs a store, a codec and a registry")
	}
	if log == nil {
		log = slog.Default()
	}
	ix := &Index{store: store, codec: c, log: log, kinds: map[string]*kindIndex{}}
	for kind, resource := range indexedKinds {
		res, ok := reg.Lookup(corev1.SchemeGroupVersion.WithResource(resource))
		if !ok {
			continue
		}
		ix.kinds[kind] = &kindIndex{
			prefix: res.KeyPrefix(""), codec: c, log: log, newObj: res.New,
			uids: map[string]types.UID{}, synced: make(chan struct{}),
		}
	}
	if ix.kinds[kindServiceAccount] == nil {
		return nil, errors.New("serviceaccount: the registry does not serve serviceaccounts")
	}
	return ix, nil
}

// Run follows the store until ctx ends.
func (ix *Index) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for kind, k := range ix.kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			storewatch.Run(ctx, storewatch.Config{Store: ix.store, Prefix: k.prefix, Handler: k, What: kind + " index", Logger: ix.log})
		}()
	}
	wg.Wait()
}

// WaitSynced waits until the ServiceAccounts were read once, or ctx
// ends. The kinds tokens may be bound to are not waited for: a Secret that
// cannot be read (its encryption key is missing, say) must not keep the
// gateway from serving; until they are read, bound tokens are refused.
func (ix *Index) WaitSynced(ctx context.Context) error {
	select {
	case <-ix.kinds[kindServiceAccount].synced:
		return nil
	case <-ctx.Done():
		return errors.New("serviceaccount: the ServiceAccounts have not been read from the store yet")
	}
}

// UID returns the UID of the object of kind namespace/name; ok is false
// when it does not exist (or the kind is not indexed).
func (ix *Index) UID(kind, namespace, name string) (types.UID, bool) {
	k := ix.kinds[kind]
	if k == nil {
		return "", false
	}
	id := name
	if namespace != "" {
		id = namespace + "/" + name
	}
	k.mu.RLock()
	uid, ok := k.uids[id]
	k.mu.RUnlock()
	return uid, ok
}

// Reset implements storewatch.Handler.
func (k *kindIndex) Reset() { k.next = map[string]types.UID{} }

// Apply implements storewatch.Handler: it records the object's UID. A
// value that does not decode counts as deleted.
func (k *kindIndex) Apply(key string, value []byte, rev int64) {
	id := strings.TrimPrefix(key, k.prefix)
	var uid types.UID
	if value != nil {
		obj := k.newObj()
		if err := k.codec.DecodeStorage(value, rev, obj); err != nil {
			k.log.Error("token index: an object does not decode; tokens bound to it are refused", "key", key, "error", err)
		} else if acc, err := meta.Accessor(obj); err == nil {
			uid = acc.GetUID()
		}
	}
	if k.next != nil {
		if uid != "" {
			k.next[id] = uid
		}
		return
	}
	k.mu.Lock()
	if uid != "" {
		k.uids[id] = uid
	} else {
		delete(k.uids, id)
	}
	k.mu.Unlock()
}

// Publish implements storewatch.Handler: after a list, the listed UIDs
// replace the index's.
func (k *kindIndex) Publish(_ int64, listed bool) {
	if listed {
		k.mu.Lock()
		k.uids, k.next = k.next, nil
		k.mu.Unlock()
	}
	k.syncedOnce.Do(func() { close(k.synced) })
}
