// Package typeschema derives OpenAPI schemas from the Go types of the
// kinds meridian serves: the definitions of the gateway's /openapi
// documents, and the structured schemas of server-side apply and of
// ApplyConfiguration mutations (SSASchemas, NewTypeConverter), which the
// gateway's field managers and the admission service's mutating policies
// share.
package typeschema

import (
	"reflect"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Schema is an OpenAPI schema object, as JSON.
type Schema = map[string]any

// Builder derives OpenAPI schemas from Go types by reflection: properties
// from json tags, descriptions from the SwaggerDoc() methods that
// k8s.io/api and k8s.io/apimachinery generate for every type. Named
// structs become component definitions referenced by $ref, named as
// kube-apiserver names them (k8s.io/api/core/v1.ConfigMap →
// io.k8s.api.core.v1.ConfigMap).
type Builder struct {
	defs map[string]Schema
	// refPrefix is where definitions live: "#/components/schemas/" in
	// OpenAPI v3, "#/definitions/" in Swagger 2.0.
	refPrefix string
	// ssa adds the list, map and struct extensions of server-side apply
	// (ssa.go) and leaves descriptions out; false for the HTTP documents.
	ssa bool
}

// NewBuilder returns a Builder of the documents' definitions (without the
// server-side apply extensions, with descriptions) whose references point
// under refPrefix.
func NewBuilder(refPrefix string) *Builder {
	return &Builder{defs: map[string]Schema{}, refPrefix: refPrefix}
}

// Defs are the definitions built so far, by name.
func (s *Builder) Defs() map[string]Schema { return s.defs }

// Def returns the definition ref (a reference Ref returned) points to; the
// caller may add extensions to it (x-kubernetes-group-version-kind).
func (s *Builder) Def(ref Schema) Schema {
	return s.defs[strings.TrimPrefix(ref["$ref"].(string), s.refPrefix)]
}

// special are types whose JSON form is not their Go shape.
var special = map[reflect.Type]Schema{
	reflect.TypeOf(metav1.Time{}):          {"type": "string", "format": "date-time"},
	reflect.TypeOf(metav1.MicroTime{}):     {"type": "string", "format": "date-time"},
	reflect.TypeOf(metav1.Duration{}):      {"type": "string"},
	reflect.TypeOf(resource.Quantity{}):    {"type": "string", "x-kubernetes-int-or-string": true},
	reflect.TypeOf(intstr.IntOrString{}):   {"type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": true},
	reflect.TypeOf(runtime.RawExtension{}): {"type": "object"},
	reflect.TypeOf(metav1.FieldsV1{}):      {"type": "object"},
	// A CRD schema's free-form values (default, enum, example) and its
	// either-or fields are any JSON, as kube-apiserver publishes them.
	reflect.TypeOf(apiextensionsv1.JSON{}):                         {"x-kubernetes-preserve-unknown-fields": true},
	reflect.TypeOf(apiextensionsv1.JSONSchemaPropsOrArray{}):       {"x-kubernetes-preserve-unknown-fields": true},
	reflect.TypeOf(apiextensionsv1.JSONSchemaPropsOrBool{}):        {"x-kubernetes-preserve-unknown-fields": true},
	reflect.TypeOf(apiextensionsv1.JSONSchemaPropsOrStringArray{}): {"x-kubernetes-preserve-unknown-fields": true},
}

// defName is the component name of a named type.
func defName(t reflect.Type) string {
	pkg := t.PkgPath()
	if rest, ok := strings.CutPrefix(pkg, "k8s.io/"); ok {
		pkg = "io.k8s." + rest
	}
	return strings.ReplaceAll(pkg, "/", ".") + "." + t.Name()
}

// Ref returns the schema of t: a $ref to its definition for named structs
// (defining it on first use), an inline schema otherwise.
func (s *Builder) Ref(t reflect.Type) Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if sp, ok := special[t]; ok {
		out := Schema{}
		for k, v := range sp {
			out[k] = v
		}
		if s.ssa {
			ssaScalar(out)
		}
		return out
	}
	switch t.Kind() {
	case reflect.Struct:
		name := defName(t)
		if _, done := s.defs[name]; !done {
			s.defs[name] = Schema{} // placeholder breaks recursion
			s.defs[name] = s.object(t)
		}
		return Schema{"$ref": s.refPrefix + name}
	case reflect.String:
		return Schema{"type": "string"}
	case reflect.Bool:
		return Schema{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return Schema{"type": "integer", "format": "int32"}
	case reflect.Int64, reflect.Uint64, reflect.Uint:
		return Schema{"type": "integer", "format": "int64"}
	case reflect.Float32, reflect.Float64:
		return Schema{"type": "number", "format": "double"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return Schema{"type": "string", "format": "byte"}
		}
		return Schema{"type": "array", "items": s.Ref(t.Elem())}
	case reflect.Map:
		return Schema{"type": "object", "additionalProperties": s.Ref(t.Elem())}
	case reflect.Interface:
		return Schema{"type": "object"}
	}
	return Schema{}
}

// object builds the definition of a struct type.
func (s *Builder) object(t reflect.Type) Schema {
	docs := swaggerDoc(t)
	props := Schema{}
	s.fields(t, props)
	out := Schema{"type": "object", "properties": props}
	if s.ssa {
		ssaStruct(t, out)
		return out
	}
	if d := docs[""]; d != "" {
		out["description"] = d
	}
	return out
}

// fields adds t's serialized fields to props, flattening inlined structs.
func (s *Builder) fields(t reflect.Type, props Schema) {
	docs := swaggerDoc(t)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") || (f.Anonymous && name == "") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				s.fields(ft, props)
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		p := s.Ref(f.Type)
		if s.ssa {
			ssaField(t, f, name, p)
			props[name] = p
			continue
		}
		if d := docs[name]; d != "" {
			if _, isRef := p["$ref"]; isRef {
				p = Schema{"allOf": []any{p}, "description": d}
			} else {
				p["description"] = d
			}
		}
		props[name] = p
	}
}

type swaggerDocer interface{ SwaggerDoc() map[string]string }

// swaggerDoc returns the generated field descriptions of t, if any.
func swaggerDoc(t reflect.Type) map[string]string {
	if d, ok := reflect.New(t).Elem().Interface().(swaggerDocer); ok {
		return d.SwaggerDoc()
	}
	if d, ok := reflect.New(t).Interface().(swaggerDocer); ok {
		return d.SwaggerDoc()
	}
	return nil
}
