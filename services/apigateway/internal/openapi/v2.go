package openapi

import (
	"encoding/json"
	"fmt"
	"reflect"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"google.golang.org/protobuf/proto"
)

// V2ProtobufMediaType is the Content-Type of the protobuf /openapi/v2
// document. Clients ask for it as
// application/com.github.proto-openapi.spec.v2@v1.0+protobuf (or this
// form); the "@" form is not a valid media type for a response, so
// kube-openapi answers with this one, and so do we.
const V2ProtobufMediaType = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"

// V2 is the Swagger 2.0 document of every served resource, as JSON and as
// the gnostic protobuf client-go's OpenAPISchema() reads.
type V2 struct {
	JSON, Protobuf []byte
}

// NewV2 builds the /openapi/v2 document.
func NewV2(reg *registry.Registry, version string) (*V2, error) {
	s := newSchemas("#/definitions/")
	paths := map[string]any{}
	for _, gv := range reg.GroupVersions() {
		for _, res := range reg.Resources(gv) {
			if res.Custom != nil {
				continue // custom resources are in the v3 documents only
			}
			objRef := s.ref(reflect.TypeOf(res.New()).Elem())
			listRef := s.ref(reflect.TypeOf(res.NewList()).Elem())
			for _, t := range []struct {
				ref  schema
				kind string
			}{{objRef, res.Kind}, {listRef, res.ListKind}} {
				name := t.ref["$ref"].(string)[len(s.refPrefix):]
				s.defs[name]["x-kubernetes-group-version-kind"] = []map[string]string{{"group": gv.Group, "version": gv.Version, "kind": t.kind}}
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
	doc := map[string]any{
		"swagger":     "2.0",
		"info":        map[string]string{"title": "Kubernetes", "version": version},
		"paths":       paths,
		"definitions": s.defs,
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
	return &V2{JSON: js, Protobuf: pb}, nil
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
