package resources

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"google.golang.org/genproto/googleapis/api/httpbody"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Deletion, as kube-apiserver does it:
//
//   - An object without finalizers is removed at once; the response is a
//     Status (or, for namespaces, the object).
//   - An object with finalizers gets a deletionTimestamp (and
//     deletionGracePeriodSeconds 0) and stays, returned as it now is; it
//     is removed by the update that takes away its last finalizer.
//   - propagationPolicy Orphan and Foreground add the orphan and
//     foregroundDeletion finalizers.
//   - A namespace turns Terminating: its spec finalizer "kubernetes" keeps
//     it until the namespace controller has emptied it.

// protectedNamespaces cannot be deleted.
var protectedNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true}

// Delete deletes an object, honouring the uid and resourceVersion
// preconditions of a DeleteOptions body.
func (s *Server) Delete(ctx context.Context, req *apiv1.DeleteRequest) (*httpbody.HttpBody, error) {
	return s.write(ctx, req.GetRef(), req.GetAccept(), 0, func() (runtime.Object, error) { return s.delete(ctx, req) })
}

// deleteRequest is what a delete needs, whichever verb asked for it.
type deleteRequest struct {
	res    *registry.Resource
	ref    *apiv1.ResourceRef
	opts   *metav1.DeleteOptions
	dryRun bool
}

func (s *Server) delete(ctx context.Context, req *apiv1.DeleteRequest) (runtime.Object, error) {
	ref := req.GetRef()
	res, err := s.resolve(ctx, ref, true)
	if err != nil {
		return nil, err
	}
	opts, dryRun, err := s.deleteOptions(req.GetBody(), req.GetPropagationPolicy(), req.GetDryRun())
	if err != nil {
		return nil, err
	}
	if res.GVR == namespacesGVR && protectedNamespaces[ref.GetName()] {
		return nil, apierrors.NewForbidden(res.GVR.GroupResource(), ref.GetName(), errors.New("this namespace may not be deleted"))
	}
	return s.deleteOne(ctx, deleteRequest{res: res, ref: ref, opts: opts, dryRun: dryRun})
}

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

func checkPropagation(opts *metav1.DeleteOptions) error {
	if opts.PropagationPolicy == nil {
		return nil
	}
	switch *opts.PropagationPolicy {
	case metav1.DeletePropagationOrphan, metav1.DeletePropagationBackground, metav1.DeletePropagationForeground:
		return nil
	}
	return apierrors.NewBadRequest(fmt.Sprintf("propagationPolicy: unsupported value %q: supported values are Orphan, Background and Foreground", *opts.PropagationPolicy))
}

// deleteOne deletes (or starts deleting) one object.
func (s *Server) deleteOne(ctx context.Context, d deleteRequest) (runtime.Object, error) {
	res, ref := d.res, d.ref
	gr := res.GVR.GroupResource()
	for attempt := 0; attempt < maxConflictRetries; attempt++ {
		old, _, err := s.get(ctx, res, ref.GetNamespace(), ref.GetName(), readLatest, 0)
		if err != nil {
			return nil, err
		}
		oldAcc, _ := meta.Accessor(old)
		if p := d.opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != oldAcc.GetUID() {
				return nil, apierrors.NewConflict(gr, ref.GetName(), fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, oldAcc.GetUID()))
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != oldAcc.GetResourceVersion() {
				return nil, apierrors.NewConflict(gr, ref.GetName(), fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, oldAcc.GetResourceVersion()))
			}
		}
		if err := s.admit(ctx, res, ref, nil, old, apiv1Delete, d.dryRun); err != nil {
			return nil, err
		}
		modRev, _ := parseRV(oldAcc.GetResourceVersion())

		// Objects that must stay for a while: mark them.
		if marked, keep := s.markForDeletion(old, d.opts); keep {
			if d.dryRun || marked == nil {
				if marked == nil {
					return old, nil // already being deleted
				}
				return marked, nil
			}
			data, err := s.encodeStored(ctx, res, marked)
			if err != nil {
				return nil, err
			}
			rev, err := s.cfg.Store.Update(ctx, res.Key(ref.GetNamespace(), ref.GetName()), data, modRev, 0)
			if errors.Is(err, storage.ErrConflict) && !hasRVPrecondition(d.opts) {
				continue
			}
			if err != nil {
				return nil, storageError(err, res, ref.GetNamespace(), ref.GetName())
			}
			macc, _ := meta.Accessor(marked)
			macc.SetResourceVersion(fmt.Sprint(rev))
			return marked, nil
		}

		status := &metav1.Status{Status: metav1.StatusSuccess, Details: &metav1.StatusDetails{
			Name: ref.GetName(), Group: res.GVR.Group, Kind: res.GVR.Resource, UID: oldAcc.GetUID(),
		}}
		if d.dryRun {
			return status, nil
		}
		_, err = s.cfg.Store.Delete(ctx, res.Key(ref.GetNamespace(), ref.GetName()), modRev)
		if errors.Is(err, storage.ErrConflict) && !hasRVPrecondition(d.opts) {
			continue
		}
		if err != nil {
			return nil, storageError(err, res, ref.GetNamespace(), ref.GetName())
		}
		if s.cfg.Quota != nil {
			s.cfg.Quota.Replenish(ref.GetNamespace(), gr)
		}
		return status, nil
	}
	return nil, apierrors.NewConflict(gr, ref.GetName(), errors.New("too many concurrent writers; try again"))
}

