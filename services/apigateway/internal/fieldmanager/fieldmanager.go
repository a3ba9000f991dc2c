// Package fieldmanager tracks metadata.managedFields and merges server-side
// apply requests, with k8s.io/apimachinery's managedfields package (which
// wraps sigs.k8s.io/structured-merge-diff).
//
// One managedfields.FieldManager is built per kind and subresource when a
// Managers is made, from a structured schema derived from the kind's Go
// type (openapi.SSASchemas); a kind whose schema cannot be converted falls
// back to the deduced type converter (every list atomic). Request-time work
// is the merge itself.
package fieldmanager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/openapi"
	"google.golang.org/grpc/metadata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// UserAgentMetadata is the gRPC metadata key through which the REST front
// end passes the client's User-Agent header: the default field manager of
// a write that names none, as in kube-apiserver.
const UserAgentMetadata = "x-meridian-user-agent"

// StatusSubresource is the only subresource whose writes are tracked apart
// from the main resource.
const StatusSubresource = "status"

// Managers holds the field managers of a registry's kinds. It is immutable
// once built and safe for concurrent use.
type Managers struct {
	byKey map[key]*managedfields.FieldManager
	// deduced lists the kinds served with the deduced type converter.
	deduced []schema.GroupVersionKind
}

type key struct {
	gvr         schema.GroupVersionResource
	subresource string
}

// New builds the field managers of every kind of reg: one for the main
// resource and one for the status subresource where it is served.
func New(reg *registry.Registry) (*Managers, error) {
	m := &Managers{byKey: map[key]*managedfields.FieldManager{}}
	for _, gv := range reg.GroupVersions() {
		for _, res := range reg.Resources(gv) {
			tc, deduced := typeConverter(res)
			if deduced {
				m.deduced = append(m.deduced, res.GVK())
			}
			subs := []string{""}
			if res.HasSubresource(StatusSubresource) {
				subs = append(subs, StatusSubresource)
			}
			for _, sub := range subs {
				conv := kindConverter{res: res}
				fm, err := managedfields.NewDefaultFieldManager(tc, conv, conv, conv, res.GVK(), res.GVK().GroupVersion(), sub, resetFields(res, sub))
				if err != nil {
					return nil, fmt.Errorf("fieldmanager: %s: %w", res.GVR, err)
				}
				m.byKey[key{res.GVR, sub}] = fm
			}
		}
	}
	return m, nil
}

// Deduced returns the kinds whose schema could not be converted and whose
// lists are therefore all merged atomically.
func (m *Managers) Deduced() []schema.GroupVersionKind { return m.deduced }

// typeConverter builds the structured type converter of one kind, or the
// deduced one when its schema does not convert.
func typeConverter(res *registry.Resource) (tc managedfields.TypeConverter, deduced bool) {
	defs, err := openapi.SSASchemas(registry.New(res))
	if err == nil {
		if tc, err = managedfields.NewTypeConverter(defs, false); err == nil {
			return tc, false
		}
	}
	return managedfields.NewDeducedTypeConverter(), true
}

// resetFields are the fields a write through (sub)resource sub does not set
// and so never owns: status through the main resource, everything but
// status (spec and metadata) through the status subresource.
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

func (m *Managers) lookup(res *registry.Resource, sub string) (*managedfields.FieldManager, bool) {
	if sub != StatusSubresource {
		sub = ""
	}
	fm, ok := m.byKey[key{res.GVR, sub}]
	return fm, ok
}

// Update records manager's write of obj over live (an empty object of the
// kind for a create) with an Update entry, and returns obj with its
// managedFields set. managedFields that obj brings are kept when they are
// valid (a client may rewrite them), reset when they are [] or [{}], and
// replaced by live's otherwise. It never fails a write: when tracking
// fails, obj keeps live's managedFields.
func (m *Managers) Update(res *registry.Resource, subresource string, live, obj runtime.Object, manager string) runtime.Object {
	fm, ok := m.lookup(res, subresource)
	if !ok {
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
func (m *Managers) Apply(res *registry.Resource, subresource string, live runtime.Object, patch *unstructured.Unstructured, manager string, force bool) (runtime.Object, error) {
	fm, ok := m.lookup(res, subresource)
	if !ok {
		return nil, apierrors.NewMethodNotSupported(res.GVR.GroupResource(), "apply")
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
	if _, ok := obj.(*unstructured.Unstructured); ok {
		// The managers convert to the kind's Go type; an unstructured
		// result would be a bug, not the client's fault.
		return nil, apierrors.NewInternalError(fmt.Errorf("fieldmanager: apply of %s returned an unstructured object", res.GVK()))
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
// it. The User-Agent comes from the REST front end (UserAgentMetadata) or,
// for a gRPC client, from its own user-agent.
func Manager(ctx context.Context, fieldManager string) string {
	if fieldManager != "" {
		return fieldManager
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(UserAgentMetadata); len(v) > 0 {
		return prefixFromUserAgent(v[0])
	}
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
