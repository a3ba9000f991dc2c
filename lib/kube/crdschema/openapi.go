package crdschema

import (
	"fmt"
	"slices"
	"strings"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	openapiv2 "k8s.io/apiextensions-apiserver/pkg/controller/openapi/v2"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// # OpenAPI documents of a CRD
//
// The documents follow apiextensions-apiserver's openapi builder (which
// needs the generic API server's endpoint installer and go-restful, so it
// is not imported): the kind's definition is the structural schema
// (converted to what OpenAPI v2 can say for v2) with apiVersion, kind and
// a $ref to ObjectMeta added, embedded resources get the same, and the
// definition carries x-kubernetes-group-version-kind so clients (kubectl
// explain, server-side apply) find it by kind. Definitions are named as
// upstream names them: the group reversed, the version, the kind
// ("com.example.v1.Widget"). The metav1 definitions they refer to come
// from apiextensions-apiserver's generated OpenAPI.

// Reference prefixes of OpenAPI v2 and v3.
const (
	v2RefPrefix = "#/definitions/"
	v3RefPrefix = "#/components/schemas/"
)

// gvkExtension names a definition's kinds.
const gvkExtension = "x-kubernetes-group-version-kind"

// ModelName is the name of the OpenAPI definition of kind in group and
// version, as upstream names it: "com.example.v1.Widget".
func ModelName(group, version, kind string) string {
	parts := strings.Split(group, ".")
	slices.Reverse(parts)
	return strings.Join(parts, ".") + "." + version + "." + kind
}

// OpenAPIV3 is the OpenAPI v3 document of one version of crd, as served
// at /openapi/v3/apis/<group>/<version> (merged with the other kinds of
// that group version): the kind, its list and the metadata definitions
// they refer to, and the resource's paths.
func OpenAPIV3(crd *apiextensionsv1.CustomResourceDefinition, version string) (*spec3.OpenAPI, error) {
	crd = defaulted(crd)
	defs, err := versionDefinitions(crd, version, v3RefPrefix, false)
	if err != nil {
		return nil, err
	}
	doc := &spec3.OpenAPI{
		Version:    "3.0.0",
		Info:       &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes CRD Swagger", Version: "v0.1.0"}},
		Paths:      &spec3.Paths{Paths: map[string]*spec3.Path{}},
		Components: &spec3.Components{Schemas: defs},
	}
	for _, r := range routes(crd, version) {
		p := doc.Paths.Paths[r.path]
		if p == nil {
			p = &spec3.Path{}
			for _, name := range r.params {
				p.Parameters = append(p.Parameters, &spec3.Parameter{ParameterProps: spec3.ParameterProps{
					Name: name, In: "path", Required: true, Schema: spec.StringProperty(),
				}})
			}
			doc.Paths.Paths[r.path] = p
		}
		op := &spec3.Operation{VendorExtensible: spec.VendorExtensible{Extensions: r.extensions()}, OperationProps: spec3.OperationProps{
			OperationId: r.operationID,
			Tags:        []string{r.tag},
			Responses: &spec3.Responses{ResponsesProps: spec3.ResponsesProps{StatusCodeResponses: map[int]*spec3.Response{
				200: {ResponseProps: spec3.ResponseProps{Description: "OK", Content: map[string]*spec3.MediaType{
					"application/json": {MediaTypeProps: spec3.MediaTypeProps{Schema: spec.RefSchema(v3RefPrefix + r.response)}},
					"application/yaml": {MediaTypeProps: spec3.MediaTypeProps{Schema: spec.RefSchema(v3RefPrefix + r.response)}},
				}}},
				401: {ResponseProps: spec3.ResponseProps{Description: "Unauthorized"}},
			}}},
		}}
		if r.body != "" {
			media := map[string]*spec3.MediaType{}
			for _, ct := range r.bodyTypes {
				media[ct] = &spec3.MediaType{MediaTypeProps: spec3.MediaTypeProps{Schema: spec.RefSchema(v3RefPrefix + r.body)}}
			}
			op.RequestBody = &spec3.RequestBody{RequestBodyProps: spec3.RequestBodyProps{Required: true, Content: media}}
		}
		*byMethod(r.method, &p.Get, &p.Post, &p.Put, &p.Patch, &p.Delete) = op
	}
	return doc, nil
}

// OpenAPIV2 is the Swagger 2.0 document of every served version of crd,
// to be merged into /openapi/v2: definitions in the OpenAPI v2 subset
// (nullable, anyOf/oneOf/not and similar are dropped as upstream does)
// and the resources' paths.
func OpenAPIV2(crd *apiextensionsv1.CustomResourceDefinition) (*spec.Swagger, error) {
	crd = defaulted(crd)
	doc := &spec.Swagger{SwaggerProps: spec.SwaggerProps{
		Swagger:     "2.0",
		Info:        &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes CRD Swagger", Version: "v0.1.0"}},
		Paths:       &spec.Paths{Paths: map[string]spec.PathItem{}},
		Definitions: spec.Definitions{},
	}}
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		defs, err := versionDefinitions(crd, v.Name, v2RefPrefix, true)
		if err != nil {
			return nil, err
		}
		for name, d := range defs {
			doc.Definitions[name] = *d
		}
		for _, r := range routes(crd, v.Name) {
			item := doc.Paths.Paths[r.path]
			if len(item.Parameters) == 0 {
				for _, name := range r.params {
					item.Parameters = append(item.Parameters, spec.Parameter{
						SimpleSchema: spec.SimpleSchema{Type: "string"},
						ParamProps:   spec.ParamProps{Name: name, In: "path", Required: true},
					})
				}
			}
			op := &spec.Operation{VendorExtensible: spec.VendorExtensible{Extensions: r.extensions()}, OperationProps: spec.OperationProps{
				ID:       r.operationID,
				Tags:     []string{r.tag},
				Consumes: r.bodyTypes,
				Produces: []string{"application/json", "application/yaml"},
				Responses: &spec.Responses{ResponsesProps: spec.ResponsesProps{StatusCodeResponses: map[int]spec.Response{
					200: {ResponseProps: spec.ResponseProps{Description: "OK", Schema: spec.RefSchema(v2RefPrefix + r.response)}},
					401: {ResponseProps: spec.ResponseProps{Description: "Unauthorized"}},
				}}},
			}}
			if r.body != "" {
				op.Parameters = append(op.Parameters, spec.Parameter{ParamProps: spec.ParamProps{
					Name: "body", In: "body", Required: true, Schema: spec.RefSchema(v2RefPrefix + r.body),
				}})
			}
			*byMethod(r.method, &item.Get, &item.Post, &item.Put, &item.Patch, &item.Delete) = op
			doc.Paths.Paths[r.path] = item
		}
	}
	return doc, nil
}

