package crdschema

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
	"sigs.k8s.io/yaml"
)

// keywordsSchema uses every keyword passSchema implements, several on
// one node, with values (below) that both meet and miss each. Some of it
// (additionalProperties false, uniqueItems, enum on an object) a CRD may
// not declare; upstream's validator still checks it, and so must
// passSchema.
const keywordsSchema = `type: object
required: [name]
minProperties: 1
maxProperties: 14
properties:
  name: {type: string, minLength: 2, maxLength: 5, pattern: '^[a-zé]+$'}
  nick: {type: string, nullable: true, maxLength: 3}
  size: {type: string, enum: [small, large]}
  count: {type: integer, minimum: 1, maximum: 10, exclusiveMaximum: true, multipleOf: 2}
  small: {type: integer, format: int32, exclusiveMinimum: true, minimum: -3}
  big: {type: integer, format: int64, minimum: -5, maximum: 2000}
  ratio: {type: number, minimum: 0, exclusiveMinimum: true, maximum: 2.5, multipleOf: 0.5}
  f32: {type: number, format: float, maximum: 1e30}
  flag: {type: boolean}
  port:
    x-kubernetes-int-or-string: true
    anyOf:
    - {type: integer, maximum: 100}
    - {type: string, pattern: '^[a-z]+$'}
  tags:
    type: array
    minItems: 1
    maxItems: 3
    uniqueItems: true
    items: {type: string, enum: [a, b, c, "1"]}
  labels:
    type: object
    minProperties: 1
    maxProperties: 2
    additionalProperties: {type: string, maxLength: 3}
  closed:
    type: object
    additionalProperties: false
    properties:
      a: {type: string}
  numEnum: {type: integer, enum: [1, 2, 3]}
  anyEnum:
    x-kubernetes-preserve-unknown-fields: true
    enum: [1, "a", 2.5, true, [1], {"a": 1}]
  template:
    type: object
    x-kubernetes-embedded-resource: true
    x-kubernetes-preserve-unknown-fields: true
    properties:
      spec:
        type: object
        required: [image]
        properties:
          image: {type: string, minLength: 1}
  extra:
    type: object
    x-kubernetes-preserve-unknown-fields: true
  matrix:
    type: array
    items:
      type: array
      maxItems: 2
      items: {type: integer, maximum: 5}
`

// combinatorsSchema has allOf, anyOf, oneOf and not at the root and
// below, with properties inside them (as structural schemas allow).
const combinatorsSchema = `type: object
properties:
  a: {type: integer}
  b: {type: string}
  c: {type: string}
  inner:
    type: object
    properties:
      x: {type: integer}
      "y": {type: integer}
    anyOf:
    - required: [x]
    - required: ["y"]
    not:
      properties:
        x: {minimum: 3}
        "y": {minimum: 3}
      required: [x, "y"]
  list:
    type: array
    items:
      type: string
      oneOf:
      - {enum: [one, two]}
      - {pattern: '^t'}
      - {maxLength: 1}
allOf:
- properties:
    a: {maximum: 5}
- not:
    properties:
      c: {enum: [forbidden]}
    required: [c]
oneOf:
- required: [a]
- required: [b]
- properties:
    b: {enum: [both]}
  required: [a, b]
not:
  properties:
    a: {enum: [4]}
`

// formatsSchema declares every string format upstream validates, one
// that is stripped (not supported) and numeric formats.
const formatsSchema = `type: object
properties:
  bsonobjectid: {type: string, format: bsonobjectid}
  uri: {type: string, format: uri}
  email: {type: string, format: email}
  hostname: {type: string, format: hostname}
  ipv4: {type: string, format: ipv4}
  ipv6: {type: string, format: ipv6}
  cidr: {type: string, format: cidr}
  mac: {type: string, format: mac}
  uuid: {type: string, format: uuid}
  uuid3: {type: string, format: uuid3}
  uuid4: {type: string, format: uuid4}
  uuid5: {type: string, format: uuid5}
  isbn: {type: string, format: isbn}
  isbn10: {type: string, format: isbn10}
  isbn13: {type: string, format: isbn13}
  creditcard: {type: string, format: creditcard}
  ssn: {type: string, format: ssn}
  hexcolor: {type: string, format: hexcolor}
  rgbcolor: {type: string, format: rgbcolor}
  byte: {type: string, format: byte}
  password: {type: string, format: password}
  date: {type: string, format: date}
  duration: {type: string, format: duration}
  datetime: {type: string, format: datetime}
  date-time: {type: string, format: date-time}
  short: {type: string, format: k8s-short-name}
  long: {type: string, format: k8s-long-name}
  unknown: {type: string, format: no-such-format}
  int32: {type: integer, format: int32}
  int64: {type: integer, format: int64}
  float: {type: number, format: float}
  double: {type: number, format: double}
  untyped: {format: date}
  list:
    type: array
    items: {type: string, format: ipv4}
`

