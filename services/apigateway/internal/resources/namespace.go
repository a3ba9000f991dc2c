package resources

import (
	"context"
)

// deleteNamespace deletes a namespace and, in the same revision, every
// namespaced object in it.
//
// kube-apiserver instead marks the namespace Terminating and lets a
// controller empty it before removing its finalizer; that lifecycle comes
// with the write-surface issue. Until then an atomic cascading delete keeps
// the store free of objects whose namespace is gone, which would otherwise
// reappear when a namespace of the same name is created.
func (s *Server) deleteNamespace(ctx context.Context, name string, modRevision int64) (int64, error) {
	var prefixes []string
	for _, gv := range s.cfg.Registry.GroupVersions() {
		for _, r := range s.cfg.Registry.Resources(gv) {
			if r.Namespaced {
				prefixes = append(prefixes, r.KeyPrefix(name))
			}
		}
	}
	return s.cfg.Store.DeleteTree(ctx, namespaceKey(s, name), modRevision, prefixes)
}
