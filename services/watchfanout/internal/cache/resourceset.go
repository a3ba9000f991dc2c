package cache

import (
	"strings"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// resourceSet is one state of the resources the cache serves: the
// built-in ones, fixed at New, and those of the established CRDs as of
// one revision of the store watch (custom.go).
//
// Invariant: a resourceSet is immutable. The apply goroutine builds a new
// one and swaps it in (Cache.set) whenever the CRDs it serves change, so
// a reader (a request resolving its resource, the bookmark ticker) sees
// one consistent set and takes no lock.
type resourceSet struct {
	byGVR map[schema.GroupVersionResource]*Resource
	// byPrefix holds, by store key prefix (KeyPrefix("")), every resource
	// stored there: one for a built-in kind, one per served version of a
	// CRD, storage version first. Each gets every event of the prefix.
	byPrefix map[string][]*Resource
	all      []*Resource
}

func newResourceSet(builtin []*Resource, crds map[string]*crdEntry) *resourceSet {
	s := &resourceSet{byGVR: map[schema.GroupVersionResource]*Resource{}, byPrefix: map[string][]*Resource{}}
	add := func(r *Resource) {
		if _, ok := s.byGVR[r.res.GVR]; ok {
			// A built-in resource or an earlier CRD's version is never
			// shadowed (the gateway's registry keeps the same rule).
			return
		}
		s.byGVR[r.res.GVR] = r
		p := r.res.KeyPrefix("")
		s.byPrefix[p] = append(s.byPrefix[p], r)
		s.all = append(s.all, r)
	}
	for _, r := range builtin {
		add(r)
	}
	for _, e := range sortedEntries(crds) {
		for _, r := range e.res {
			add(r)
		}
	}
	return s
}

// forKey returns the resources whose store keys hold key (nil for a key
// outside every resource's key space). A core resource's prefix has one
// path segment after the root, the others two (group, resource).
func (s *resourceSet) forKey(key string) []*Resource {
	rest, ok := strings.CutPrefix(key, registry.KeyRoot)
	if !ok {
		return nil
	}
	end := 0
	for range 2 {
		i := strings.IndexByte(rest[end:], '/')
		if i < 0 {
			return nil
		}
		end += i + 1
		if rs := s.byPrefix[registry.KeyRoot+rest[:end]]; rs != nil {
			return rs
		}
	}
	return nil
}