// unsupportedSchema uses patternProperties, which passSchema leaves to
// upstream: a value that reaches it is never passed.
const unsupportedSchema = `type: object
properties:
  ok: {type: string}
  pp:
    type: object
    patternProperties:
      '^x': {type: integer}
`

// loadtestSchema is the schema of the gateway loadtest's custom
// resource (services/apigateway/loadtest benchCRD): 20 string fields of
// at most 128 characters under spec, and its 3 rules.
func loadtestSchema() string {
	var b strings.Builder
	b.WriteString(`type: object
properties:
  spec:
    type: object
    x-kubernetes-validations:
    - rule: "self.f00.size() <= 64"
    - rule: "self.f01 != 'forbidden'"
    - rule: "!has(self.f02) || self.f02.startsWith('v')"
    properties:
`)
	for i := range 20 {
		fmt.Fprintf(&b, "      f%02d: {type: string, maxLength: 128}\n", i)
	}
	return b.String()
}

// stringPool and numberPool are the leaf values the generator draws
// from: samples valid and invalid for every keyword and format of the
// schemas above (multi-byte runes for the lengths).
var (
	stringPool = []string{
		"", "a", "b", "c", "1", "t", "ab", "one", "two", "three", "both", "small", "large", "red", "héllo", "héllos", "hello",
		"ABC", "abc-def", "x y", "forbidden", "value-1", "value-22",
		"507f1f77bcf86cd799439011", "507f1f77bcf86cd79943901z",
		"http://example.com/path?q=1", "not a uri", "/relative",
		"user@example.com", "user@", "my-host.example.com", "-bad-.host", "1.2.3.4", "256.1.1.1",
		"::1", "2001:db8::68", "10.0.0.0/8", "10.0.0.0/33", "00:11:22:33:44:55", "00:11:22:33:44",
		"550e8400-e29b-41d4-a716-446655440000", "a987fbc9-4bed-3078-cf07-9141ba07c9f3", "6fa459ea-ee8a-3ca4-894e-db77e160355e",
		"886313e1-3b8a-5372-9b90-0c9aee199e5d", "550e8400e29b41d4a716446655440000", "550e8400-e29b-41d4-a716",
		"0321751043", "978-0321751041", "0321751044", "4111111111111111", "4111111111111112",
		"123-45-6789", "123-45-678", "#fff", "#ffff", "ffffff", "rgb(255,255,255)", "rgb(256,0,0)",
		"aGVsbG8=", "aGVsbG8", "2006-01-02", "2006-13-02", "1h30m", "3 days", "1 hour", "3 lightyears",
		"2014-12-15T19:30:20.000Z", "2014-12-15 19:30:20", "2014-12-15T19:30:20Z07",
		"k8s-name", "K8s-name", "a.b.c", "a..b", "-a",
		"v" + strings.Repeat("x", 39), strings.Repeat("é", 128), strings.Repeat("é", 129),
	}
	intPool   = []int64{-6, -5, -4, -3, -1, 0, 1, 2, 3, 4, 5, 6, 8, 10, 11, 100, 101, 1000, 1001, 2000, 2001, 1<<31 - 1, 1 << 31, -1<<31 - 1, 1 << 62}
	floatPool = []float64{0, 0.5, 1, 2.5, 3.75, -0.5, 0.25, 1e20, 3.5e38, 1e39, 2e30}
)

