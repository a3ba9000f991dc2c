package resources

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// namespaceController is the identity the namespace lifecycle acts as.
var namespaceController = identity.User{Name: "system:serviceaccount:kube-system:namespace-controller", Groups: []string{"system:serviceaccounts", "system:authenticated"}}

// RunNamespaceController finishes the deletion of namespaces until ctx
// ends, checking every interval: for each namespace being deleted (it has a
// deletionTimestamp and still the "kubernetes" spec finalizer) it deletes
// every namespaced object in it (objects with finalizers are marked and
// waited for), and once the namespace is empty removes the finalizer, which
// removes the namespace.
//
// Every step is a compare-and-swap on the store, so several gateway
// replicas may run it at once.
func (s *Server) RunNamespaceController(ctx context.Context, interval time.Duration) {
	ctx = identity.WithUser(ctx, namespaceController)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.reconcileNamespaces(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("namespace controller", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) reconcileNamespaces(ctx context.Context) error {
	nsRes, _ := s.cfg.Registry.Lookup(namespacesGVR)
	page, err := s.cfg.Store.List(ctx, nsRes.KeyPrefix(""), storage.ListOptions{ReadOptions: storage.ReadOptions{Serializable: true}})
	if err != nil {
		return err
	}
	var errs []error
	for _, kv := range page.KVs {
		var ns corev1.Namespace
		if err := s.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, &ns); err != nil {
			errs = append(errs, err)
			continue
		}
		if ns.DeletionTimestamp == nil || !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
			continue
		}
		if err := s.emptyNamespace(ctx, ns.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// emptyNamespace deletes what is in namespace ns and, once nothing is
// left, removes its "kubernetes" finalizer.
func (s *Server) emptyNamespace(ctx context.Context, ns string) error {
	remaining := 0
	for _, gv := range s.cfg.Registry.GroupVersions() {
		for _, res := range s.cfg.Registry.Resources(gv) {
			if !res.Namespaced {
				continue
			}
			page, err := s.cfg.Store.List(ctx, res.KeyPrefix(ns), storage.ListOptions{})
			if err != nil {
				return err
			}
			for _, kv := range page.KVs {
				remaining++
				obj := res.New()
				if err := s.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, obj); err != nil {
					return err
				}
				acc, _ := meta.Accessor(obj)
				if acc.GetDeletionTimestamp() != nil {
					continue // waiting for its finalizers
				}
				ref := &apiv1.ResourceRef{Group: res.GVR.Group, Version: res.GVR.Version, Resource: res.GVR.Resource, Namespace: ns, Name: acc.GetName()}
				if _, err := s.deleteOne(ctx, deleteRequest{res: res, ref: ref, opts: &metav1.DeleteOptions{}}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
			}
		}
	}
	if remaining > 0 {
		return nil // next round: what had finalizers may be gone by then
	}
	nsRes, _ := s.cfg.Registry.Lookup(namespacesGVR)
	ref := &apiv1.ResourceRef{Version: "v1", Resource: "namespaces", Name: ns, Subresource: "finalize"}
	_, err := s.updateLoop(ctx, nsRes, ref, "", false, func(old runtime.Object) (runtime.Object, error) {
		n := old.DeepCopyObject().(*corev1.Namespace)
		n.Spec.Finalizers = slices.DeleteFunc(n.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
		return n, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
