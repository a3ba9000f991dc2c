package openapi

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/meridian-cp/meridian/lib/kube/crdschema"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/typeschema"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// ErrSchemaNotFound is the error (wrapped) of ResolveSchema for a kind the
// registry does not serve.
var ErrSchemaNotFound = errors.New("openapi: schema not found")

// SchemaResolver resolves the OpenAPI schema of a kind the registry
// serves, every $ref inlined, as kube-apiserver's resolver does for the
// type checking of admission policies (k8s.io/apiserver's
// resolver.SchemaResolver): a built-in kind's from its Go type (the
// server-side apply definitions, typeschema.SSASchemas, which carry the
// list and map markers that CEL's list equality follows), a custom
// resource's from its CRD version's schema (crdschema.OpenAPIV3). Safe
// for concurrent use; built-in kinds' schemas are resolved once and kept,
// custom kinds' are resolved at each call, so that a changed CRD is seen
// at once.
type SchemaResolver struct {
	reg *registry.Registry

	mu      sync.Mutex
	builtin map[k8sschema.GroupVersionKind]*spec.Schema
}

// NewSchemaResolver returns the resolver of the kinds reg serves.
func NewSchemaResolver(reg *registry.Registry) *SchemaResolver {
	return &SchemaResolver{reg: reg, builtin: map[k8sschema.GroupVersionKind]*spec.Schema{}}
}

// ResolveSchema returns the schema of gvk; the error wraps
// ErrSchemaNotFound when the registry serves no such kind. The
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
		return nil, fmt.Errorf("openapi: %v: %w", gvk, ErrSchemaNotFound)
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
	defs, err := typeschema.SSASchemas(registry.New(res))
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
		return nil, fmt.Errorf("openapi: no definition of %v: %w", gvk, ErrSchemaNotFound)
	}
	const prefix = "#/definitions/"
	s, err := populate(defs, prefix, prefix+root)
	if err != nil {
		return nil, err
	}
	r.builtin[gvk] = s
	return s, nil
}

// populate returns the definition root (a reference under prefix) with
// every reference inlined, as kube-apiserver's resolver.PopulateRefs: a
// reference is replaced by a copy of its definition, also when wrapped in
// allOf; a reference back to a definition being inlined (a recursive
// type) becomes an empty object. The definitions are not modified.
func populate(defs map[string]*spec.Schema, prefix, root string) (*spec.Schema, error) {
	p := refInliner{defs: defs, prefix: prefix, visiting: map[string]bool{}}
	def, ok := p.lookup(root)
	if !ok {
		return nil, fmt.Errorf("openapi: no definition %q: %w", root, ErrSchemaNotFound)
	}
	p.visiting[root] = true
	return p.inline(def)
}

// refInliner inlines references under prefix to defs; visiting holds the
// references whose definitions are being inlined (the path from the root).
type refInliner struct {
	defs     map[string]*spec.Schema
	prefix   string
	visiting map[string]bool
}

func (p *refInliner) lookup(ref string) (*spec.Schema, bool) {
	name, ok := strings.CutPrefix(ref, p.prefix)
	if !ok {
		return nil, false
	}
	s, ok := p.defs[name]
	return s, ok
}

// inline returns s with its references inlined: s itself when it has none,
// else a copy.
func (p *refInliner) inline(s *spec.Schema) (*spec.Schema, error) {
	result, changed := *s, false
	if ref, ok := refOf(s); ok {
		if p.visiting[ref] {
			return &spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}}}, nil
		}
		def, ok := p.lookup(ref)
		if !ok {
			return nil, fmt.Errorf("openapi: cannot resolve %q: %w", ref, ErrSchemaNotFound)
		}
		p.visiting[ref] = true
		defer delete(p.visiting, ref)
		result, changed = *def, true
	}
	if len(result.Properties) > 0 {
		props, propsChanged := make(map[string]spec.Schema, len(result.Properties)), false
		for name, prop := range result.Properties {
			inlined, err := p.inline(&prop)
			if err != nil {
				return nil, err
			}
			propsChanged = propsChanged || inlined != &prop
			props[name] = *inlined
		}
		if propsChanged {
			result.Properties, changed = props, true
		}
	}
	if ap := result.AdditionalProperties; ap != nil && ap.Schema != nil {
		inlined, err := p.inline(ap.Schema)
		if err != nil {
			return nil, err
		}
		if inlined != ap.Schema {
			c := *ap
			c.Schema = inlined
			result.AdditionalProperties, changed = &c, true
		}
	}
	if items := result.Items; items != nil && items.Schema != nil {
		inlined, err := p.inline(items.Schema)
		if err != nil {
			return nil, err
		}
		if inlined != items.Schema {
			c := *items
			c.Schema = inlined
			result.Items, changed = &c, true
		}
	}
	if !changed {
		return s, nil
	}
	return &result, nil
}

// refOf is s's reference, also when wrapped in allOf (which keeps a
// reference's description beside it).
func refOf(s *spec.Schema) (string, bool) {
	if s.Ref.GetURL() != nil {
		return s.Ref.String(), true
	}
	for i := range s.AllOf {
		if ref, ok := refOf(&s.AllOf[i]); ok {
			return ref, true
		}
	}
	return "", false
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
