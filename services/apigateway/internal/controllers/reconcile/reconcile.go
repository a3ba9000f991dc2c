// Package reconcile is the skeleton the gateway's controllers share: the
// API writes they make (Creator, Updater, Deleter; *resources.Server
// implements them) and how they address and update objects (Ref,
// Update), what New checks and defaults of their Config (Require,
// Lookup, Defaults), whom they write as (ServiceAccountUser), and the
// loop of a controller that keeps the objects of one resource in line
// with what it reads of them (Run, whose contract on ordering, retries,
// identity and shutdown is written there).
package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"log/slog"
	"time"
)

// Creator creates objects as the API does, for the user in ctx, and
// returns Kubernetes errors (apierrors).
type Creator interface {
	// CreateObject stores obj, a new object of res (AlreadyExists when
	// one of its name exists).
	CreateObject(ctx context.Context, res *registry.Resource, obj runtime.Object) (runtime.Object, error)
}

// Updater updates objects as the API does, for the user in ctx, and
// returns Kubernetes errors (apierrors).
type Updater interface {
	// UpdateObject replaces the object (or subresource) ref names with
	// mutate's result from the stored one, as an update without a
	// resourceVersion does (retried over concurrent writes); nothing is
	// written when the result is what is stored, and the object goes when
	// the update takes away the last finalizer of an object being
	// deleted. mutate must not modify old.
	UpdateObject(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, mutate func(old runtime.Object) (runtime.Object, error)) (runtime.Object, error)
}

// Deleter deletes objects as the API does, for the user in ctx, and
// returns Kubernetes errors (apierrors).
type Deleter interface {
	// DeleteObject deletes, or starts deleting, the object ref names, as
	// a DELETE with opts does.
	DeleteObject(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, opts *metav1.DeleteOptions) (runtime.Object, error)
}

// Need is one required field of a controller's Config.
type Need struct {
	// Missing says the field is not set.
	Missing bool
	// Error is what New says when it is missing, after the controller's
	// name ("a Registry is required").
	Error string
}

// Registry is the Need of a Config's Registry.
func Registry(r *registry.Registry) Need {
	return Need{Missing: r == nil, Error: "a Registry is required"}
}

// Codec is the Need of a Config's Codec.
func Codec(c *codec.Codec) Need {
	return Need{Missing: c == nil, Error: "a Codec is required"}
}

// Store is the Need of a Config's Store, an interface value.
func Store(s any) Need {
	return Need{Missing: s == nil, Error: "a Store is required"}
}

// Objects is the Need of a Config's Objects, an interface value.
func Objects(o any) Need {
	return Need{Missing: o == nil, Error: "Objects are required"}
}

// User is the Need of a Config's User, whom the controller writes as.
func User(u identity.User) Need {
	return Need{Missing: u.Name == "", Error: "a User is required"}
}

// Require returns an error naming every one of needs that is missing,
// one line each, "<controller>: <Need.Error>", in the order given; nil
// when none is.
func Require(controller string, needs ...Need) error {
	var errs []error
	for _, n := range needs {
		if n.Missing {
			errs = append(errs, errors.New(controller+": "+n.Error))
		}
	}
	return errors.Join(errs...)
}

// Lookup returns the resource gvr of reg, or the error
// "<controller>: the registry serves no <what>".
func Lookup(controller string, reg *registry.Registry, gvr schema.GroupVersionResource, what string) (*registry.Resource, error) {
	res, ok := reg.Lookup(gvr)
	if !ok {
		return nil, fmt.Errorf("%s: the registry serves no %s", controller, what)
	}
	return res, nil
}

// Ref returns the reference to the object of res named name in
// namespace ns ("" for a cluster-scoped one), or to its subresource sub
// when sub is not "".
func Ref(res *registry.Resource, ns, name, sub string) *apiv1.ResourceRef {
	return &apiv1.ResourceRef{Group: res.GVR.Group, Version: res.GVR.Version, Resource: res.GVR.Resource, Namespace: ns, Name: name, Subresource: sub}
}

// Update updates the object ref names through u (Updater.UpdateObject).
// An object that is gone is not an error: a controller that updates what
// it read learns of the delete from its watch, and has nothing left to
// do for the object.
func Update(ctx context.Context, u Updater, res *registry.Resource, ref *apiv1.ResourceRef, mutate func(old runtime.Object) (runtime.Object, error)) error {
	_, err := u.UpdateObject(ctx, res, ref, mutate)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Defaults returns the defaults of a controller's Config: log, or
// slog.Default() when nil, and every, or def when 0 (how often it
// retries or looks again).
func Defaults(log *slog.Logger, every, def time.Duration) (*slog.Logger, time.Duration) {
	if log == nil {
		log = slog.Default()
	}
	if every == 0 {
		every = def
	}
	return log, every
}

// ServiceAccountUser returns the identity of the kube-system
// ServiceAccount name, a controller's own as kube-controller-manager
// runs it with --use-service-account-credentials: the bootstrap policy
// grants each controller's role to that ServiceAccount.
func ServiceAccountUser(name string) identity.User {
	return identity.User{
		Name:   "system:serviceaccount:kube-system:" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
	}
}