// byMethod picks the operation field of a path for an HTTP method (one of
// those routes returns).
func byMethod[O any](method string, get, post, put, patch, del *O) *O {
	switch method {
	case "POST":
		return post
	case "PUT":
		return put
	case "PATCH":
		return patch
	case "DELETE":
		return del
	}
	return get
}

// route is one operation of a custom resource's REST API.
type route struct {
	path, method, operationID, tag string
	params                         []string
	response, body                 string
	bodyTypes                      []string
	// action and kind are the operation's x-kubernetes-action and
	// x-kubernetes-group-version-kind, by which kubectl explain finds the
	// kind of a resource.
	action string
	kind   map[string]any
}

// extensions are the Kubernetes extensions of r's operation.
func (r route) extensions() spec.Extensions {
	return spec.Extensions{"x-kubernetes-action": r.action, gvkExtension: r.kind}
}

// routes lists the operations upstream documents for one version of crd.
func routes(crd *apiextensionsv1.CustomResourceDefinition, version string) []route {
	group, kind, plural := crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural
	model := ModelName(group, version, kind)
	list := ModelName(group, version, crd.Spec.Names.ListKind)
	status := metav1.Status{}.OpenAPIModelName()
	patch := metav1.Patch{}.OpenAPIModelName()
	scale := autoscalingv1.Scale{}.OpenAPIModelName()
	tag := tagFor(group, version)
	suffix := strings.ToUpper(version[:1]) + version[1:] + kind
	root := fmt.Sprintf("/apis/%s/%s/%s", group, version, plural)
	var params []string
	var out []route
	scope := ""
	if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
		out = append(out, route{path: root, method: "GET", operationID: "list" + suffix + "ForAllNamespaces", response: list})
		root = fmt.Sprintf("/apis/%s/%s/namespaces/{namespace}/%s", group, version, plural)
		params = []string{"namespace"}
		scope = "Namespaced"
	}
	named := append(slices.Clone(params), "name")
	jsonBody := []string{"application/json", "application/yaml"}
	patchBody := []string{"application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml", "application/apply-patch+cbor"}
	out = append(out,
		route{path: root, method: "GET", operationID: "list" + scope + suffix, params: params, response: list},
		route{path: root, method: "POST", operationID: "create" + scope + suffix, params: params, response: model, body: model, bodyTypes: jsonBody},
		route{path: root, method: "DELETE", operationID: "deletecollection" + scope + suffix, params: params, response: status},
		route{path: root + "/{name}", method: "GET", operationID: "read" + scope + suffix, params: named, response: model},
		route{path: root + "/{name}", method: "PUT", operationID: "replace" + scope + suffix, params: named, response: model, body: model, bodyTypes: jsonBody},
		route{path: root + "/{name}", method: "DELETE", operationID: "delete" + scope + suffix, params: named, response: status},
		route{path: root + "/{name}", method: "PATCH", operationID: "patch" + scope + suffix, params: named, response: model, body: patch, bodyTypes: patchBody},
	)
	sub, _ := apihelpers.GetSubresourcesForVersion(crd, version)
	if sub != nil && sub.Status != nil {
		out = append(out,
			route{path: root + "/{name}/status", method: "GET", operationID: "read" + scope + suffix + "Status", params: named, response: model},
			route{path: root + "/{name}/status", method: "PUT", operationID: "replace" + scope + suffix + "Status", params: named, response: model, body: model, bodyTypes: jsonBody},
			route{path: root + "/{name}/status", method: "PATCH", operationID: "patch" + scope + suffix + "Status", params: named, response: model, body: patch, bodyTypes: patchBody},
		)
	}
	if sub != nil && sub.Scale != nil {
		out = append(out,
			route{path: root + "/{name}/scale", method: "GET", operationID: "read" + scope + suffix + "Scale", params: named, response: scale},
			route{path: root + "/{name}/scale", method: "PUT", operationID: "replace" + scope + suffix + "Scale", params: named, response: scale, body: scale, bodyTypes: jsonBody},
			route{path: root + "/{name}/scale", method: "PATCH", operationID: "patch" + scope + suffix + "Scale", params: named, response: scale, body: patch, bodyTypes: patchBody},
		)
	}
	kindExt := map[string]any{"group": group, "version": version, "kind": kind}
	scaleExt := map[string]any{"group": autoscalingv1.GroupName, "version": "v1", "kind": "Scale"}
	for i := range out {
		out[i].tag = tag
		out[i].kind = kindExt
		if strings.HasSuffix(out[i].path, "/scale") {
			out[i].kind = scaleExt
		}
		named := strings.Contains(out[i].path, "{name}")
		switch out[i].method {
		case "GET":
			out[i].action = map[bool]string{true: "get", false: "list"}[named]
		case "POST":
			out[i].action = "post"
		case "PUT":
			out[i].action = "put"
		case "PATCH":
			out[i].action = "patch"
		case "DELETE":
			out[i].action = map[bool]string{true: "delete", false: "deletecollection"}[named]
		}
	}
	return out
}

