// Package fieldmanager tracks metadata.managedFields and merges server-side
// apply requests, with k8s.io/apimachinery's managedfields package (which
// wraps sigs.k8s.io/structured-merge-diff).
//
// One managedfields.FieldManager is built per kind and subresource, once
// per process (ForKind, Prepare), from a structured schema derived from the
// kind's Go type (typeschema.SSASchemas); a kind whose schema cannot be
// converted falls back to the deduced type converter (every list atomic).
// Request-time work is the merge itself.
//
// A custom resource's managers are kube-apiserver's CRD field managers
// (managedfields.NewDefaultCRDFieldManager): the served version is the
// hub, and a managedFields entry recorded at another version of the CRD
// is compared at its own version, the object converted there with the
// CRD's conversion (None, or its webhook through VersionConverter), so a
// write through v1 takes over the fields a v1beta1 writer owned. Entries
// keep the apiVersion they were recorded at, on reads and writes, as
// upstream.
package fieldmanager

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/meridian-cp/meridian/lib/kube/crdschema"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/typeschema"
	"google.golang.org/grpc/metadata"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// userAgentKey is the context key of the REST client's User-Agent header
// (WithUserAgent).
type userAgentKey struct{}

// WithUserAgent returns ctx carrying the User-Agent header of the REST
// request it serves: the default field manager of a write that names none,
// as in kube-apiserver.
func WithUserAgent(ctx context.Context, userAgent string) context.Context {
	return context.WithValue(ctx, userAgentKey{}, userAgent)
}

// StatusSubresource and ScaleSubresource are the subresources whose
// writes are tracked apart from the main resource (scale for custom
// resources: their entry owns the replicas path, as kube-apiserver
// records a write through a custom resource's /scale).
const (
	StatusSubresource = "status"
	ScaleSubresource  = "scale"
)

// Kind holds the field managers of one kind: one for the main resource
// and one for the status subresource where the kind serves it. It is
// immutable and safe for concurrent use.
type Kind struct {
	res *registry.Resource
	// main, status and scale are the managers; status and scale are nil
	// without that subresource (scale: for custom resources only).
	main, status, scale *managedfields.FieldManager
	// deduced: the kind's schema did not convert, so every list is atomic.
	deduced bool
}

// VersionConverter converts custom resources between the versions of
// their CRD, in place (*crdconvert.Converter).
type VersionConverter interface {
	Convert(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, objs []*unstructured.Unstructured, version string) error
}

// customKindKey is the Memo key of a custom resource's Kind: it depends on
// the converter it was built with.
type customKindKey struct{ versions VersionConverter }

// kindKey is what a Kind depends on: the kind, its Go type, and whether
// it has a status subresource.
type kindKey struct {
	gvk    schema.GroupVersionKind
	typ    reflect.Type
	status bool
}

// kinds caches Kinds for the whole process. A Kind depends only on its
// kindKey (the Go types are static), so gateways and tests that build
// several registries share them, and the cache is bounded by the number of
// kinds compiled in. Values are *Kind.
var kinds sync.Map

// ForKind returns the field managers of res, building them on first use
// (converting the kind's schema takes milliseconds; Prepare does it for a
// whole registry up front). versions converts a custom resource to the
// version of a managedFields entry recorded at another one; nil converts
// CRDs with conversion None only. Built-in kinds ignore it.
func ForKind(res *registry.Resource, versions VersionConverter) (*Kind, error) {
	if res.Custom != nil {
		// A custom resource's managers follow its CRD: kept with the
		// resource, rebuilt for each state of the CRD.
		v, err := res.Custom.Memo(customKindKey{versions}, func() (any, error) { return newKind(res, versions) })
		if err != nil {
			return nil, err
		}
		return v.(*Kind), nil
	}
	k := kindKey{res.GVK(), reflect.TypeOf(res.New()), res.HasSubresource(StatusSubresource)}
	if v, ok := kinds.Load(k); ok {
		return v.(*Kind), nil
	}
	kind, err := newKind(res, nil)
	if err != nil {
		return nil, err
	}
	v, _ := kinds.LoadOrStore(k, kind)
	return v.(*Kind), nil
}

// Prepare builds the field managers of every kind of reg, so that no
// request pays for it, and returns the kinds served with the deduced type
// converter (lists merged atomically) because their schema did not
// convert.
func Prepare(reg *registry.Registry) (deduced []schema.GroupVersionKind, err error) {
	for _, gv := range reg.GroupVersions() {
		for _, res := range reg.Resources(gv) {
			k, err := ForKind(res, nil)
			if err != nil {
				return nil, err
			}
			if k.deduced {
				deduced = append(deduced, res.GVK())
			}
		}
	}
	return deduced, nil
}

func newKind(res *registry.Resource, versions VersionConverter) (*Kind, error) {
	tc, deduced := typeConverter(res)
	k := &Kind{res: res, deduced: deduced}
	conv := kindConverter{res: res, versions: versions}
	newManager := func(sub string) (*managedfields.FieldManager, error) {
		if res.Custom != nil {
			return managedfields.NewDefaultCRDFieldManager(tc, conv, conv, conv, res.GVK(), res.GVK().GroupVersion(), sub, resetFields(res, sub))
		}
		return managedfields.NewDefaultFieldManager(tc, conv, conv, conv, res.GVK(), res.GVK().GroupVersion(), sub, resetFields(res, sub))
	}
	var err error
	if k.main, err = newManager(""); err != nil {
		return nil, fmt.Errorf("fieldmanager: %s: %w", res.GVR, err)
	}
	if res.HasSubresource(StatusSubresource) {
		if k.status, err = newManager(StatusSubresource); err != nil {
			return nil, fmt.Errorf("fieldmanager: %s/status: %w", res.GVR, err)
		}
	}
	if res.Custom != nil && res.HasSubresource(ScaleSubresource) {
		if k.scale, err = newManager(ScaleSubresource); err != nil {
			return nil, fmt.Errorf("fieldmanager: %s/scale: %w", res.GVR, err)
		}
	}
	return k, nil
}

