// Package registry is the table of resources the gateway serves: for each,
// its group/version/resource, kind, scope, discovery data, how its objects
// are made and where they live in the store, and its Strategy (defaulting
// and validation). Adding a built-in kind is adding an entry here.
package registry

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Strategy is the per-kind behaviour of writes.
type Strategy interface {
	// PrepareForCreate defaults a new object (status, derived fields).
	PrepareForCreate(obj runtime.Object)
	// PrepareForUpdate carries over what an update may not change.
	PrepareForUpdate(obj, old runtime.Object)
	// Validate checks a new object.
	Validate(obj runtime.Object) field.ErrorList
	// ValidateUpdate checks an update against the stored object.
	ValidateUpdate(obj, old runtime.Object) field.ErrorList
}

// SubresourceStrategy is implemented by the Strategy of kinds with
// subresources that write part of the object (status, finalize).
type SubresourceStrategy interface {
	// PrepareForSubresourceUpdate keeps everything of obj that a write
	// through subresource sub may not change as it is in old. It reports
	// false for a subresource the kind does not write.
	PrepareForSubresourceUpdate(sub string, obj, old runtime.Object) bool
}

// HasSubresource reports whether r serves subresource sub.
func (r *Resource) HasSubresource(sub string) bool {
	for _, s := range r.Subresources {
		if s == sub {
			return true
		}
	}
	return false
}

// Resource describes one served resource.
type Resource struct {
	// GVR is the resource's group, version and plural name.
	GVR schema.GroupVersionResource
	// Kind is the object kind; ListKind the kind of its lists.
	Kind, ListKind string
	// SingularName is the lower-case singular name.
	SingularName string
	// Namespaced is false for cluster-scoped resources.
	Namespaced bool
	// ShortNames are kubectl's short names.
	ShortNames []string
	// Categories are kubectl's categories (e.g. "all").
	Categories []string
	// Verbs are the verbs served.
	Verbs []string
	// New returns an empty object; NewList an empty list.
	New, NewList func() runtime.Object
	// Strategy defaults and validates writes.
	Strategy Strategy
	// Subresources are the served subresources (e.g. "status").
	Subresources []string
	// Fields returns the kind's own selectable fields (beyond metadata.name
	// and metadata.namespace, which every kind has) with their values in
	// obj; nil when the kind has none. Called with a nil obj it must still
	// return every field name (values empty), so selectors can be checked.
	Fields func(obj runtime.Object) map[string]string
	// Columns are the kind's Table columns after Name (what kubectl get
	// prints); nil gives the default, Created At.
	Columns []Column
	// Custom is the CRD version of a custom resource; nil for a
	// built-in one.
	Custom *Custom
	// TTL, when positive, makes objects expire that long after their last
	// write (through store leases), as Events do.
	TTL time.Duration
}

// Column is one Table column of a kind.
type Column struct {
	// Definition describes the column.
	Definition metav1.TableColumnDefinition
	// Cell computes the column's cell for obj at time now.
	Cell func(obj runtime.Object, now time.Time) any
}

// GVK returns the resource's group, version and kind.
func (r *Resource) GVK() schema.GroupVersionKind { return r.GVR.GroupVersion().WithKind(r.Kind) }

// KeyPrefix returns the store key prefix of the resource's objects in
// namespace ns ("" for all namespaces or cluster-scoped), ending in "/":
//
//	/registry/<resource>/[<namespace>/]             core group
//	/registry/<group>/<resource>/[<namespace>/]     other groups
func (r *Resource) KeyPrefix(ns string) string {
	var b strings.Builder
	b.WriteString(KeyRoot)
	if r.GVR.Group != "" {
		b.WriteString(r.GVR.Group)
		b.WriteByte('/')
	}
	b.WriteString(r.GVR.Resource)
	b.WriteByte('/')
	if ns != "" {
		b.WriteString(ns)
		b.WriteByte('/')
	}
	return b.String()
}

// Key returns the store key of one object.
func (r *Resource) Key(ns, name string) string { return r.KeyPrefix(ns) + name }

// KeyRoot prefixes every resource's store keys.
const KeyRoot = "/registry/"

// Registry is the set of served resources: the built-in ones, fixed when
// it is made, and the custom ones (CRD versions), replaced as a whole by
// SetCustom while it is in use.
//
// Invariant: readers see one table at a time. The table is immutable and
// swapped through an atomic pointer, so a reader that looks up several
// resources (discovery, a relist) sees one consistent set, never half of
// an update, and takes no lock.
type Registry struct {
	builtin []*Resource
	cur     atomic.Pointer[table]

	// mu serializes SetCustom and guards changed.
	mu      sync.Mutex
	changed chan struct{} // closed and replaced by every SetCustom
}

