package openapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"sync/atomic"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"github.com/meridian-cp/meridian/lib/kube/crdschema"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/typeschema"
	"google.golang.org/protobuf/proto"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// V2ProtobufMediaType is the Content-Type of the protobuf /openapi/v2
// document. Clients ask for it as
// application/com.github.proto-openapi.spec.v2@v1.0+protobuf (or this
// form); the "@" form is not a valid media type for a response, so
// kube-openapi answers with this one, and so do we.
const V2ProtobufMediaType = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"

// V2 is the Swagger 2.0 document of every served resource, as JSON and as
// the gnostic protobuf client-go's OpenAPISchema() reads (kubectl's
// client-side validation, and kubectl explain's v2 output, read it). The
// built-in kinds' part is built once; the custom resources' paths and
// definitions (crdschema.OpenAPIV2, as kube-apiserver merges each CRD's
// into /openapi/v2) are merged in whenever the registry's custom
// resources change.
type V2 struct {
	reg     *registry.Registry
	version string
	// paths and defs are the built-in kinds' part; never modified.
	paths map[string]any
	defs  map[string]schema
	// cur is the document for one generation of the registry's custom
	// resources.
	cur atomic.Pointer[v2Doc]
}

// v2Doc is the /openapi/v2 document for one generation of the
// registry's custom resources. Immutable.
type v2Doc struct {
	generation     uint64
	json, protobuf []byte
}

// NewV2 builds the /openapi/v2 document.
func NewV2(reg *registry.Registry, version string) (*V2, error) {
	s := typeschema.NewBuilder("#/definitions/")
	paths := map[string]any{}
	for _, gv := range reg.GroupVersions() {
		for _, res := range reg.Resources(gv) {
			if res.Custom != nil {
				continue // merged per generation (Document)
			}
			objRef := s.Ref(reflect.TypeOf(res.New()).Elem())
			listRef := s.Ref(reflect.TypeOf(res.NewList()).Elem())
			for _, t := range []struct {
				ref  schema
				kind string
			}{{objRef, res.Kind}, {listRef, res.ListKind}} {
				s.Def(t.ref)["x-kubernetes-group-version-kind"] = []map[string]string{{"group": gv.Group, "version": gv.Version, "kind": t.kind}}
			}
			gvk := map[string]string{"group": gv.Group, "version": gv.Version, "kind": res.Kind}
			prefix := "/" + gvPath(gv)
			coll := prefix + "/" + res.GVR.Resource
			if res.Namespaced {
				coll = prefix + "/namespaces/{namespace}/" + res.GVR.Resource
			}
			paths[coll] = map[string]any{
				"get":  v2op("list", "list or watch objects of kind "+res.Kind, gvk, listRef, listParams, nil),
				"post": v2op("post", "create a "+res.Kind, gvk, objRef, writeParams, objRef),
			}
			paths[coll+"/{name}"] = map[string]any{
				"get":   v2op("get", "read the specified "+res.Kind, gvk, objRef, nil, nil),
				"put":   v2op("put", "replace the specified "+res.Kind, gvk, objRef, writeParams, objRef),
				"patch": v2op("patch", "partially update the specified "+res.Kind, gvk, objRef, patchParams, schema{"type": "object"}),
			}
		}
	}
	v := &V2{reg: reg, version: version, paths: paths, defs: s.Defs()}
	if _, err := v.document(); err != nil {
		return nil, err
	}
	return v, nil
}

// JSON returns the document as JSON.
func (v *V2) JSON() ([]byte, error) {
	d, err := v.document()
	if err != nil {
		return nil, err
	}
	return d.json, nil
}

// Protobuf returns the document as gnostic protobuf.
func (v *V2) Protobuf() ([]byte, error) {
	d, err := v.document()
	if err != nil {
		return nil, err
	}
	return d.protobuf, nil
}

