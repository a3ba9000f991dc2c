package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/crdschema"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/jsonpath"
)

// Custom describes the CRD version a custom resource serves. Its objects
// are *unstructured.Unstructured, stored as JSON (as kube-apiserver stores
// custom resources), never protobuf.
type Custom struct {
	// CRD is the definition the resource was built from; not to be
	// modified.
	CRD *apiextensionsv1.CustomResourceDefinition
	// Version is the served version; StorageVersion the version objects
	// are stored in (conversion None: only apiVersion differs).
	Version, StorageVersion string
	// Warning is the Warning header of every request to a deprecated
	// version; empty when the version is not deprecated.
	Warning string
	// Scale is the scale subresource's paths; nil when not served.
	Scale *apiextensionsv1.CustomResourceSubresourceScale

	// memo holds what is derived from the CRD once per resource (field
	// managers, compiled schemas): a new CRD state is a new Custom, so
	// nothing derived from an old one is used for it.
	memo sync.Map
}

// Memo returns the value stored under key, building it with build on
// first use (concurrent first uses may build it more than once; one
// value wins). A failed build is not kept.
func (c *Custom) Memo(key any, build func() (any, error)) (any, error) {
	if v, ok := c.memo.Load(key); ok {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return nil, err
	}
	v, _ = c.memo.LoadOrStore(key, v)
	return v, nil
}

// schemaKey is Memo's key of the compiled schema.
type schemaKey struct{}

// Schema returns the version's compiled schema (crdschema.Compile), built
// on first use.
func (c *Custom) Schema() (*crdschema.Schema, error) {
	v, err := c.Memo(schemaKey{}, func() (any, error) { return crdschema.Compile(c.CRD, c.Version) })
	if err != nil {
		return nil, err
	}
	return v.(*crdschema.Schema), nil
}

// DefaultOnRead applies the version's schema defaults to obj, a custom
// resource read from storage, as kube-apiserver's decoder does for every
// custom resource it reads: a default added to a CRD shows on objects
// written before it. A schema that does not compile leaves obj as it is
// (writes of the resource fail with the reason).
func (c *Custom) DefaultOnRead(obj *unstructured.Unstructured) {
	if sch, err := c.Schema(); err == nil {
		sch.DefaultOnRead(obj)
	}
}

// DefaultOnRead applies the defaults of a custom resource's schema to
// obj, read from storage (Custom.DefaultOnRead); built-in objects are
// left as they are. Every path that decodes stored objects for a client
// calls it once per decoded copy, so reads and watch events carry the
// defaults exactly once.
func (r *Resource) DefaultOnRead(obj runtime.Object) {
	if r.Custom == nil {
		return
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		r.Custom.DefaultOnRead(u)
	}
}

// Terminating reports whether the CRD is being deleted: its objects may
// be read, updated and deleted, not created.
func (c *Custom) Terminating() bool { return c.CRD.DeletionTimestamp != nil }

// CustomResources returns the resources that serve crd: one per served
// version, the storage version first (ForKey answers it for the CRD's
// store keys). It returns none for a CRD that is not Established. A CRD
// being deleted is still served (its objects are read and deleted), but
// its resources create nothing (Custom.Terminating).
func CustomResources(crd *apiextensionsv1.CustomResourceDefinition) []*Resource {
	if !IsCRDEstablished(crd) {
		return nil
	}
	storage := ""
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			storage = v.Name
		}
	}
	var out []*Resource
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		res := customResource(crd, v, storage)
		if v.Name == storage {
			out = append([]*Resource{res}, out...)
		} else {
			out = append(out, res)
		}
	}
	return out
}

// IsCRDEstablished reports whether crd's Established condition is True.
func IsCRDEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