// table is one immutable state of a Registry.
type table struct {
	generation uint64 // SetCustom calls before this table
	byGVR      map[schema.GroupVersionResource]*Resource
	byPrefix   map[string]*Resource // KeyPrefix("") → the first resource stored there
	ordered    []*Resource
	custom     []*Resource
}

// New builds a registry of built-in resources.
func New(resources ...*Resource) *Registry {
	r := &Registry{builtin: resources, changed: make(chan struct{})}
	r.cur.Store(newTable(resources, nil))
	return r
}

func newTable(builtin, custom []*Resource) *table {
	t := &table{byGVR: map[schema.GroupVersionResource]*Resource{}, byPrefix: map[string]*Resource{}}
	add := func(res *Resource) {
		t.byGVR[res.GVR] = res
		if _, ok := t.byPrefix[res.KeyPrefix("")]; !ok {
			t.byPrefix[res.KeyPrefix("")] = res
		}
		t.ordered = append(t.ordered, res)
	}
	for _, res := range builtin {
		add(res)
	}
	for _, res := range custom {
		// A built-in resource is never shadowed; CRD validation keeps
		// CRDs out of the built-in groups, this keeps the table sound
		// whatever is stored.
		if _, ok := t.byGVR[res.GVR]; ok {
			continue
		}
		add(res)
		t.custom = append(t.custom, res)
	}
	return t
}

// SetCustom replaces the custom resources with custom (nil: none). The
// resources of one CRD should come storage version first: ForKey returns
// the first resource registered for a key prefix. Resources whose GVR a
// built-in resource has are left out.
func (r *Registry) SetCustom(custom []*Resource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := newTable(r.builtin, custom)
	t.generation = r.cur.Load().generation + 1
	r.cur.Store(t)
	close(r.changed)
	r.changed = make(chan struct{})
}

// Changed returns a channel closed at the next SetCustom.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Custom returns the custom resources being served.
func (r *Registry) Custom() []*Resource { return r.cur.Load().custom }

// CustomGeneration returns the custom resources being served and how
// many times they were replaced (SetCustom), read together: what is
// derived from them can be kept until the generation changes.
func (r *Registry) CustomGeneration() ([]*Resource, uint64) {
	t := r.cur.Load()
	return t.custom, t.generation
}

// All returns every served resource, built-in first, in registration
// order.
func (r *Registry) All() []*Resource { return r.cur.Load().ordered }

// ForKey returns the resource whose store keys hold key (of several
// versions stored under one prefix, the first registered), or nil for a
// key outside every resource's key space.
func (r *Registry) ForKey(key string) *Resource {
	rest, ok := strings.CutPrefix(key, KeyRoot)
	if !ok {
		return nil
	}
	t := r.cur.Load()
	// Core resources have one path segment, the others two (group,
	// resource): try both.
	end := 0
	for range 2 {
		i := strings.IndexByte(rest[end:], '/')
		if i < 0 {
			return nil
		}
		end += i + 1
		if res := t.byPrefix[KeyRoot+rest[:end]]; res != nil {
			return res
		}
	}
	return nil
}

// Lookup finds a resource.
func (r *Registry) Lookup(gvr schema.GroupVersionResource) (*Resource, bool) {
	res, ok := r.cur.Load().byGVR[gvr]
	return res, ok
}

// GroupVersions returns every served group/version, the core group first,
// then groups by name.
func (r *Registry) GroupVersions() []schema.GroupVersion {
	seen := map[schema.GroupVersion]bool{}
	var out []schema.GroupVersion
	for _, res := range r.cur.Load().ordered {
		gv := res.GVR.GroupVersion()
		if !seen[gv] {
			seen[gv] = true
			out = append(out, gv)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// Resources returns the resources of one group/version, in registration
// order.
func (r *Registry) Resources(gv schema.GroupVersion) []*Resource {
	var out []*Resource
	for _, res := range r.cur.Load().ordered {
		if res.GVR.GroupVersion() == gv {
			out = append(out, res)
		}
	}
	return out
}

// APIResource returns the discovery entry of a resource.
func (r *Resource) APIResource() metav1.APIResource {
	return metav1.APIResource{
		Name:         r.GVR.Resource,
		SingularName: r.SingularName,
		Namespaced:   r.Namespaced,
		Kind:         r.Kind,
		Verbs:        r.Verbs,
		ShortNames:   r.ShortNames,
		Categories:   r.Categories,
	}
}

// CRUDVerbs are the verbs of an ordinary resource.
var CRUDVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