// typeConverter builds the structured type converter of one kind, or the
// deduced one when its schema does not convert.
func typeConverter(res *registry.Resource) (tc managedfields.TypeConverter, deduced bool) {
	if res.Custom != nil {
		// The CRD's structural schema: its list and map markers drive
		// merges. A CRD without one (or a schema that does not convert)
		// merges as deduced.
		if tc, err := crdschema.TypeConverter(res.Custom.CRD); err == nil {
			return tc, false
		}
		return managedfields.NewDeducedTypeConverter(), true
	}
	if tc, err := typeschema.NewTypeConverter(registry.New(res)); err == nil {
		return tc, false
	}
	return managedfields.NewDeducedTypeConverter(), true
}

// resetFields are the fields a write through (sub)resource sub does not set
// and so never owns: status through the main resource, spec through the
// status subresource.
func resetFields(res *registry.Resource, sub string) map[fieldpath.APIVersion]fieldpath.Filter {
	if !res.HasSubresource(StatusSubresource) {
		return nil
	}
	var set *fieldpath.Set
	if sub == StatusSubresource {
		set = fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))
	} else {
		set = fieldpath.NewSet(fieldpath.MakePathOrDie("status"))
	}
	return map[fieldpath.APIVersion]fieldpath.Filter{
		fieldpath.APIVersion(res.GVK().GroupVersion().String()): fieldpath.NewExcludeSetFilter(set),
	}
}

// manager returns the field manager of a write through subresource sub
// ("", "status" or "scale"); nil for other subresources, which are not
// tracked.
func (k *Kind) manager(sub string) *managedfields.FieldManager {
	switch sub {
	case "":
		return k.main
	case StatusSubresource:
		return k.status
	case ScaleSubresource:
		return k.scale
	}
	return nil
}

// Update records manager's write of obj over live (an empty object of the
// kind for a create) with an Update entry, and returns obj with its
// managedFields set. managedFields that obj brings are kept when they are
// valid (a client may rewrite them), reset when they are [] or [{}], and
// replaced by live's otherwise. It never fails a write: when tracking
// fails, obj keeps live's managedFields.
func (k *Kind) Update(sub string, live, obj runtime.Object, manager string) runtime.Object {
	fm := k.manager(sub)
	if fm == nil {
		return obj
	}
	return fm.UpdateNoErrors(live, obj, manager)
}

// Apply merges the applied configuration patch into live as manager (force
// takes over the fields other managers own) and returns the merged object,
// of the kind's Go type, with its managedFields. Conflicts are a 409
// Conflict with one FieldManagerConflict cause per field; a patch that does
// not fit the kind's schema, names another kind or sets managedFields is a
// 400 BadRequest.
func (k *Kind) Apply(sub string, live runtime.Object, patch *unstructured.Unstructured, manager string, force bool) (runtime.Object, error) {
	fm := k.manager(sub)
	if fm == nil {
		return nil, apierrors.NewMethodNotSupported(k.res.GVR.GroupResource(), "apply")
	}
	obj, err := fm.Apply(live, patch, manager, force)
	if err != nil {
		var se apierrors.APIStatus
		if errors.As(err, &se) {
			return nil, err
		}
		// The live object is ours and always converts: what failed is the
		// applied configuration.
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if reflect.TypeOf(obj) != reflect.TypeOf(live) {
		// The managers convert to the kind's Go type; anything else would
		// be a bug, not the client's fault.
		return nil, apierrors.NewInternalError(fmt.Errorf("fieldmanager: apply of %s returned a %T", k.res.GVK(), obj))
	}
	return obj, nil
}

// ValidateManager checks a fieldManager parameter as kube-apiserver does
// (at most 128 printable characters) and returns the errors of field path
// "fieldManager".
func ValidateManager(fieldManager string) error {
	errs := metav1validation.ValidateFieldManager(fieldManager, nil)
	if len(errs) == 0 {
		return nil
	}
	return errs.ToAggregate()
}

// Manager returns the manager of a non-apply write: fieldManager, or else
// the first segment of the client's User-Agent ("kubectl" from
// "kubectl/v1.32.4 (linux/amd64) kubernetes/…"), as kube-apiserver names
// it. The User-Agent comes from the REST front end (WithUserAgent) or, for
// a gRPC client, from its own user-agent.
func Manager(ctx context.Context, fieldManager string) string {
	if fieldManager != "" {
		return fieldManager
	}
	if ua, ok := ctx.Value(userAgentKey{}).(string); ok {
		return prefixFromUserAgent(ua)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("user-agent"); len(v) > 0 {
		return prefixFromUserAgent(v[0])
	}
	return ""
}

// prefixFromUserAgent is the User-Agent up to its first "/", without
// unprintable characters, cut to the longest valid field manager.
func prefixFromUserAgent(ua string) string {
	prefix, _, _ := strings.Cut(ua, "/")
	var b strings.Builder
	for _, r := range prefix {
		if !unicode.IsPrint(r) {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > metav1validation.FieldManagerMaxLength {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
