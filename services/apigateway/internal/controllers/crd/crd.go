// Package crd is the gateway's CustomResourceDefinition controller, the
// work kube-apiserver's apiextensions controllers do: it accepts a CRD's
// names unless another CRD of its group (or a built-in resource) has
// them (NamesAccepted, status.acceptedNames), establishes it
// (Established: from then on every gateway serves it, package crdtable),
// records its storage version in status.storedVersions, and, once it is
// deleted, sets Terminating, deletes every custom resource of it and
// removes the customresourcecleanup.apiextensions.k8s.io finalizer, so
// the CRD goes.
//
// It reads the CRDs through one store watch (package storewatch) and
// writes through the API's own updates and deletes (resources.Server), as
// the User of its Config. Every gateway runs it: the replicas compute the
// same status from the same CRDs (names are given out in creation order),
// and an update that would store what is stored writes nothing.
package crd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Objects writes objects as the API does, for the user in ctx.
// *resources.Server implements it.
type Objects interface {
	reconcile.Updater
	reconcile.Deleter
}

// Config configures a Controller.
type Config struct {
	// Registry serves CRDs and the custom resources crdtable adds.
	// Required.
	Registry *registry.Registry
	// Codec decodes stored objects. Required.
	Codec *codec.Codec
	// Store holds them. Required.
	Store storewatch.Store
	// Objects carries out the writes. Required.
	Objects Objects
	// User writes; it must be allowed to write CRDs and every custom
	// resource. Required.
	User identity.User
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Retry is how often unfinished work (a failed write, a CRD whose
	// objects are being deleted) is tried again; 0 means 1 second.
	Retry time.Duration
}

// Controller keeps the CRDs' status; Run runs it.
type Controller struct {
	cfg Config
	res *registry.Resource
}

// New returns a Controller, or an error naming every required field cfg
// lacks.
func New(cfg Config) (*Controller, error) {
	const name = "crd"
	if err := reconcile.Require(name, reconcile.Registry(cfg.Registry), reconcile.Codec(cfg.Codec), reconcile.Store(cfg.Store), reconcile.Objects(cfg.Objects), reconcile.User(cfg.User)); err != nil {
		return nil, err
	}
	res, err := reconcile.Lookup(name, cfg.Registry, apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"), "CustomResourceDefinitions")
	if err != nil {
		return nil, err
	}
	cfg.Logger, cfg.Retry = reconcile.Defaults(cfg.Logger, cfg.Retry, time.Second)
	return &Controller{cfg: cfg, res: res}, nil
}

// Run keeps the CRDs' status until ctx ends: after every change the
// store's watch reports, and every Retry while work is left.
func (c *Controller) Run(ctx context.Context) {
	reconcile.Run(ctx, reconcile.Loop{
		Store: c.cfg.Store, Codec: c.cfg.Codec, Resource: c.res, What: "CustomResourceDefinitions to establish",
		User: c.cfg.User, Logger: c.cfg.Logger, Retry: c.cfg.Retry,
	}, func() *apiextensionsv1.CustomResourceDefinition { return &apiextensionsv1.CustomResourceDefinition{} }, c.syncAll)
}

// syncAll brings every CRD's status up to date and deletes what deleted
// CRDs leave, and reports whether nothing is left to do.
func (c *Controller) syncAll(ctx context.Context, crds map[string]*apiextensionsv1.CustomResourceDefinition) bool {
	done := true
	for _, crd := range crds {
		want := Status(crd, crds, c.builtin(crd.Spec.Group))
		if !equality.Semantic.DeepEqual(want, crd.Status) {
			if err := c.setStatus(ctx, crd.Name, crds); err != nil {
				c.cfg.Logger.Warn("crd: status update failed; retrying", "crd", crd.Name, "error", err)
				done = false
			}
		}
		if crd.DeletionTimestamp != nil && slices.Contains(crd.Finalizers, registry.CRDCleanupFinalizer) {
			finished, err := c.cleanup(ctx, crd)
			if err != nil {
				c.cfg.Logger.Warn("crd: deleting custom resources failed; retrying", "crd", crd.Name, "error", err)
			}
			done = done && finished
		}
	}
	return done
}

// builtin returns the built-in resources of group.
func (c *Controller) builtin(group string) []*registry.Resource {
	var out []*registry.Resource
	for _, res := range c.cfg.Registry.All() {
		if res.Custom == nil && res.GVR.Group == group {
			out = append(out, res)
		}
	}
	return out
}

// setStatus writes the status of CRD name computed from the stored one.
func (c *Controller) setStatus(ctx context.Context, name string, crds map[string]*apiextensionsv1.CustomResourceDefinition) error {
	return reconcile.Update(ctx, c.cfg.Objects, c.res, reconcile.Ref(c.res, "", name, "status"), func(old runtime.Object) (runtime.Object, error) {
		crd := old.(*apiextensionsv1.CustomResourceDefinition).DeepCopy()
		crd.Status = Status(crd, crds, c.builtin(crd.Spec.Group))
		return crd, nil
	})
}

// cleanup deletes the custom resources of the deleted crd and, once none
// is left, removes its cleanup finalizer. It reports whether the CRD is
// done with.
func (c *Controller) cleanup(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (bool, error) {
	var res *registry.Resource
	for _, r := range c.cfg.Registry.Custom() {
		if r.Custom.CRD.Name == crd.Name && r.Custom.Version == r.Custom.StorageVersion {
			res = r
			break
		}
	}
	if res == nil && registry.IsCRDEstablished(crd) {
		// crdtable has not caught up with the CRD: its objects cannot be
		// read yet.
		return false, nil
	}
	if res != nil {
		list, err := c.cfg.Store.List(ctx, res.KeyPrefix(""), storage.ListOptions{})
		if err != nil {
			return false, err
		}
		if len(list.KVs) > 0 {
			return false, c.deleteAll(ctx, res, list.KVs)
		}
	}
	err := reconcile.Update(ctx, c.cfg.Objects, c.res, reconcile.Ref(c.res, "", crd.Name, ""), func(old runtime.Object) (runtime.Object, error) {
		cp := old.(*apiextensionsv1.CustomResourceDefinition).DeepCopy()
		cp.Finalizers = slices.DeleteFunc(cp.Finalizers, func(f string) bool { return f == registry.CRDCleanupFinalizer })
		return cp, nil
	})
	if err != nil {
		return false, err
	}
	return true, nil
}

// deleteAll deletes the stored objects kvs of res (those already being
// deleted wait for their finalizers).
func (c *Controller) deleteAll(ctx context.Context, res *registry.Resource, kvs []storage.KV) error {
	var errs []error
	for _, kv := range kvs {
		obj := res.New()
		if err := c.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, obj); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", kv.Key, err))
			continue
		}
		acc, _ := meta.Accessor(obj)
		if acc.GetDeletionTimestamp() != nil {
			continue
		}
		if _, err := c.cfg.Objects.DeleteObject(ctx, res, reconcile.Ref(res, acc.GetNamespace(), acc.GetName(), ""), &metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Status returns the status crd should have, given every CRD the
// controller holds and the built-in resources of crd's group, as
// kube-apiserver's naming, establishing and finalizing controllers set it.
func Status(crd *apiextensionsv1.CustomResourceDefinition, crds map[string]*apiextensionsv1.CustomResourceDefinition, builtin []*registry.Resource) apiextensionsv1.CustomResourceDefinitionStatus {
	st := *crd.Status.DeepCopy()
	if st.StoredVersions == nil {
		st.StoredVersions = []string{}
	}
	accepted, reason, msg := acceptNames(crd, crds, builtin)
	if reason == "" {
		st.AcceptedNames = accepted
		setCondition(&st, apiextensionsv1.NamesAccepted, apiextensionsv1.ConditionTrue, "NoConflicts", "no conflicts found")
	} else {
		setCondition(&st, apiextensionsv1.NamesAccepted, apiextensionsv1.ConditionFalse, reason, msg)
	}
	if reason == "" && !registry.IsCRDEstablished(crd) && crd.DeletionTimestamp == nil {
		setCondition(&st, apiextensionsv1.Established, apiextensionsv1.ConditionTrue, "InitialNamesAccepted", "the initial names have been accepted")
	} else if findCondition(&st, apiextensionsv1.Established) == nil {
		setCondition(&st, apiextensionsv1.Established, apiextensionsv1.ConditionFalse, "NotAccepted", "not all names are accepted")
	}
	if crd.DeletionTimestamp != nil {
		setCondition(&st, apiextensionsv1.Terminating, apiextensionsv1.ConditionTrue, "InstanceDeletionInProgress", "CustomResource deletion is in progress")
	}
	for _, v := range crd.Spec.Versions {
		if v.Storage && !slices.Contains(st.StoredVersions, v.Name) {
			st.StoredVersions = append(st.StoredVersions, v.Name)
		}
	}
	return st
}

// acceptNames returns crd's names with their defaults, or why they
// conflict: with a built-in resource of the group, or with the accepted
// names of another CRD of the group. Of two CRDs that ask for the same
// names and have none accepted yet, the older (then the one first by
// name) gets them, so every replica decides alike.
func acceptNames(crd *apiextensionsv1.CustomResourceDefinition, crds map[string]*apiextensionsv1.CustomResourceDefinition, builtin []*registry.Resource) (apiextensionsv1.CustomResourceDefinitionNames, string, string) {
	names := *crd.Spec.Names.DeepCopy()
	if names.Singular == "" {
		names.Singular = strings.ToLower(names.Kind)
	}
	if names.ListKind == "" && names.Kind != "" {
		names.ListKind = names.Kind + "List"
	}
	var taken []apiextensionsv1.CustomResourceDefinitionNames
	for _, b := range builtin {
		taken = append(taken, apiextensionsv1.CustomResourceDefinitionNames{Plural: b.GVR.Resource, Singular: b.SingularName, Kind: b.Kind, ListKind: b.ListKind, ShortNames: b.ShortNames})
	}
	var others []*apiextensionsv1.CustomResourceDefinition
	for _, o := range crds {
		if o.Name != crd.Name && o.Spec.Group == crd.Spec.Group {
			others = append(others, o)
		}
	}
	sort.Slice(others, func(i, j int) bool { return older(others[i], others[j]) })
	for _, o := range others {
		switch {
		case o.Status.AcceptedNames.Plural != "":
			taken = append(taken, o.Status.AcceptedNames)
		case older(o, crd) && crd.Status.AcceptedNames.Plural == "":
			// o is first in line for what it asks.
			taken = append(taken, o.Spec.Names)
		}
	}
	for _, t := range taken {
		switch {
		case t.Plural == names.Plural || t.Singular == names.Plural:
			return names, "PluralConflict", fmt.Sprintf("%q is already in use", names.Plural)
		case names.Singular != "" && (t.Plural == names.Singular || t.Singular == names.Singular):
			return names, "SingularConflict", fmt.Sprintf("%q is already in use", names.Singular)
		case t.Kind == names.Kind || t.ListKind == names.Kind:
			return names, "KindConflict", fmt.Sprintf("%q is already in use", names.Kind)
		case t.Kind == names.ListKind || t.ListKind == names.ListKind:
			return names, "ListKindConflict", fmt.Sprintf("%q is already in use", names.ListKind)
		}
		for _, s := range names.ShortNames {
			if slices.Contains(t.ShortNames, s) || t.Plural == s || t.Singular == s {
				return names, "ShortNamesConflict", fmt.Sprintf("%q is already in use", s)
			}
		}
	}
	return names, "", ""
}

// older orders CRDs by creation, then name.
func older(a, b *apiextensionsv1.CustomResourceDefinition) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

func findCondition(st *apiextensionsv1.CustomResourceDefinitionStatus, t apiextensionsv1.CustomResourceDefinitionConditionType) *apiextensionsv1.CustomResourceDefinitionCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setCondition sets condition t, keeping its lastTransitionTime unless
// its status changes.
func setCondition(st *apiextensionsv1.CustomResourceDefinitionStatus, t apiextensionsv1.CustomResourceDefinitionConditionType, status apiextensionsv1.ConditionStatus, reason, msg string) {
	c := findCondition(st, t)
	if c == nil {
		st.Conditions = append(st.Conditions, apiextensionsv1.CustomResourceDefinitionCondition{Type: t})
		c = &st.Conditions[len(st.Conditions)-1]
	}
	if c.Status != status {
		c.LastTransitionTime = metav1.NewTime(time.Now().Truncate(time.Second))
	}
	c.Status, c.Reason, c.Message = status, reason, msg
}
