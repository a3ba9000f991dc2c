package resources

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// A namespaced object may be created only while its namespace exists and
// is not being deleted, as kube-apiserver's NamespaceLifecycle admission
// enforces (404 and 403). kube-apiserver checks a cache of namespaces and
// writes afterwards, so a create racing a namespace's deletion can land in
// a namespace being emptied. Here the check is part of the create's
// transaction instead: the create is guarded by the namespace's mod
// revision at which it was seen active (storage.Parent), so a namespace
// that changed in between fails the create, and the namespace as it is
// now, returned by the same transaction, is checked again.
//
// The mod revision a create is guarded by comes from namespaceHints, the
// revisions at which this gateway last saw each namespace active, so the
// common create costs one store round trip rather than a read and a write.
// A hint is only ever a guess: a wrong one costs one failed transaction,
// never a create in a terminating namespace.

// maxNamespaceHints bounds the hints kept; past it, an arbitrary hint is
// dropped for each new one (a dropped hint costs one read).
const maxNamespaceHints = 8192

// maxParentRetries bounds how often one create follows a namespace that
// keeps changing under it before it gives up with a 409.
const maxParentRetries = 5

// namespaceHints maps a namespace's name to the mod revision at which it
// was last seen active. It is safe for concurrent use.
type namespaceHints struct {
	mu sync.Mutex
	m  map[string]int64
}

func (h *namespaceHints) get(ns string) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rev, ok := h.m[ns]
	return rev, ok
}

func (h *namespaceHints) set(ns string, rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]int64{}
	}
	if _, ok := h.m[ns]; !ok && len(h.m) >= maxNamespaceHints {
		for k := range h.m {
			delete(h.m, k)
			break
		}
	}
	h.m[ns] = rev
}

func (h *namespaceHints) forget(ns string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, ns)
}

// namespaceGuard returns the guard of a create of an object of res named
// name in namespace ns: none for cluster-scoped objects, else the
// namespace's key at a mod revision at which it was active. It fails with
// a 404 when the namespace does not exist and a 403 when it is being
// deleted. fresh skips the hint (a dry run writes nothing, so no
// transaction would check it).
func (s *Server) namespaceGuard(ctx context.Context, res *registry.Resource, ns, name string, fresh bool) (storage.Parent, error) {
	if !res.Namespaced || ns == "" {
		return storage.Parent{}, nil
	}
	if !fresh {
		if rev, ok := s.nsHints.get(ns); ok {
			return storage.Parent{Key: namespaceKey(s, ns), ModRevision: rev}, nil
		}
	}
	kv, _, err := s.cfg.Store.Get(ctx, namespaceKey(s, ns), storage.ReadOptions{})
	if err != nil {
		return storage.Parent{}, namespaceError(err, res, ns, name)
	}
	return s.checkNamespace(res, ns, name, kv)
}

// checkNamespace checks the stored namespace kv of a create and returns the
// guard that keeps the check true until the write: a 403 when it is being
// deleted, else its key at its mod revision (remembered as a hint).
func (s *Server) checkNamespace(res *registry.Resource, ns, name string, kv storage.KV) (storage.Parent, error) {
	var nsObj corev1.Namespace
	if err := s.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, &nsObj); err != nil {
		return storage.Parent{}, apierrors.NewInternalError(err)
	}
	if nsObj.DeletionTimestamp != nil || nsObj.Status.Phase == corev1.NamespaceTerminating {
		s.nsHints.forget(ns)
		return storage.Parent{}, apierrors.NewForbidden(res.GVR.GroupResource(), name,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	}
	s.nsHints.set(ns, kv.ModRevision)
	return storage.Parent{Key: kv.Key, ModRevision: kv.ModRevision}, nil
}

// createGuarded stores a new object under key, guarded by its namespace
// (parent, from namespaceGuard): when the namespace changed since parent
// was taken, it checks the namespace as the failed transaction returned it
// and tries again. Its errors are Kubernetes errors (409 AlreadyExists,
// 404 for the namespace, 403 while it is being deleted).
func (s *Server) createGuarded(ctx context.Context, res *registry.Resource, ns, name, key string, data []byte, parent storage.Parent, lease int64) (int64, error) {
	for attempt := 0; ; attempt++ {
		rev, err := s.cfg.Store.Create(ctx, key, data, parent, lease)
		var changed *storage.ParentChangedError
		if !errors.As(err, &changed) {
			if errors.Is(err, storage.ErrParentMissing) {
				s.nsHints.forget(ns)
			}
			if err != nil {
				return 0, namespaceError(err, res, ns, name)
			}
			s.objHints.put(key, data, rev)
			return rev, nil
		}
		if attempt+1 == maxParentRetries {
			return 0, storageError(storage.ErrConflict, res, ns, name)
		}
		if parent, err = s.checkNamespace(res, ns, name, changed.KV); err != nil {
			return 0, err
		}
	}
}

// namespaceError converts a storage error of a guarded create, or of
// reading its namespace, to the Kubernetes error a client expects: a
// missing namespace is a 404 on namespaces, as kube-apiserver answers.
func namespaceError(err error, res *registry.Resource, ns, name string) error {
	if errors.Is(err, storage.ErrNotFound) {
		err = storage.ErrParentMissing
	}
	return storageError(err, res, ns, name)
}
