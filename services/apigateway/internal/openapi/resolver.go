package openapi

import (
	"fmt"
	"strings"
	"sync"

	"github.com/meridian-cp/meridian/lib/kube/crdschema"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// SchemaResolver resolves the OpenAPI schema of a kind the registry
// serves, every $ref inlined, as kube-apiserver's resolver does for the
// type checking of admission policies (resolver.SchemaResolver): a
// built-in kind's from its Go type (the server-side apply definitions,
// SSASchemas, which carry the list and map markers that CEL's list
// equality follows), a custom resource's from its CRD version's schema
// (crdschema.OpenAPIV3). Safe for concurrent use; built-in kinds' schemas
// are resolved once and kept, custom kinds' are resolved at each call, so
// that a changed CRD is seen at once.
type SchemaResolver struct {
	reg *registry.Registry

	mu      sync.Mutex
	builtin map[k8sschema.GroupVersionKind]*spec.Schema
}

var _ resolver.SchemaResolver = (*SchemaResolver)(nil)

// NewSchemaResolver returns the resolver of the kinds reg serves.
func NewSchemaResolver(reg *registry.Registry) *SchemaResolver {
	return &SchemaResolver{reg: reg, builtin: map[k8sschema.GroupVersionKind]*spec.Schema{}}
}

// ResolveSchema returns the schema of gvk; the error wraps
// resolver.ErrSchemaNotFound when the registry serves no such kind. The
// schema returned must not be modified.
func (r *SchemaResolver) ResolveSchema(gvk k8sschema.GroupVersionKind) (*spec.Schema, error) {
	var res *registry.Resource
	for _, candidate := range r.reg.All() {
		if candidate.GVK() == gvk {
			res = candidate
			break
		}
	}
	if res == nil {
		return nil, fmt.Errorf("openapi: %v: %w", gvk, resolver.ErrSchemaNotFound)
	}
	if res.Custom != nil {
		doc, err := crdschema.OpenAPIV3(res.Custom.CRD, res.Custom.Version)
		if err != nil {
			return nil, fmt.Errorf("openapi: %v: %w", gvk, err)
		}
		const prefix = "#/components/schemas/"
		return populate(doc.Components.Schemas, prefix, prefix+crdschema.ModelName(gvk.Group, gvk.Version, gvk.Kind))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.builtin[gvk]; ok {
		return s, nil
	}
	defs, err := SSASchemas(registry.New(res))
	if err != nil {
		return nil, err
	}
	root := ""
	for name, def := range defs {
		if hasGVK(def, gvk) {
			root = name
			break
		}
	}
	if root == "" {
		return nil, fmt.Errorf("openapi: no definition of %v: %w", gvk, resolver.ErrSchemaNotFound)
	}
	const prefix = "#/definitions/"
	s, err := populate(defs, prefix, prefix+root)
	if err != nil {
		return nil, err
	}
	r.builtin[gvk] = s
	return s, nil
}

// populate inlines every reference (under prefix) of the definition root
// names.
func populate(defs map[string]*spec.Schema, prefix, root string) (*spec.Schema, error) {
	return resolver.PopulateRefs(func(ref string) (*spec.Schema, bool) {
		name, ok := strings.CutPrefix(ref, prefix)
		if !ok {
			return nil, false
		}
		s, ok := defs[name]
		if !ok {
			return nil, false
		}
		c := *s
		return &c, true
	}, root)
}

// hasGVK reports whether def is tagged as the definition of gvk.
func hasGVK(def *spec.Schema, gvk k8sschema.GroupVersionKind) bool {
	gvks, _ := def.Extensions["x-kubernetes-group-version-kind"].([]any)
	for _, g := range gvks {
		m, _ := g.(map[string]any)
		if m["group"] == gvk.Group && m["version"] == gvk.Version && m["kind"] == gvk.Kind {
			return true
		}
	}
	return false
}