// valueGen generates JSON values for a go-openapi schema: mostly from the
// leaf values its own keywords accept (so whole objects are often valid),
// sometimes any pool value, and with probability mutate at each node a
// value of another JSON type.
type valueGen struct {
	r      *rand.Rand
	mutate float64
	// accepted caches, per leaf schema (by its path), the pool values
	// upstream's validator accepts for it and those it rejects.
	accepted map[string][2][]any
}

// leafValues are the pool values of the leaf's types.
func leafValues(s *spec.Schema) []any {
	var vs []any
	types := s.Type
	if len(types) == 0 {
		types = spec.StringOrArray{"string", "integer", "number", "boolean"}
	}
	for _, t := range types {
		switch t {
		case "string":
			for _, v := range stringPool {
				vs = append(vs, v)
			}
		case "integer":
			for _, v := range intPool {
				vs = append(vs, v)
			}
		case "number":
			for _, v := range intPool {
				vs = append(vs, v)
			}
			for _, v := range floatPool {
				vs = append(vs, v)
			}
		case "boolean":
			vs = append(vs, true, false)
		}
	}
	return append(vs, s.Enum...)
}

// leaf is a value for a node that is not an object or an array: mostly
// one its own keywords accept, sometimes one they reject, sometimes any.
func (g *valueGen) leaf(s *spec.Schema, path string) any {
	all := leafValues(s)
	sorted, cached := g.accepted[path]
	if !cached {
		v := validate.NewSchemaValidator(s, nil, "", strfmt.Default)
		var ok, rejected []any
		for _, x := range all {
			if v.Validate(x).IsValid() {
				ok = append(ok, x)
			} else {
				rejected = append(rejected, x)
			}
		}
		sorted = [2][]any{ok, rejected}
		g.accepted[path] = sorted
	}
	ok, rejected := sorted[0], sorted[1]
	switch n := g.r.IntN(40); {
	case n < 35 && len(ok) > 0:
		return ok[g.r.IntN(len(ok))]
	case n < 37 && len(rejected) > 0:
		return rejected[g.r.IntN(len(rejected))]
	}
	return all[g.r.IntN(len(all))]
}

// wrong is a value of a random JSON type.
func (g *valueGen) wrong() any {
	return []any{nil, "x", int64(3), 1.0, 2.5, true, []any{"a"}, map[string]any{"a": "b"}}[g.r.IntN(8)]
}

// value generates a value for s, the schema at path.
func (g *valueGen) value(s *spec.Schema, path string, depth int) any {
	if depth > 0 && g.r.Float64() < g.mutate {
		return g.wrong()
	}
	switch {
	case s.Type.Contains("object") || (len(s.Type) == 0 && len(s.Properties) > 0):
		m := map[string]any{}
		// Sorted, so that a seed generates the same objects every run.
		for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
			p := s.Properties[k]
			keep := 6
			if slices.Contains(s.Required, k) {
				keep = 9
			}
			if g.r.IntN(10) < keep {
				m[k] = g.value(&p, path+"."+k, depth+1)
			}
		}
		if ap := s.AdditionalProperties; ap != nil && ap.Schema != nil {
			for i := range g.r.IntN(3) {
				m[fmt.Sprintf("k%d", i)] = g.value(ap.Schema, path+".*", depth+1)
			}
		} else if ap != nil && !ap.Allows && g.r.IntN(10) == 0 {
			m["unknown"] = "x"
		}
		if len(s.PatternProperties) > 0 && g.r.IntN(2) == 0 {
			m["x1"] = []any{int64(1), "a"}[g.r.IntN(2)]
		}
		if depth == 0 {
			m["apiVersion"], m["kind"] = "example.com/v1", "Bench"
			m["metadata"] = map[string]any{"name": "b1", "namespace": "default"}
		}
		if len(s.Enum) > 0 && g.r.IntN(2) == 0 {
			return s.Enum[g.r.IntN(len(s.Enum))]
		}
		return m
	case s.Type.Contains("array"):
		l := make([]any, g.r.IntN(5))
		for i := range l {
			if s.Items != nil && s.Items.Schema != nil {
				l[i] = g.value(s.Items.Schema, path+"[]", depth+1)
			} else {
				l[i] = g.wrong()
			}
		}
		if len(l) > 1 && g.r.IntN(4) == 0 {
			l[1] = l[0]
		}
		return l
	case len(s.Type) == 0 && g.r.IntN(8) == 0:
		return []any{[]any{int64(1)}, map[string]any{"a": int64(1)}, []any{"x"}}[g.r.IntN(3)]
	}
	return g.leaf(s, path)
}