func hasRVPrecondition(opts *metav1.DeleteOptions) bool {
	return opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil
}

// markForDeletion returns the object as it must be stored when a delete
// cannot remove it yet: with a deletionTimestamp, the finalizers the
// propagation policy asks for, and for a namespace phase Terminating. keep
// is false when the object can go at once; marked is nil when it is
// already marked.
func (s *Server) markForDeletion(old runtime.Object, opts *metav1.DeleteOptions) (marked runtime.Object, keep bool) {
	obj := old.DeepCopyObject()
	acc, _ := meta.Accessor(obj)
	finalizers := acc.GetFinalizers()
	if opts.PropagationPolicy != nil {
		switch *opts.PropagationPolicy {
		case metav1.DeletePropagationOrphan:
			finalizers = withFinalizer(finalizers, metav1.FinalizerOrphanDependents)
		case metav1.DeletePropagationForeground:
			finalizers = withFinalizer(finalizers, metav1.FinalizerDeleteDependents)
		}
	}
	ns, isNamespace := obj.(*corev1.Namespace)
	if len(finalizers) == 0 && !(isNamespace && len(ns.Spec.Finalizers) > 0) {
		return nil, false
	}
	if acc.GetDeletionTimestamp() != nil && slices.Equal(finalizers, acc.GetFinalizers()) {
		return nil, true
	}
	acc.SetFinalizers(finalizers)
	if acc.GetDeletionTimestamp() == nil {
		now := metav1.NewTime(s.cfg.Now().Truncate(1e9))
		acc.SetDeletionTimestamp(&now)
		zero := int64(0)
		acc.SetDeletionGracePeriodSeconds(&zero)
	}
	if isNamespace {
		ns.Status.Phase = corev1.NamespaceTerminating
	}
	return obj, true
}

func withFinalizer(list []string, f string) []string {
	if slices.Contains(list, f) {
		return list
	}
	return append(slices.Clone(list), f)
}

// finalized reports whether an object being deleted has lost its last
// finalizer (metadata, and for namespaces spec) and must now be removed.
func finalized(obj runtime.Object) bool {
	acc, err := meta.Accessor(obj)
	if err != nil || acc.GetDeletionTimestamp() == nil || len(acc.GetFinalizers()) > 0 {
		return false
	}
	if ns, ok := obj.(*corev1.Namespace); ok && len(ns.Spec.Finalizers) > 0 {
		return false
	}
	return true
}

// DeleteCollection deletes every object of a collection that matches the
// selectors, each as a delete would, and returns the list of what it
// deleted (or marked for deletion). The collection of a namespaced kind is
// one namespace's: without a namespace the call is a 405 MethodNotAllowed
// and deletes nothing.
func (s *Server) DeleteCollection(ctx context.Context, req *apiv1.DeleteCollectionRequest) (*httpbody.HttpBody, error) {
	return s.write(ctx, req.GetRef(), req.GetAccept(), 0, func() (runtime.Object, error) { return s.deleteCollection(ctx, req) })
}