// document returns the document of the registry's custom resources now,
// building it when they changed since the last call. Concurrent callers
// may build the same generation twice; one result is kept.
func (v *V2) document() (*v2Doc, error) {
	custom, gen := v.reg.CustomGeneration()
	if d := v.cur.Load(); d != nil && d.generation == gen {
		return d, nil
	}
	paths, defs := maps.Clone(v.paths), make(map[string]any, len(v.defs))
	for name, d := range v.defs {
		defs[name] = d
	}
	seen := map[string]bool{}
	for _, res := range custom {
		crd := res.Custom.CRD
		if seen[crd.Name] {
			continue // one document holds every served version
		}
		seen[crd.Name] = true
		if err := mergeCRDV2(crd, paths, defs); err != nil {
			// One CRD's document failing leaves the others served.
			continue
		}
	}
	doc := map[string]any{
		"swagger":     "2.0",
		"info":        map[string]string{"title": "Kubernetes", "version": v.version},
		"paths":       paths,
		"definitions": defs,
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi v2: %w", err)
	}
	parsed, err := openapiv2.ParseDocument(js)
	if err != nil {
		return nil, fmt.Errorf("openapi v2: parse: %w", err)
	}
	pb, err := proto.Marshal(parsed)
	if err != nil {
		return nil, fmt.Errorf("openapi v2: %w", err)
	}
	d := &v2Doc{generation: gen, json: js, protobuf: pb}
	v.cur.Store(d)
	return d, nil
}

// mergeCRDV2 adds the paths and definitions of crd's Swagger document
// (crdschema.OpenAPIV2) to paths and defs. A definition already there is
// kept: the metadata definitions a CRD's document carries are the
// built-in ones, by the same names.
func mergeCRDV2(crd *apiextensionsv1.CustomResourceDefinition, paths, defs map[string]any) error {
	sw, err := crdschema.OpenAPIV2(crd)
	if err != nil {
		return err
	}
	var part struct {
		Paths       map[string]any `json:"paths"`
		Definitions map[string]any `json:"definitions"`
	}
	js, err := json.Marshal(sw)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(js, &part); err != nil {
		return err
	}
	for p, item := range part.Paths {
		if ops, ok := item.(map[string]any); ok {
			addWriteParams(ops)
		}
		paths[p] = item
	}
	for name, d := range part.Definitions {
		if _, ok := defs[name]; !ok {
			defs[name] = d
		}
	}
	return nil
}

// addWriteParams adds the query parameters of writes to the POST, PUT
// and PATCH operations of a CRD's path, as kube-apiserver publishes them:
// kubectl reads fieldValidation there to learn that the server validates
// fields itself, and then leaves validation to the server (its 422
// texts) rather than validating against the document.
func addWriteParams(ops map[string]any) {
	for method, query := range map[string][]string{"post": writeParams, "put": writeParams, "patch": patchParams} {
		op, ok := ops[method].(map[string]any)
		if !ok {
			continue
		}
		params, _ := op["parameters"].([]any)
		for _, q := range query {
			params = append(params, map[string]any{"name": q, "in": "query", "type": "string", "uniqueItems": true})
		}
		op["parameters"] = params
	}
}

func v2op(action, desc string, gvk map[string]string, resp schema, query []string, body schema) map[string]any {
	params := []any{}
	for _, q := range query {
		params = append(params, map[string]any{"name": q, "in": "query", "type": "string", "uniqueItems": true})
	}
	if body != nil {
		params = append(params, map[string]any{"name": "body", "in": "body", "required": true, "schema": body})
	}
	return map[string]any{
		"description":                     desc,
		"consumes":                        []string{"*/*"},
		"produces":                        []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"},
		"schemes":                         []string{"https"},
		"parameters":                      params,
		"responses":                       map[string]any{"200": map[string]any{"description": "OK", "schema": resp}, "401": map[string]any{"description": "Unauthorized"}},
		"x-kubernetes-action":             action,
		"x-kubernetes-group-version-kind": gvk,
	}
}