// openAPISchema converts a YAML v1 schema as Compile does and returns
// upstream's validator for it and the go-openapi schema it is built from.
func openAPISchema(t testing.TB, doc string) (apiservervalidation.SchemaValidator, *spec.Schema) {
	t.Helper()
	v1 := &apiextensionsv1.JSONSchemaProps{}
	if err := yaml.UnmarshalStrict([]byte(doc), v1); err != nil {
		t.Fatalf("decoding schema: %v", err)
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v1, internal, nil); err != nil {
		t.Fatal(err)
	}
	validator, openapi, err := apiservervalidation.NewSchemaValidator(internal)
	if err != nil {
		t.Fatal(err)
	}
	return validator, openapi
}

// passCase is one schema of the property test: upstream's validator and
// the go-openapi schema passSchema compiles.
type passCase struct {
	validator apiservervalidation.SchemaValidator
	openapi   *spec.Schema
	// maxFallback is the largest share of upstream-valid objects with
	// mutated values passSchema may leave to upstream: a mutation may put
	// a float such as 1.0 where an integer belongs, which upstream
	// accepts as a JSON integer and passSchema leaves to it. Without
	// mutations none may be left.
	maxFallback float64
}

// passCases are the schemas of the property and fuzz tests: the CRDs of
// testdata (the loadtest's 20-field bench schema among them) and the
// keyword, combinator, format and unsupported-keyword schemas above.
func passCases(t testing.TB) map[string]passCase {
	cases := map[string]passCase{}
	for _, name := range []string{"bench", "widgets", "listmaps"} {
		crd := loadCRD(t, name+".yaml")
		v := crd.Spec.Versions[0]
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			t.Fatal(err)
		}
		validator, openapi, err := apiservervalidation.NewSchemaValidator(internal)
		if err != nil {
			t.Fatal(err)
		}
		cases[name] = passCase{validator: validator, openapi: openapi, maxFallback: 0.04}
	}
	for name, doc := range map[string]string{"keywords": keywordsSchema, "combinators": combinatorsSchema, "formats": formatsSchema} {
		validator, openapi := openAPISchema(t, doc)
		cases[name] = passCase{validator: validator, openapi: openapi, maxFallback: 0.04}
	}
	validator, openapi := openAPISchema(t, loadtestSchema())
	cases["loadtest"] = passCase{validator: validator, openapi: openapi, maxFallback: 0.04}
	validator, openapi = openAPISchema(t, unsupportedSchema)
	cases["unsupported"] = passCase{validator: validator, openapi: openapi, maxFallback: 1}
	return cases
}