func (s *Server) deleteCollection(ctx context.Context, req *apiv1.DeleteCollectionRequest) (runtime.Object, error) {
	ref := req.GetRef()
	res, err := s.resolve(ctx, ref, false)
	if err != nil {
		return nil, err
	}
	if res.Namespaced && ref.GetNamespace() == "" {
		// kube-apiserver serves only list and watch on the all-namespaces
		// path of a namespaced kind (/api/v1/secrets): its router answers
		// any other method with this 405. A collection is deleted one
		// namespace at a time.
		return nil, apierrors.NewGenericServerResponse(http.StatusMethodNotAllowed, "", schema.GroupResource{}, "", "", 0, false)
	}
	filter, err := selection.New(res, req.GetLabelSelector(), req.GetFieldSelector())
	if err != nil {
		return nil, err
	}
	opts, dryRun, err := s.deleteOptions(req.GetBody(), req.GetPropagationPolicy(), req.GetDryRun())
	if err != nil {
		return nil, err
	}
	page, err := s.cfg.Store.List(ctx, res.KeyPrefix(ref.GetNamespace()), storage.ListOptions{})
	if err != nil {
		return nil, storageError(err, res, ref.GetNamespace(), "")
	}
	var deleted []runtime.Object
	for _, kv := range page.KVs {
		obj, err := s.decodeStored(ctx, res, kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		if !filter.Matches(obj) {
			continue
		}
		acc, _ := meta.Accessor(obj)
		if res.GVR == namespacesGVR && protectedNamespaces[acc.GetName()] {
			continue
		}
		one := &apiv1.ResourceRef{Group: ref.GetGroup(), Version: ref.GetVersion(), Resource: ref.GetResource(), Namespace: acc.GetNamespace(), Name: acc.GetName()}
		out, err := s.deleteOne(ctx, deleteRequest{res: res, ref: one, opts: opts, dryRun: dryRun})
		if apierrors.IsNotFound(err) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		if _, isStatus := out.(*metav1.Status); isStatus {
			out = obj
		}
		deleted = append(deleted, out)
	}
	list := res.NewList()
	if err := codec.SetListItems(list, deleted); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if lm, err := meta.ListAccessor(list); err == nil {
		lm.SetResourceVersion(fmt.Sprint(page.Revision))
	}
	return list, nil
}

// deleteOptions reads the options of a delete and of a delete of a
// collection: the optional DeleteOptions body, whose propagationPolicy
// and dryRun the query parameters of the same names replace when set.
// dryRun reports whether nothing may be stored.
func (s *Server) deleteOptions(body *httpbody.HttpBody, propagationPolicy string, dryRunParam []string) (opts *metav1.DeleteOptions, dryRun bool, err error) {
	if opts, err = s.decodeDeleteOptions(body); err != nil {
		return nil, false, err
	}
	if propagationPolicy != "" {
		pp := metav1.DeletionPropagation(propagationPolicy)
		opts.PropagationPolicy = &pp
	}
	if len(dryRunParam) == 0 {
		dryRunParam = opts.DryRun
	}
	if dryRun, err = isDryRun(dryRunParam); err != nil {
		return nil, false, err
	}
	if err := checkPropagation(opts); err != nil {
		return nil, false, err
	}
	return opts, dryRun, nil
}

// decodeDeleteOptions decodes an optional DeleteOptions body.
func (s *Server) decodeDeleteOptions(body *httpbody.HttpBody) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	if body == nil || len(body.GetData()) == 0 {
		return opts, nil
	}
	ct := body.GetContentType()
	if ct != "" && ct != negotiation.JSON && ct != negotiation.YAML && ct != negotiation.Protobuf {
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "", "DeleteOptions must be JSON, YAML or protobuf", 0, false)
	}
	if err := s.cfg.Codec.DecodeOptions(body.GetData(), ct, opts); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid DeleteOptions: %v", err))
	}
	return opts, nil
}