func customResource(crd *apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion, storage string) *Resource {
	// Served names are the accepted ones (the CRD controller copies them
	// from spec once they do not conflict).
	names := crd.Status.AcceptedNames
	gv := metav1.GroupVersion{Group: crd.Spec.Group, Version: v.Name}
	apiVersion := gv.String()
	if crd.Spec.Group == "" {
		apiVersion = v.Name
	}
	kind, listKind := names.Kind, names.ListKind
	c := &Custom{CRD: crd, Version: v.Name, StorageVersion: storage}
	if v.Deprecated {
		c.Warning = fmt.Sprintf("%s %s is deprecated", apiVersion, kind)
		if v.DeprecationWarning != nil {
			c.Warning = *v.DeprecationWarning
		}
	}
	res := &Resource{
		Custom: c,
		Kind:   kind, ListKind: listKind,
		SingularName: names.Singular, ShortNames: names.ShortNames, Categories: names.Categories,
		Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		Verbs:      CRUDVerbs,
		New: func() runtime.Object {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(apiVersion)
			u.SetKind(kind)
			return u
		},
		NewList: func() runtime.Object {
			l := &unstructured.UnstructuredList{}
			l.SetAPIVersion(apiVersion)
			l.SetKind(listKind)
			return l
		},
	}
	res.GVR.Group, res.GVR.Version, res.GVR.Resource = crd.Spec.Group, v.Name, names.Plural
	strategy := customStrategy{namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped}
	if v.Subresources != nil {
		if v.Subresources.Status != nil {
			strategy.status = true
			res.Subresources = append(res.Subresources, "status")
		}
		if v.Subresources.Scale != nil {
			c.Scale = v.Subresources.Scale
			res.Subresources = append(res.Subresources, "scale")
		}
	}
	res.Strategy = strategy
	res.Columns = customColumns(v.AdditionalPrinterColumns)
	if len(v.SelectableFields) > 0 {
		res.Fields = customFields(v.SelectableFields)
	}
	return res
}

// customFields returns the Fields function of a version's selectableFields:
// each field's value as a string, empty when absent.
func customFields(sf []apiextensionsv1.SelectableField) func(runtime.Object) map[string]string {
	paths := make([]string, len(sf))
	for i, f := range sf {
		paths[i] = strings.TrimPrefix(f.JSONPath, ".")
	}
	return func(obj runtime.Object) map[string]string {
		out := make(map[string]string, len(paths))
		u, _ := obj.(*unstructured.Unstructured)
		for _, p := range paths {
			out[p] = ""
			if u == nil {
				continue
			}
			if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, strings.Split(p, ".")...); ok && v != nil {
				out[p] = fmt.Sprint(v)
			}
		}
		return out
	}
}

// customColumns returns the Table columns of additionalPrinterColumns
// (kube-apiserver's tableconvertor); Age when there are none. A column
// whose JSONPath does not parse prints nothing.
func customColumns(cols []apiextensionsv1.CustomResourceColumnDefinition) []Column {
	if len(cols) == 0 {
		return []Column{AgeColumn}
	}
	out := make([]Column, 0, len(cols))
	for _, col := range cols {
		desc := col.Description
		if desc == "" {
			desc = fmt.Sprintf("Custom resource definition column (in JSONPath format): %s", col.JSONPath)
		}
		path := jsonpath.New(col.Name)
		path.AllowMissingKeys(true)
		parseErr := path.Parse("{" + col.JSONPath + "}")
		typ := col.Type
		out = append(out, Column{
			Definition: metav1.TableColumnDefinition{Name: col.Name, Type: col.Type, Format: col.Format, Description: desc, Priority: col.Priority},
			Cell: func(obj runtime.Object, now time.Time) any {
				u, ok := obj.(*unstructured.Unstructured)
				if !ok || parseErr != nil {
					return nil
				}
				results, err := path.FindResults(u.Object)
				if err != nil || len(results) == 0 || len(results[0]) == 0 {
					return nil
				}
				value := results[0][0].Interface()
				if typ == "string" {
					var buf bytes.Buffer
					if err := path.PrintResults(&buf, []reflect.Value{reflect.ValueOf(value)}); err != nil {
						return nil
					}
					return buf.String()
				}
				return cellOf(typ, value, now)
			},
		})
	}
	return out
}

