package openapi

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/meridian-cp/meridian/lib/kube/crdschema"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// customDocs are the OpenAPI v3 documents of one generation of a
// registry's custom resources, with the root listing them beside the
// built-in documents. Immutable.
type customDocs struct {
	generation uint64
	root       []byte
	byGV       map[string][]byte
}

// customDocs returns the documents of the registry's custom resources
// now, building them when those changed since the last call. Concurrent
// callers may build the same generation twice; one result is kept.
func (d *Documents) customDocs() (*customDocs, error) {
	custom, gen := d.reg.CustomGeneration()
	if c := d.custom.Load(); c != nil && c.generation == gen {
		return c, nil
	}
	c, err := buildCustom(custom, gen, d.paths)
	if err != nil {
		return nil, err
	}
	d.custom.Store(c)
	return c, nil
}

// buildCustom merges the documents of each custom resource's CRD version
// (crdschema.OpenAPIV3) per group/version, and lists them in a root with
// the built-in documents' paths.
func buildCustom(custom []*registry.Resource, gen uint64, builtinPaths map[string]any) (*customDocs, error) {
	merged := map[string]*spec3.OpenAPI{}
	var order []string
	for _, res := range custom {
		doc, err := crdschema.OpenAPIV3(res.Custom.CRD, res.Custom.Version)
		if err != nil {
			// One CRD's document failing leaves the others served.
			continue
		}
		addWriteParamsV3(doc)
		key := gvPath(res.GVR.GroupVersion())
		m, ok := merged[key]
		if !ok {
			merged[key] = doc
			order = append(order, key)
			continue
		}
		maps.Copy(m.Paths.Paths, doc.Paths.Paths)
		maps.Copy(m.Components.Schemas, doc.Components.Schemas)
	}
	c := &customDocs{generation: gen, byGV: map[string][]byte{}}
	paths := maps.Clone(builtinPaths)
	for _, key := range order {
		data, err := json.Marshal(merged[key])
		if err != nil {
			return nil, fmt.Errorf("openapi: %s: %w", key, err)
		}
		c.byGV[key] = data
		sum := sha512.Sum512(data)
		paths[key] = map[string]string{"serverRelativeURL": "/openapi/v3/" + key + "?hash=" + strings.ToUpper(hex.EncodeToString(sum[:]))}
	}
	root, err := json.Marshal(map[string]any{"paths": paths})
	if err != nil {
		return nil, err
	}
	c.root = root
	return c, nil
}

// addWriteParamsV3 adds the query parameters of writes to the POST, PUT
// and PATCH operations of a CRD's document, as kube-apiserver publishes
// them (see addWriteParams): without fieldValidation there, kubectl
// validates custom resources against the published schema itself instead
// of leaving it to the server.
func addWriteParamsV3(doc *spec3.OpenAPI) {
	for _, p := range doc.Paths.Paths {
		for _, o := range []struct {
			op    *spec3.Operation
			query []string
		}{{p.Post, writeParams}, {p.Put, writeParams}, {p.Patch, patchParams}} {
			if o.op == nil {
				continue
			}
			for _, q := range o.query {
				o.op.Parameters = append(o.op.Parameters, &spec3.Parameter{ParameterProps: spec3.ParameterProps{
					Name: q, In: "query", Schema: spec.StringProperty(), AllowEmptyValue: false,
				}})
			}
		}
	}
}
