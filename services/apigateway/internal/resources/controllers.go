package resources

import (
	"context"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The gateway's controllers (internal/controllers/...) and its start
// (the bootstrap RBAC policy) write through the methods below, so that
// what they do is a write with the API's semantics, made as the user in
// ctx, and the garbage collector's watch of the whole registry keeps the
// update hints (objhints.go) current.

// CreateObject stores obj, a new object of res, as a create without dry
// run does: server-owned metadata, defaults, the write guard, validation,
// admission, the namespace's lifecycle. Its errors are Kubernetes errors
// (AlreadyExists when an object of its name exists).
func (s *Server) CreateObject(ctx context.Context, res *registry.Resource, obj runtime.Object) (runtime.Object, error) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if err := checkNamespace(res, acc, acc.GetNamespace()); err != nil {
		return nil, err
	}
	ref := &apiv1.ResourceRef{Group: res.GVR.Group, Version: res.GVR.Version, Resource: res.GVR.Resource, Namespace: acc.GetNamespace()}
	return s.insert(ctx, res, ref, obj, acc, false)
}

// DeleteObject deletes, or starts deleting, the object ref names, as a
// DELETE with opts does: preconditions, admission, finalizers and
// propagation. Its errors are Kubernetes errors.
func (s *Server) DeleteObject(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, opts *metav1.DeleteOptions) (runtime.Object, error) {
	return s.deleteOne(ctx, deleteRequest{res: res, ref: ref, opts: opts})
}

// UpdateObject replaces the object ref names (or its subresource, when ref
// names one) with mutate's result from the stored object, as an update
// without a resourceVersion does: retried over concurrent writes,
// validated and admitted; an object being deleted whose last finalizer the
// update takes away is removed. mutate must not modify old. Its errors
// are Kubernetes errors.
func (s *Server) UpdateObject(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, mutate func(old runtime.Object) (runtime.Object, error)) (runtime.Object, error) {
	return s.updateLoop(ctx, res, ref, "", false, mutate)
}

// ObserveChange tells the server that the store changed key at
// modRevision: the update hint of key goes unless it is that version.
func (s *Server) ObserveChange(key string, modRevision int64) {
	s.objHints.observe(key, modRevision)
}

// ObserveResync tells the server that changes may have gone unobserved:
// every update hint goes.
func (s *Server) ObserveResync() {
	s.objHints.clear()
}