// tagFor is the operation tag of a group version ("exampleCom_v1").
func tagFor(group, version string) string {
	parts := strings.Split(group, ".")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "") + "_" + version
}

// versionDefinitions builds the definitions of one version of crd: the
// kind, its list, and the metav1/autoscaling definitions they and the
// paths refer to, with references under refPrefix.
func versionDefinitions(crd *apiextensionsv1.CustomResourceDefinition, version, refPrefix string, v2 bool) (map[string]*spec.Schema, error) {
	if !slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == version }) {
		return nil, fmt.Errorf("%w: %q in %s", ErrUnknownVersion, version, crd.Name)
	}
	st, err := openAPIStructural(crd, version)
	if err != nil {
		return nil, err
	}
	generated := generatedopenapi.GetOpenAPIDefinitions(func(name string) spec.Ref {
		return spec.MustCreateRef(refPrefix + common.EscapeJsonPointer(name))
	})
	defs := map[string]*spec.Schema{}
	addDefinitions(defs, generated, metav1.ObjectMeta{}.OpenAPIModelName(), metav1.ListMeta{}.OpenAPIModelName(),
		metav1.Status{}.OpenAPIModelName(), metav1.Patch{}.OpenAPIModelName(), autoscalingv1.Scale{}.OpenAPIModelName())
	typeMeta := generated[metav1.TypeMeta{}.OpenAPIModelName()].Schema

	group, kind := crd.Spec.Group, crd.Spec.Names.Kind
	var kindSchema *spec.Schema
	switch {
	case st == nil, v2 && (st.XPreserveUnknownFields || crd.Spec.PreserveUnknownFields):
		// Without a schema, or with unknown fields preserved at the root
		// in v2, the definition says only "object": kubectl's v2
		// validation would otherwise reject fields it does not know.
		kindSchema = &spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}}}
	default:
		if v2 {
			st = openapiv2.ToStructuralOpenAPIV2(st)
		}
		kindSchema = st.ToKubeOpenAPI()
		kindSchema.SetProperty("metadata", *spec.RefSchema(refPrefix + metav1.ObjectMeta{}.OpenAPIModelName()).
			WithDescription(objectMetaDescription))
		kindSchema.SetProperty("apiVersion", typeMeta.Properties["apiVersion"])
		kindSchema.SetProperty("kind", typeMeta.Properties["kind"])
		addEmbeddedProperties(kindSchema, typeMeta, refPrefix, v2)
	}
	kindSchema.AddExtension(gvkExtension, []any{map[string]any{"group": group, "version": version, "kind": kind}})
	defs[ModelName(group, version, kind)] = kindSchema

	listSchema := new(spec.Schema).
		Typed("object", "").
		WithDescription(fmt.Sprintf("%s is a list of %s", crd.Spec.Names.ListKind, kind)).
		WithRequired("items").
		SetProperty("items", *spec.ArrayProperty(spec.RefSchema(refPrefix + ModelName(group, version, kind))).
			WithDescription(fmt.Sprintf("List of %s. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", crd.Spec.Names.Plural))).
		SetProperty("metadata", *spec.RefSchema(refPrefix + metav1.ListMeta{}.OpenAPIModelName()).WithDescription(listMetaDescription)).
		SetProperty("apiVersion", typeMeta.Properties["apiVersion"]).
		SetProperty("kind", typeMeta.Properties["kind"])
	listSchema.AddExtension(gvkExtension, []any{map[string]any{"group": group, "version": version, "kind": crd.Spec.Names.ListKind}})
	defs[ModelName(group, version, crd.Spec.Names.ListKind)] = listSchema
	return defs, nil
}

