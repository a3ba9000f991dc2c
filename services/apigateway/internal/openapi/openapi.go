// Package openapi serves the OpenAPI v3 documents of the served resources:
// /openapi/v3 lists one document per group/version, and
// /openapi/v3/api/v1 (or /openapi/v3/apis/{group}/{version}) holds its
// paths and schemas. kubectl reads them to learn that the server validates
// fields itself (the fieldValidation parameter of each PATCH operation) and,
// for kubectl explain, what each field means.
//
// The built-in kinds' documents are built once, from the registry and the
// Go types, and are immutable; the custom resources' documents (custom.go)
// are built from their CRDs' schemas whenever the registry's custom
// resources change.
package openapi

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/typeschema"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
)

// schema is an OpenAPI schema object, as JSON (typeschema derives the
// kinds' definitions).
type schema = typeschema.Schema

// Documents are the OpenAPI v3 documents of a registry.
type Documents struct {
	reg   *registry.Registry
	paths map[string]any    // the root's paths of the built-in kinds
	byGV  map[string][]byte // "api/v1", "apis/apps/v1"
	// custom are the documents of the custom resources, for one
	// generation of the registry's custom resources.
	custom atomic.Pointer[customDocs]
}

// New builds the documents.
func New(reg *registry.Registry, version string) (*Documents, error) {
	d := &Documents{reg: reg, byGV: map[string][]byte{}, paths: map[string]any{}}
	paths := d.paths
	for _, gv := range builtinGroupVersions(reg) {
		doc, err := build(reg, gv, version)
		if err != nil {
			return nil, err
		}
		key := gvPath(gv)
		d.byGV[key] = doc
		sum := sha512.Sum512(doc)
		paths[key] = map[string]string{"serverRelativeURL": "/openapi/v3/" + key + "?hash=" + strings.ToUpper(hex.EncodeToString(sum[:]))}
	}
	if _, err := d.customDocs(); err != nil {
		return nil, err
	}
	return d, nil
}

// builtinGroupVersions returns the group/versions of reg's built-in
// resources.
func builtinGroupVersions(reg *registry.Registry) []k8sschema.GroupVersion {
	var out []k8sschema.GroupVersion
	for _, gv := range reg.GroupVersions() {
		if slices.ContainsFunc(reg.Resources(gv), func(r *registry.Resource) bool { return r.Custom == nil }) {
			out = append(out, gv)
		}
	}
	return out
}