// TestPassSchemaMatchesUpstream: on generated objects, valid and mutated
// to be invalid in each way, passSchema never passes an object upstream's
// validator reports an error for, on create or (with ratcheting, against
// a generated old object) on update; and it passes nearly every object
// upstream finds valid (the rest, its fallbacks, are counted), none of
// them when no value is mutated to another type.
//
// Each of the 16 cases generates -pass-schema-objects objects: 600 in the
// normal test run (seconds under -race); a deeper run asks for more, e.g.
// go test -run PassSchemaMatchesUpstream -args -pass-schema-objects 20000.
func TestPassSchemaMatchesUpstream(t *testing.T) {
	cases := passCases(t)
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := cases[name]
		for _, mutate := range []float64{0, 0.04} {
			t.Run(fmt.Sprintf("%s/mutate=%v", name, mutate), func(t *testing.T) {
				p := compileSchema(c.openapi)
				if p == nil {
					t.Fatal("schema not compiled")
				}
				g := &valueGen{r: rand.New(rand.NewPCG(7, uint64(len(name)))), mutate: mutate, accepted: map[string][2][]any{}}
				n := *passSchemaObjects
				var valid, invalid, fallback int
				for i := range n {
					obj := g.value(c.openapi, "", 0)
					upstream := c.validator.Validate(obj)
					got := p.pass(obj)
					if got && !upstream.IsValid() {
						t.Fatalf("case %d: passed, upstream errors %v\nobject %#v", i, upstream.Errors, obj)
					}
					switch {
					case !upstream.IsValid():
						invalid++
					case got:
						valid++
					default:
						valid++
						fallback++
					}
					// Update: ratcheting against a generated old object
					// (half the time the new one with one field changed).
					old := g.value(c.openapi, "", 0)
					if g.r.IntN(2) == 0 {
						old = withOneChange(g, c.openapi, obj)
					}
					if got {
						if res := c.validator.ValidateUpdate(obj, old, apiservervalidation.WithRatcheting(nil)); !res.IsValid() {
							t.Fatalf("case %d: passed, upstream update errors %v\nobject %#v\nold %#v", i, res.Errors, obj, old)
						}
					}
				}
				t.Logf("%d upstream-valid (%d left to upstream), %d invalid", valid, fallback, invalid)
				if valid < n/40 || invalid < n/40 {
					t.Fatalf("%d valid, %d invalid of %d: the generated objects do not exercise both answers", valid, invalid, n)
				}
				maxFallback := c.maxFallback
				if mutate == 0 && maxFallback < 1 {
					maxFallback = 0
				}
				// The share rounds up to whole objects: with few valid
				// ones (mutated objects are mostly invalid) one fallback
				// is already over 4% of them.
				if float64(fallback) > math.Ceil(maxFallback*float64(valid)) {
					t.Fatalf("%d of %d upstream-valid objects left to upstream, want at most %.0f%%", fallback, valid, 100*maxFallback)
				}
			})
		}
	}
}

// passSchemaObjects is how many objects each TestPassSchemaMatchesUpstream
// case generates.
var passSchemaObjects = flag.Int("pass-schema-objects", 600, "objects generated per TestPassSchemaMatchesUpstream case")

// withOneChange is a copy of obj (an object) with one top-level property
// regenerated, so ratcheting sees unchanged and changed values.
func withOneChange(g *valueGen, s *spec.Schema, obj any) any {
	m, ok := obj.(map[string]any)
	if !ok {
		return obj
	}
	out := runtimeDeepCopy(m)
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		p := s.Properties[k]
		out[k] = g.value(&p, "."+k, 1)
		break
	}
	return out
}

// runtimeDeepCopy copies a JSON object.
func runtimeDeepCopy(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

// TestPassSchemaBenchObject: the loadtest's object passes without
// upstream's validator, on create and update, and Admit's result is
// unchanged.
func TestPassSchemaBenchObject(t *testing.T) {
	s := compile(t, "bench.yaml", "v1")
	obj := benchObject(t)
	obj.SetResourceVersion("1")
	if _, errs := s.Admit(context.Background(), obj, nil, FieldValidationStrict); len(errs) > 0 {
		t.Fatal(errs)
	}
	if !s.pass.pass(obj.Object) {
		t.Fatal("the admitted bench object is left to upstream's validator")
	}
	update := obj.DeepCopy()
	if _, errs := s.Admit(context.Background(), update, obj, FieldValidationStrict); len(errs) > 0 {
		t.Fatal(errs)
	}
}

// TestPassSchemaAdmitErrors: an object passSchema does not pass gets
// upstream's errors, field paths and messages (here a mistyped, an
// oversized and an unlisted value), on create and update.
func TestPassSchemaAdmitErrors(t *testing.T) {
	s := compile(t, "bench.yaml", "v1")
	obj := benchObject(t)
	spec := obj.Object["spec"].(map[string]any)
	spec["n01"] = "seven"
	spec["n05"] = int64(1001)
	spec["e03"] = "pink"
	want := []string{
		`spec.e03: Unsupported value: "pink": supported values: "red", "green", "blue"`,
		`spec.n01: Invalid value: "string": spec.n01 in body must be of type integer: "string"`,
		`spec.n05: Invalid value: 1001: spec.n05 in body should be less than or equal to 1000`,
	}
	for _, old := range []*unstructured.Unstructured{nil, benchObject(t)} {
		if old != nil {
			old.SetResourceVersion("1")
			obj.SetResourceVersion("1")
		}
		_, errs := s.Admit(context.Background(), obj.DeepCopy(), old, FieldValidationStrict)
		got := errStrings(errs)
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("update %v: errors %q, missing %q", old != nil, got, w)
			}
		}
	}
}