// Descriptions of metadata as upstream publishes them (from
// PartialObjectMetadata and PartialObjectMetadataList).
var (
	objectMetaDescription = metav1.PartialObjectMetadata{}.SwaggerDoc()["metadata"]
	listMetaDescription   = metav1.PartialObjectMetadataList{}.SwaggerDoc()["metadata"]
)

// addDefinitions copies the named generated definitions and everything
// they depend on into defs.
func addDefinitions(defs map[string]*spec.Schema, generated map[string]common.OpenAPIDefinition, names ...string) {
	for len(names) > 0 {
		name := names[len(names)-1]
		names = names[:len(names)-1]
		if _, done := defs[name]; done {
			continue
		}
		d, ok := generated[name]
		if !ok {
			continue
		}
		s := d.Schema
		defs[name] = &s
		names = append(names, d.Dependencies...)
	}
}

// openAPIStructural is the version's structural schema for publishing:
// unfolded (int-or-string spelled out), or nil when the version has no
// schema or it is not structural.
func openAPIStructural(crd *apiextensionsv1.CustomResourceDefinition, version string) (*structuralschema.Structural, error) {
	v, err := apihelpers.GetSchemaForVersion(crd, version)
	if err != nil {
		return nil, fmt.Errorf("crdschema: schema of %s %s: %w", crd.Name, version, err)
	}
	if v == nil || v.OpenAPIV3Schema == nil {
		return nil, nil
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.OpenAPIV3Schema, internal, nil); err != nil {
		return nil, fmt.Errorf("crdschema: converting schema of %s %s: %w", crd.Name, version, err)
	}
	st, err := structuralschema.NewStructural(internal)
	if err != nil || len(structuralschema.ValidateStructural(nil, st)) > 0 {
		return nil, nil
	}
	return st.Unfold(), nil
}

// addEmbeddedProperties adds apiVersion, kind and metadata to every
// x-kubernetes-embedded-resource object below s, as upstream publishes
// them (not in v2 below x-kubernetes-preserve-unknown-fields).
func addEmbeddedProperties(s *spec.Schema, typeMeta spec.Schema, refPrefix string, v2 bool) {
	if s == nil {
		return
	}
	for k := range s.Properties {
		v := s.Properties[k]
		addEmbeddedProperties(&v, typeMeta, refPrefix, v2)
		s.Properties[k] = v
	}
	if s.Items != nil {
		addEmbeddedProperties(s.Items.Schema, typeMeta, refPrefix, v2)
	}
	if s.AdditionalProperties != nil {
		addEmbeddedProperties(s.AdditionalProperties.Schema, typeMeta, refPrefix, v2)
	}
	if preserve, ok := s.Extensions.GetBool("x-kubernetes-preserve-unknown-fields"); ok && preserve && v2 {
		return
	}
	if embedded, ok := s.Extensions.GetBool("x-kubernetes-embedded-resource"); ok && embedded {
		s.SetProperty("apiVersion", *withDescription(typeMeta.Properties["apiVersion"], "apiVersion defines the versioned schema of this representation of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"))
		s.SetProperty("kind", *withDescription(typeMeta.Properties["kind"], "kind is a string value representing the type of this object. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"))
		s.SetProperty("metadata", *spec.RefSchema(refPrefix + metav1.ObjectMeta{}.OpenAPIModelName()).WithDescription(objectMetaDescription))
		for _, f := range []string{"kind", "apiVersion"} {
			if !slices.Contains(s.Required, f) {
				s.Required = append(s.Required, f)
			}
		}
	}
}

// withDescription returns a copy of s with description d.
func withDescription(s spec.Schema, d string) *spec.Schema {
	return s.WithDescription(d)
}