// cellOf converts a JSON value to a cell of column type typ, as
// kube-apiserver's tableconvertor does; nil when it is of another type.
func cellOf(typ string, value any, now time.Time) any {
	switch typ {
	case "integer":
		switch v := value.(type) {
		case int64:
			return v
		case float64:
			return int64(v)
		case json.Number:
			if i, err := v.Int64(); err == nil {
				return i
			}
		}
	case "number":
		switch v := value.(type) {
		case int64:
			return float64(v)
		case float64:
			return v
		case json.Number:
			if f, err := v.Float64(); err == nil {
				return f
			}
		}
	case "boolean":
		if b, ok := value.(bool); ok {
			return b
		}
	case "date":
		if s, ok := value.(string); ok {
			var ts metav1.Time
			if err := ts.UnmarshalQueryParameter(s); err != nil {
				return "<invalid>"
			}
			if ts.IsZero() {
				return "<unknown>"
			}
			return duration.HumanDuration(now.Sub(ts.Time))
		}
	}
	return nil
}

// customStrategy is the Strategy of custom resources: the spec/status
// split when the status subresource is served, and metadata.generation,
// which counts changes of everything but metadata and status.
type customStrategy struct {
	status, namespaced bool
}

var _ SubresourceStrategy = customStrategy{}

func (s customStrategy) PrepareForCreate(obj runtime.Object) {
	u := obj.(*unstructured.Unstructured)
	if s.status {
		delete(u.Object, "status")
	}
	u.SetGeneration(1)
}

func (s customStrategy) PrepareForUpdate(obj, old runtime.Object) {
	u, o := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	if s.status {
		if st, ok := o.Object["status"]; ok {
			u.Object["status"] = runtime.DeepCopyJSONValue(st)
		} else {
			delete(u.Object, "status")
		}
	}
	u.SetGeneration(o.GetGeneration())
	if !apiequality.Semantic.DeepEqual(specOf(u, s.status), specOf(o, s.status)) {
		u.SetGeneration(o.GetGeneration() + 1)
	}
}

// specOf is everything of u that counts for its generation: all but
// metadata (and status, when status is a subresource).
func specOf(u *unstructured.Unstructured, statusSplit bool) map[string]any {
	out := make(map[string]any, len(u.Object))
	for k, v := range u.Object {
		if k == "metadata" || k == "apiVersion" || k == "kind" || (statusSplit && k == "status") {
			continue
		}
		out[k] = v
	}
	return out
}

// PrepareForSubresourceUpdate: a status write changes only status; a
// scale write is turned into an update of the object by the caller, so
// it is an ordinary update here.
func (s customStrategy) PrepareForSubresourceUpdate(sub string, obj, old runtime.Object) bool {
	u, o := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	switch sub {
	case "status":
		if !s.status {
			return false
		}
		st, hasStatus := u.Object["status"]
		keep := o.DeepCopy()
		if hasStatus {
			keep.Object["status"] = st
		} else {
			delete(keep.Object, "status")
		}
		keep.SetResourceVersion(u.GetResourceVersion())
		// Labels and annotations may change through status, as
		// kube-apiserver's ResetObjectMetaForStatus allows; nothing else.
		keep.SetLabels(u.GetLabels())
		keep.SetAnnotations(u.GetAnnotations())
		keep.SetManagedFields(u.GetManagedFields())
		u.Object = keep.Object
	default:
		return false
	}
	return true
}

func (s customStrategy) Validate(obj runtime.Object) field.ErrorList {
	return apivalidation.ValidateObjectMetaAccessor(obj.(metav1.Object), s.namespaced, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
}

func (s customStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaAccessorUpdate(obj.(metav1.Object), old.(metav1.Object), field.NewPath("metadata"))
	return append(errs, s.Validate(obj)...)
}
