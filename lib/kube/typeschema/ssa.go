package typeschema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// # Schemas for server-side apply
//
// structured-merge-diff merges an applied configuration into the live object
// by schema: which lists are maps keyed by some fields, which are sets,
// which are atomic; which structs and maps merge key by key. kube-apiserver
// takes this from its generated OpenAPI (the +listType, +listMapKey,
// +mapType and +structType markers). The Go types of k8s.io/api carry part
// of it in struct tags, and SSASchemas derives the rest the way
// kube-openapi's converter does for older specs:
//
//	patchStrategy:"merge" patchMergeKey:"k"  → x-kubernetes-list-type: map, keys [k]
//	patchStrategy:"merge" (scalars)          → x-kubernetes-list-type: set
//	any other slice                          → atomic (the default)
//	maps and structs                         → granular (the default)
//	metav1.Time, Quantity, IntOrString, …    → scalars
//
// Markers that no struct tag reflects (lists keyed by several fields,
// atomic structs) are listed in listOverrides and atomicStructs below; a
// kind added to the registry whose types use such markers adds its entries
// there. The HTTP documents are built without any of this (ssa is false).

// SSASchemas returns, for every kind of reg, the OpenAPI definitions that
// managedfields.NewTypeConverter needs: named as the HTTP documents name
// them, each kind's definition tagged with x-kubernetes-group-version-kind,
// with the server-side apply extensions and without descriptions.
func SSASchemas(reg *registry.Registry) (map[string]*spec.Schema, error) {
	s := NewBuilder("#/definitions/")
	s.ssa = true
	for _, gv := range reg.GroupVersions() {
		for _, res := range reg.Resources(gv) {
			def := s.Def(s.Ref(reflect.TypeOf(res.New())))
			gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
			def["x-kubernetes-group-version-kind"] = append(gvks, map[string]any{"group": gv.Group, "version": gv.Version, "kind": res.Kind})
		}
	}
	out := make(map[string]*spec.Schema, len(s.defs))
	for name, def := range s.defs {
		data, err := json.Marshal(def)
		if err != nil {
			return nil, fmt.Errorf("typeschema: ssa schema %s: %w", name, err)
		}
		sc := new(spec.Schema)
		if err := json.Unmarshal(data, sc); err != nil {
			return nil, fmt.Errorf("typeschema: ssa schema %s: %w", name, err)
		}
		out[name] = sc
	}
	return out, nil
}

// NewTypeConverter returns the structured type converter of reg's kinds,
// from their SSASchemas: a list with x-kubernetes-list-map-keys merges per
// key (a Pod's containers by name), a set per value, and any other list
// is atomic (an applier owns it whole).
func NewTypeConverter(reg *registry.Registry) (managedfields.TypeConverter, error) {
	defs, err := SSASchemas(reg)
	if err != nil {
		return nil, err
	}
	tc, err := managedfields.NewTypeConverter(defs, false)
	if err != nil {
		return nil, fmt.Errorf("typeschema: type converter: %w", err)
	}
	return tc, nil
}

// ssaScalar makes an int-or-string scalar (Quantity, IntOrString) untyped,
// so that an applied configuration may give it as a number or a string.
func ssaScalar(out Schema) {
	if out["x-kubernetes-int-or-string"] == true {
		out["format"] = "int-or-string"
	}
}

// atomicStructs are the structs kube-apiserver marks +structType=atomic (or
// +mapType=atomic) among the types of the kinds meridian serves: an
// applier owns them whole, and an ApplyConfiguration may not name them.
var atomicStructs = map[reflect.Type]bool{
	reflect.TypeOf(metav1.LabelSelector{}):                            true,
	reflect.TypeOf(metav1.OwnerReference{}):                           true,
	reflect.TypeOf(corev1.ObjectReference{}):                          true,
	reflect.TypeOf(corev1.LocalObjectReference{}):                     true,
	reflect.TypeOf(corev1.TypedLocalObjectReference{}):                true,
	reflect.TypeOf(corev1.SecretReference{}):                          true,
	reflect.TypeOf(corev1.ConfigMapKeySelector{}):                     true,
	reflect.TypeOf(corev1.SecretKeySelector{}):                        true,
	reflect.TypeOf(corev1.FileKeySelector{}):                          true,
	reflect.TypeOf(corev1.ObjectFieldSelector{}):                      true,
	reflect.TypeOf(corev1.ResourceFieldSelector{}):                    true,
	reflect.TypeOf(corev1.NodeSelector{}):                             true,
	reflect.TypeOf(corev1.NodeSelectorTerm{}):                         true,
	reflect.TypeOf(corev1.TopologySelectorTerm{}):                     true,
	reflect.TypeOf(corev1.ScopeSelector{}):                            true,
	reflect.TypeOf(corev1.EvictionResponder{}):                        true,
	reflect.TypeOf(corev1.EndpointAddress{}):                          true,
	reflect.TypeOf(corev1.EndpointPort{}):                             true,
	reflect.TypeOf(rbacv1.Subject{}):                                  true,
	reflect.TypeOf(rbacv1.RoleRef{}):                                  true,
	reflect.TypeOf(admissionregistrationv1.ParamKind{}):               true,
	reflect.TypeOf(admissionregistrationv1.ParamRef{}):                true,
	reflect.TypeOf(admissionregistrationv1.Variable{}):                true,
	reflect.TypeOf(admissionregistrationv1.MatchResources{}):          true,
	reflect.TypeOf(admissionregistrationv1.NamedRuleWithOperations{}): true,
}

func ssaStruct(t reflect.Type, out Schema) {
	if atomicStructs[t] {
		out["x-kubernetes-map-type"] = "atomic"
	}
}

// listMapKeys are the keys of map lists that kube-apiserver keys by more
// than their patchMergeKey, by struct type and JSON field name.
var listMapKeys = map[reflect.Type]map[string][]string{
	reflect.TypeOf(corev1.Container{}):          {"ports": {"containerPort", "protocol"}},
	reflect.TypeOf(corev1.EphemeralContainer{}): {"ports": {"containerPort", "protocol"}},
	reflect.TypeOf(corev1.ServiceSpec{}):        {"ports": {"port", "protocol"}},
}

// keyDefaults are the defaults of list-map key fields that appliers may
// leave out, by struct type and JSON field name.
var keyDefaults = map[reflect.Type]map[string]any{
	reflect.TypeOf(corev1.ContainerPort{}): {"protocol": "TCP"},
	reflect.TypeOf(corev1.ServicePort{}):   {"protocol": "TCP"},
}

// ssaField adds the list extensions of field f (JSON name name) of struct t
// to its schema p.
func ssaField(t reflect.Type, f reflect.StructField, name string, p Schema) {
	if d, ok := keyDefaults[t][name]; ok {
		p["default"] = d
	}
	if p["type"] != "array" {
		return
	}
	if keys, ok := listMapKeys[t][name]; ok {
		p["x-kubernetes-list-type"] = "map"
		p["x-kubernetes-list-map-keys"] = keys
		return
	}
	strategies := strings.Split(f.Tag.Get("patchStrategy"), ",")
	merge := false
	for _, st := range strategies {
		if st == "merge" {
			merge = true
		}
	}
	if !merge {
		p["x-kubernetes-list-type"] = "atomic"
		return
	}
	if key := f.Tag.Get("patchMergeKey"); key != "" {
		p["x-kubernetes-list-type"] = "map"
		p["x-kubernetes-list-map-keys"] = []string{key}
		return
	}
	p["x-kubernetes-list-type"] = "set"
}