// FuzzPassSchema: for arbitrary JSON (decoded as the gateway decodes a
// body) and each schema of the property test, passSchema never passes a
// value upstream's validator reports an error for.
func FuzzPassSchema(f *testing.F) {
	for _, seed := range []string{
		`{"spec":{"s00":"value-1","n01":1,"b02":true,"e03":"red","n05":1000}}`,
		`{"spec":{"n01":1.0,"n05":-1,"e03":7,"s00":null}}`,
		`{"name":"héllo","count":4,"small":2147483648,"ratio":2.5,"f32":1e39,"port":"abc","tags":["a","a"],"labels":{"a":"b","c":"dd"}}`,
		`{"name":"ab","closed":{"a":"x","b":1},"numEnum":2.0,"anyEnum":[1],"matrix":[[1,2],[6]],"template":{"spec":{}}}`,
		`{"a":3,"b":"both","inner":{"x":3,"y":4},"list":["one","t","xy"]}`,
		`{"a":4,"c":"x","inner":{}}`,
		`{"uuid":"550e8400-e29b-41d4-a716-446655440000","date":"2006-01-02","ipv4":"1.2.3.4","untyped":5,"list":["1.2.3.4","x"]}`,
		`{"pp":{"x1":"a"},"ok":"y"}`,
		`[1,2]`, `"x"`, `null`,
	} {
		f.Add([]byte(seed))
	}
	cases := passCases(f)
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	sort.Strings(names)
	compiled := make([]*passSchema, len(names))
	for i, name := range names {
		compiled[i] = compileSchema(cases[name].openapi)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if err := utiljson.Unmarshal(data, &v); err != nil {
			return
		}
		for i, name := range names {
			if !compiled[i].pass(v) {
				continue
			}
			if res := cases[name].validator.Validate(v); !res.IsValid() {
				t.Fatalf("%s: passed, upstream errors %v\nvalue %#v", name, res.Errors, v)
			}
		}
	})
}

// TestPassSchemaUnsupported: a value reaching a keyword passSchema does
// not implement is left to upstream, the rest of the object is not; and
// a schema with a root property named like upstream's "IMPORTANT!" error
// marker is not compiled at all.
func TestPassSchemaUnsupported(t *testing.T) {
	_, openapi := openAPISchema(t, unsupportedSchema)
	p := compileSchema(openapi)
	if !p.pass(map[string]any{"ok": "a"}) {
		t.Error("an object without the patternProperties node was left to upstream")
	}
	if p.pass(map[string]any{"ok": "a", "pp": map[string]any{}}) {
		t.Error("an object with the patternProperties node passed")
	}
	if compileSchema(&spec.Schema{SchemaProps: spec.SchemaProps{Properties: map[string]spec.Schema{"IMPORTANT!x": {}}}}) != nil {
		t.Error("compiled a schema whose root property names start upstream's IMPORTANT! marker")
	}
	// Why: upstream rejects this value although exactly one oneOf
	// alternative passes, because the failing one's message starts with
	// the marker.
	validator, marked := openAPISchema(t, `type: object
properties:
  "IMPORTANT!x": {type: string}
oneOf:
- properties:
    "IMPORTANT!x": {minLength: 1}
- properties:
    "IMPORTANT!x": {maxLength: 1}
`)
	if res := validator.Validate(map[string]any{"IMPORTANT!x": "ab"}); res.IsValid() {
		t.Error("upstream accepts the value; the IMPORTANT! guard is not needed")
	}
	if compileSchema(marked) != nil {
		t.Error("compiled a schema with a root property starting with IMPORTANT!")
	}
	nested := spec.Schema{SchemaProps: spec.SchemaProps{Properties: map[string]spec.Schema{"IMPORTANT!x": {}}}}
	if compileSchema(&spec.Schema{SchemaProps: spec.SchemaProps{OneOf: []spec.Schema{{}, nested}}}) != nil {
		t.Error("compiled a schema whose root oneOf declares a property starting upstream's IMPORTANT! marker")
	}
}
