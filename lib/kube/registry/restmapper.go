package registry

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// RESTMapper maps between the kinds and resources a registry serves now
// (custom resources included, as they are at each call), as
// kube-apiserver's discovery-backed RESTMapper maps them. An empty group,
// version or resource of a partial resource or kind matches any; the
// matches come in registration order. Resource names are matched exactly
// (lower-case plural).
type RESTMapper struct {
	reg *Registry
}

var _ meta.RESTMapper = RESTMapper{}

// NewRESTMapper returns the RESTMapper of reg.
func NewRESTMapper(reg *Registry) RESTMapper { return RESTMapper{reg: reg} }

// matching returns the resources that resource (partial: empty fields
// match any) names.
func (m RESTMapper) matching(resource schema.GroupVersionResource) []*Resource {
	if resource.Group != "" && resource.Version != "" {
		if res, ok := m.reg.Lookup(resource); ok {
			return []*Resource{res}
		}
		return nil
	}
	var out []*Resource
	for _, res := range m.reg.All() {
		g := res.GVR
		if g.Resource == resource.Resource && (resource.Group == "" || g.Group == resource.Group) && (resource.Version == "" || g.Version == resource.Version) {
			out = append(out, res)
		}
	}
	return out
}

// KindsFor returns the kinds of the resources resource names.
func (m RESTMapper) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	found := m.matching(resource)
	if len(found) == 0 {
		return nil, &meta.NoResourceMatchError{PartialResource: resource}
	}
	out := make([]schema.GroupVersionKind, len(found))
	for i, res := range found {
		out[i] = res.GVK()
	}
	return out, nil
}

// KindFor returns the kind of the one resource resource names.
func (m RESTMapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	kinds, err := m.KindsFor(resource)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	if len(kinds) > 1 {
		return schema.GroupVersionKind{}, &meta.AmbiguousResourceError{PartialResource: resource, MatchingKinds: kinds}
	}
	return kinds[0], nil
}

// ResourcesFor returns the resources input names.
func (m RESTMapper) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	found := m.matching(input)
	if len(found) == 0 {
		return nil, &meta.NoResourceMatchError{PartialResource: input}
	}
	out := make([]schema.GroupVersionResource, len(found))
	for i, res := range found {
		out[i] = res.GVR
	}
	return out, nil
}

// ResourceFor returns the one resource input names.
func (m RESTMapper) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	gvrs, err := m.ResourcesFor(input)
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	if len(gvrs) > 1 {
		return schema.GroupVersionResource{}, &meta.AmbiguousResourceError{PartialResource: input, MatchingResources: gvrs}
	}
	return gvrs[0], nil
}

// RESTMappings returns the mappings of kind gk in versions (none: every
// served version).
func (m RESTMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	var out []*meta.RESTMapping
	for _, res := range m.reg.All() {
		if res.GVR.Group != gk.Group || res.Kind != gk.Kind || (len(versions) > 0 && !slices.Contains(versions, res.GVR.Version)) {
			continue
		}
		scope := meta.RESTScopeRoot
		if res.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		out = append(out, &meta.RESTMapping{Resource: res.GVR, GroupVersionKind: res.GVK(), Scope: scope})
	}
	if len(out) == 0 {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return out, nil
}

// RESTMapping returns the first mapping of kind gk in versions (none:
// every served version).
func (m RESTMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	ms, err := m.RESTMappings(gk, versions...)
	if err != nil {
		return nil, err
	}
	return ms[0], nil
}

// ResourceSingularizer returns the singular name of resource.
func (m RESTMapper) ResourceSingularizer(resource string) (string, error) {
	for _, res := range m.reg.All() {
		if res.GVR.Resource == resource {
			return res.SingularName, nil
		}
	}
	return "", fmt.Errorf("registry: no resource %q is served", resource)
}