func gvPath(gv k8sschema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// Lookup returns the document at an /openapi/v3 path.
func (d *Documents) Lookup(path string) ([]byte, bool) {
	path = strings.TrimSuffix(path, "/")
	custom, err := d.customDocs()
	if err != nil {
		return nil, false
	}
	if path == "/openapi/v3" {
		return custom.root, true
	}
	key := strings.TrimPrefix(path, "/openapi/v3/")
	if doc, ok := custom.byGV[key]; ok {
		return doc, true
	}
	doc, ok := d.byGV[key]
	return doc, ok
}

func build(reg *registry.Registry, gv k8sschema.GroupVersion, version string) ([]byte, error) {
	s := typeschema.NewBuilder("#/components/schemas/")
	paths := map[string]any{}
	for _, res := range reg.Resources(gv) {
		if res.Custom != nil {
			continue
		}
		objType := reflect.TypeOf(res.New()).Elem()
		listType := reflect.TypeOf(res.NewList()).Elem()
		objRef, listRef := s.Ref(objType), s.Ref(listType)
		gvk := map[string]string{"group": gv.Group, "version": gv.Version, "kind": res.Kind}
		for _, t := range []struct {
			ref  schema
			kind string
		}{{objRef, res.Kind}, {listRef, res.ListKind}} {
			s.Def(t.ref)["x-kubernetes-group-version-kind"] = []map[string]string{{"group": gv.Group, "version": gv.Version, "kind": t.kind}}
		}
		prefix := "/" + gvPath(gv)
		collection := prefix + "/" + res.GVR.Resource
		if res.Namespaced {
			paths[collection] = pathItem(nil, op("list", "list or watch objects of kind "+res.Kind, gvk, listRef, listParams))
			collection = prefix + "/namespaces/{namespace}/" + res.GVR.Resource
		}
		nsParam := []any{}
		if res.Namespaced {
			nsParam = append(nsParam, pathParam("namespace", "object name and auth scope, such as for teams and projects"))
		}
		coll := map[string]any{}
		item := map[string]any{}
		for _, verb := range res.Verbs {
			switch verb {
			case "list":
				coll["get"] = op("list", "list or watch objects of kind "+res.Kind, gvk, listRef, listParams)
			case "create":
				coll["post"] = withBody(op("post", "create a "+res.Kind, gvk, objRef, writeParams), objRef)
			case "deletecollection":
				coll["delete"] = op("deletecollection", "delete collection of "+res.Kind, gvk, statusRef(s), listParams)
			case "get":
				item["get"] = op("get", "read the specified "+res.Kind, gvk, objRef, nil)
			case "update":
				item["put"] = withBody(op("put", "replace the specified "+res.Kind, gvk, objRef, writeParams), objRef)
			case "patch":
				item["patch"] = withBody(op("patch", "partially update the specified "+res.Kind, gvk, objRef, patchParams), schema{"type": "object"})
			case "delete":
				item["delete"] = op("delete", "delete a "+res.Kind, gvk, statusRef(s), []string{"dryRun", "gracePeriodSeconds", "propagationPolicy"})
			}
		}
		paths[collection] = pathItem(nsParam, coll)
		paths[collection+"/{name}"] = pathItem(append(append([]any{}, nsParam...), pathParam("name", "name of the "+res.Kind)), item)
	}
	doc := map[string]any{
		"openapi": "3.0.0",
		"info":    map[string]string{"title": "Kubernetes", "version": version},
		"paths":   paths,
		"components": map[string]any{
			"schemas": s.Defs(),
		},
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi: %s: %w", gv, err)
	}
	return out, nil
}

var (
	listParams  = []string{"labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "resourceVersionMatch", "watch", "allowWatchBookmarks", "sendInitialEvents", "timeoutSeconds"}
	writeParams = []string{"dryRun", "fieldManager", "fieldValidation"}
	patchParams = []string{"dryRun", "fieldManager", "fieldValidation", "force"}
)

func statusRef(s *typeschema.Builder) schema { return s.Ref(reflect.TypeOf(metav1.Status{})) }

func pathParam(name, desc string) map[string]any {
	return map[string]any{"name": name, "in": "path", "required": true, "description": desc, "schema": schema{"type": "string", "uniqueItems": true}}
}

func pathItem(params []any, ops map[string]any) map[string]any {
	item := map[string]any{}
	for k, v := range ops {
		item[k] = v
	}
	if len(params) > 0 {
		item["parameters"] = params
	}
	return item
}

func op(action, desc string, gvk map[string]string, resp schema, query []string) map[string]any {
	params := []any{}
	for _, q := range query {
		params = append(params, map[string]any{"name": q, "in": "query", "schema": schema{"type": "string", "uniqueItems": true}})
	}
	content := map[string]any{}
	for _, mt := range []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"} {
		content[mt] = map[string]any{"schema": resp}
	}
	return map[string]any{
		"description":                     desc,
		"parameters":                      params,
		"responses":                       map[string]any{"200": map[string]any{"description": "OK", "content": content}, "401": map[string]any{"description": "Unauthorized"}},
		"x-kubernetes-action":             action,
		"x-kubernetes-group-version-kind": gvk,
	}
}

func withBody(o map[string]any, body schema) map[string]any {
	o["requestBody"] = map[string]any{"required": true, "content": map[string]any{"*/*": map[string]any{"schema": body}}}
	return o
}
