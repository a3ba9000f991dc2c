package crdschema

import (
	"context"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// widget builds a Widget manifest with spec given as YAML lines indented
// by four spaces.
func widget(spec string) string {
	return "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: default\n  resourceVersion: \"7\"\nspec:\n" + spec
}

// errStrings renders errs as kube-apiserver renders causes: "field: detail".
func errStrings(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// wantErrs checks that every want is a substring of one of errs, and that
// errs is empty when want is.
func wantErrs(t *testing.T, errs field.ErrorList, want []string) {
	t.Helper()
	got := errStrings(errs)
	if len(want) == 0 && len(got) > 0 {
		t.Fatalf("unexpected errors:\n%s", strings.Join(got, "\n"))
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			if strings.Contains(g, w) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("missing error %q in:\n%s", w, strings.Join(got, "\n"))
		}
	}
}

func TestAdmitCreate(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	for _, tc := range []struct {
		name string
		spec string
		want []string
	}{
		{"valid minimal", "  size: small\n", nil},
		{"valid full", "  size: large\n  replicas: 3\n  minReplicas: 2\n  color: red\n  name: abc\n  email: a@example.com\n  nickname: null\n  port: http\n  tags: [a, b]\n  ports: [{name: web, port: 80}]\n  labels: {a: b}\n  ratio: 0.5\n", nil},
		{"int-or-string int", "  size: small\n  port: 8080\n", nil},
		{"required", "  replicas: 1\n", []string{`spec.size: Required value`}},
		{"enum", "  size: huge\n", []string{`spec.size: Unsupported value: "huge": supported values: "small", "medium", "large"`}},
		{"type", "  size: small\n  replicas: many\n", []string{`spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`}},
		{"maximum", "  size: small\n  replicas: 101\n", []string{`spec.replicas: Invalid value: 101: spec.replicas in body should be less than or equal to 100`}},
		{"minimum", "  size: small\n  replicas: -1\n", []string{`spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0`}},
		{"exclusive minimum", "  size: small\n  ratio: 0\n", []string{`spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0`}},
		{"pattern", "  size: small\n  color: Red\n", []string{`spec.color: Invalid value: "Red": spec.color in body should match '^[a-z]+$'`}},
		{"maxLength", "  size: small\n  color: abcdefghijklmn\n", []string{`spec.color: Too long: may not be more than 12 bytes`}},
		{"minLength", "  size: small\n  name: ab\n", []string{`spec.name: Invalid value: "ab": spec.name in body should be at least 3 chars long`}},
		{"format", "  size: small\n  email: not-an-email\n", []string{`spec.email: Invalid value: "not-an-email": spec.email in body must be of type email: "not-an-email"`}},
		{"not nullable", "  size: small\n  color: null\n", nil}, // null of a non-nullable field without default is dropped
		{"maxItems", "  size: small\n  tags: [a, b, c, d]\n", []string{`spec.tags: Too many: 4: must have at most 3 items`}},
		{"items", "  size: small\n  tags: ['']\n", []string{`spec.tags[0]: Invalid value: "": spec.tags[0] in body should be at least 1 chars long`}},
		{"maxProperties", "  size: small\n  labels: {a: b, c: d, e: f}\n", []string{`spec.labels: Too many: 3: must have at most 2 items`}},
		{"additionalProperties", "  size: small\n  labels: {a: 1}\n", []string{`spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer"`}},
		{"list map duplicate", "  size: small\n  ports: [{name: a}, {name: a}]\n", []string{`spec.ports[1]: Duplicate value: {"name":"a"}`}},
		{"embedded resource needs kind", "  size: small\n  template: {apiVersion: v1, metadata: {name: x}}\n", []string{`spec.template.kind: Required value`}},
		{"embedded resource name", "  size: small\n  template: {apiVersion: v1, kind: Pod, metadata: {name: a/b}}\n", []string{`spec.template.metadata.name: Invalid value: "a/b": may not contain '/'`}},
		{"cel rule with fieldPath and reason", "  size: small\n  replicas: 1\n  minReplicas: 2\n", []string{`spec.replicas: Invalid value: replicas must be at least minReplicas`}},
		{"cel messageExpression", "  size: small\n  color: black\n", []string{`spec: Invalid value: a small widget cannot be black`}},
		{"cel reason and fieldPath", "  size: small\n  tags: [a, b, c]\n", []string{`spec.tags: Forbidden: small widgets carry at most two tags`}},
		{"int-or-string rejects a boolean", "  size: small\n  port: true\n", []string{`spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"`}},
		{"cel skipped on blocking error", "  replicas: 1\n  minReplicas: 2\n", []string{`spec.size: Required value`, `some validation rules were not checked because the object was invalid`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := parseObj(t, widget(tc.spec))
			_, errs := s.Admit(context.Background(), obj, nil, FieldValidationStrict)
			wantErrs(t, errs, tc.want)
		})
	}
}

func TestAdmitReasonAndFieldPath(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	_, errs := s.Admit(context.Background(), parseObj(t, widget("  size: small\n  replicas: 1\n  minReplicas: 2\n")), nil, "")
	if len(errs) != 1 || errs[0].Type != field.ErrorTypeInvalid || errs[0].Field != "spec.replicas" {
		t.Fatalf("errs = %v, want one Invalid at spec.replicas", errs)
	}
}

func TestAdmitDefaults(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	obj := parseObj(t, widget("  size: small\n  ports: [{name: web}]\n"))
	mustAdmit(t, s, obj)
	want := parseObj(t, widget("  size: small\n  replicas: 1\n  minReplicas: 0\n  ports: [{name: web, protocol: TCP}]\n"))
	if !equality.Semantic.DeepEqual(obj.Object, want.Object) {
		t.Fatalf("defaulted = %v\nwant %v", obj.Object, want.Object)
	}
}

func TestAdmitUnknownFields(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	doc := strings.Replace(widget("  size: small\n  foo: 1\n  ports: [{name: a, bar: 2}]\n  extra: {kept: true}\n  template: {apiVersion: v1, kind: Pod, metadata: {name: x, junk: 1}, spec: {any: thing}, nope: 1}\n")+"status:\n  phase: Ready\n  baz: 3\nwhat: 1\n", "  namespace: default\n", "  namespace: default\n  junk: 1\n", 1)
	wantFields := []string{`unknown field "metadata.junk"`, `unknown field "spec.foo"`, `unknown field "spec.ports[0].bar"`, `unknown field "spec.template.metadata.junk"`, `unknown field "spec.template.nope"`, `unknown field "status.baz"`, `unknown field "what"`}

	t.Run("Warn", func(t *testing.T) {
		obj := parseObj(t, doc)
		warnings, errs := s.Admit(context.Background(), obj, nil, FieldValidationWarn)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		got := strings.Join(warnings, "\n")
		for _, w := range wantFields {
			if !strings.Contains(got, w) {
				t.Errorf("warnings lack %s:\n%s", w, got)
			}
		}
		want := parseObj(t, widget("  size: small\n  replicas: 1\n  minReplicas: 0\n  ports: [{name: a, protocol: TCP}]\n  extra: {kept: true}\n  template: {apiVersion: v1, kind: Pod, metadata: {name: x}, spec: {any: thing}}\n")+"status:\n  phase: Ready\n")
		if !equality.Semantic.DeepEqual(obj.Object, want.Object) {
			t.Fatalf("pruned = %v\nwant %v", obj.Object, want.Object)
		}
	})
	t.Run("Ignore", func(t *testing.T) {
		warnings, errs := s.Admit(context.Background(), parseObj(t, doc), nil, FieldValidationIgnore)
		if len(errs) > 0 || len(warnings) > 0 {
			t.Fatalf("warnings %v errs %v, want none", warnings, errs)
		}
	})
	t.Run("Strict", func(t *testing.T) {
		_, errs := s.Admit(context.Background(), parseObj(t, doc), nil, FieldValidationStrict)
		if !UnknownFieldErrors(errs) {
			t.Fatalf("errs %v are not unknown-field errors", errs)
		}
		st := StatusError(s.GroupVersionKind().GroupKind(), "w1", errs)
		if st.ErrStatus.Code != 400 || st.ErrStatus.Reason != "BadRequest" {
			t.Fatalf("status %d %s, want 400 BadRequest", st.ErrStatus.Code, st.ErrStatus.Reason)
		}
		for _, w := range wantFields {
			if !strings.Contains(st.ErrStatus.Message, w) {
				t.Errorf("message lacks %s: %s", w, st.ErrStatus.Message)
			}
		}
		if !strings.HasPrefix(st.ErrStatus.Message, `strict decoding error: unknown field "`) {
			t.Errorf("message = %s", st.ErrStatus.Message)
		}
	})
}

func TestAdmitUpdateTransitionRule(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	old := parseObj(t, widget("  size: small\n  name: first\n"))
	mustAdmit(t, s, old)
	same := parseObj(t, widget("  size: medium\n  name: first\n"))
	if _, errs := s.Admit(context.Background(), same, old, ""); len(errs) > 0 {
		t.Fatalf("unchanged name: %v", errs)
	}
	changed := parseObj(t, widget("  size: small\n  name: second\n"))
	_, errs := s.Admit(context.Background(), changed, old, "")
	wantErrs(t, errs, []string{`spec.name: Invalid value: "second": name is immutable`})
}

// TestAdmitOptionalOldSelf: a rule with optionalOldSelf also runs on
// create (oldSelf is an empty optional) and compares on update.
func TestAdmitOptionalOldSelf(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	old := parseObj(t, widget("  size: small\n  replicas: 5\n  minReplicas: 3\n"))
	mustAdmit(t, s, old)
	neg := parseObj(t, widget("  size: small\n  minReplicas: -1\n"))
	_, errs := s.Admit(context.Background(), neg, nil, "")
	wantErrs(t, errs, []string{`spec.minReplicas: Invalid value: -1: minReplicas may not decrease`})
	up := parseObj(t, widget("  size: small\n  replicas: 5\n  minReplicas: 4\n"))
	if _, errs := s.Admit(context.Background(), up, old, ""); len(errs) > 0 {
		t.Fatalf("raising minReplicas: %v", errs)
	}
	down := parseObj(t, widget("  size: small\n  replicas: 5\n  minReplicas: 2\n"))
	_, errs = s.Admit(context.Background(), down, old, "")
	wantErrs(t, errs, []string{`spec.minReplicas: Invalid value: 2: minReplicas may not decrease`})
}

func TestAdmitStatusError(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	_, errs := s.Admit(context.Background(), parseObj(t, widget("  size: huge\n")), nil, "")
	st := StatusError(s.GroupVersionKind().GroupKind(), "w1", errs)
	if st.ErrStatus.Code != 422 || st.ErrStatus.Reason != "Invalid" {
		t.Fatalf("status %d %s, want 422 Invalid", st.ErrStatus.Code, st.ErrStatus.Reason)
	}
	want := `Widget.example.com "w1" is invalid: [spec.size: Unsupported value: "huge": supported values: "small", "medium", "large", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`
	if st.ErrStatus.Message != want {
		t.Fatalf("message = %s\nwant %s", st.ErrStatus.Message, want)
	}
}

// TestDefaultOnRead: an object stored before the schema gained a default
// and lost a field reads with the default and without the field;
// malformed metadata fields of an embedded resource are dropped rather
// than failing the read.
func TestDefaultOnRead(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	stored := parseObj(t, "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: default\nspec:\n  size: small\n  gone: 1\n  ports: [{name: web}]\n  template: {apiVersion: v1, kind: Pod, metadata: {name: x, labels: notamap}}\n")
	s.DefaultOnRead(stored)
	want := parseObj(t, "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: default\n  generation: 1\nspec:\n  size: small\n  replicas: 1\n  minReplicas: 0\n  ports: [{name: web, protocol: TCP}]\n  template: {apiVersion: v1, kind: Pod, metadata: {name: x}}\n")
	if !equality.Semantic.DeepEqual(stored.Object, want.Object) {
		t.Fatalf("read = %v\nwant %v", stored.Object, want.Object)
	}
}

// TestAdmitWithoutDefaultsOrEmbedded: a schema with neither defaults nor
// embedded resources (whose walks Admit skips) still prunes unknown
// fields and nulls of non-nullable fields.
func TestAdmitWithoutDefaultsOrEmbedded(t *testing.T) {
	s := compile(t, "bench.yaml", "v1")
	if s.hasDefaults || s.hasEmbedded || s.hasListSetsOrMaps {
		t.Fatalf("bench.yaml: hasDefaults %v hasEmbedded %v hasListSetsOrMaps %v", s.hasDefaults, s.hasEmbedded, s.hasListSetsOrMaps)
	}
	obj := parseObj(t, "apiVersion: example.com/v1\nkind: Bench\nmetadata: {name: b, namespace: default}\nspec: {s00: value-0, n01: 1, n05: 2, b02: false, e03: red, s04: null, zz: 1}\n")
	warnings, errs := s.Admit(context.Background(), obj, nil, FieldValidationWarn)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if strings.Join(warnings, ",") != `unknown field "spec.zz"` {
		t.Fatalf("warnings = %v", warnings)
	}
	want := parseObj(t, "apiVersion: example.com/v1\nkind: Bench\nmetadata: {name: b, namespace: default}\nspec: {s00: value-0, n01: 1, n05: 2, b02: false, e03: red}\n")
	if !equality.Semantic.DeepEqual(obj.Object, want.Object) {
		t.Fatalf("admitted = %v\nwant %v", obj.Object, want.Object)
	}
}

// TestAdmitStatus: a write through the status subresource validates the
// status against its schema and the scale subresource's status paths;
// the spec is not re-validated against the OpenAPI schema.
func TestAdmitStatus(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	old := parseObj(t, widget("  size: small\n"))
	mustAdmit(t, s, old)
	for _, tc := range []struct {
		name, status string
		want         []string
	}{
		{"valid", "status:\n  replicas: 2\n  selector: app=w\n  phase: Ready\n", nil},
		{"enum", "status:\n  phase: Gone\n", []string{`status.phase: Unsupported value: "Gone": supported values: "Pending", "Ready"`}},
		{"type", "status:\n  replicas: two\n", []string{`status.replicas: Invalid value: "string": replicas in body must be of type integer: "string"`, `.status.replicas: Invalid value: 0: .status.replicas accessor error: two is of the type string, expected int64`}},
		{"scale status replicas", "status:\n  replicas: -1\n", []string{`.status.replicas: Invalid value: -1: should be a non-negative integer`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := parseObj(t, widget("  size: small\n")+tc.status)
			_, errs := s.AdmitStatus(context.Background(), obj, old, FieldValidationStrict)
			wantErrs(t, errs, tc.want)
		})
	}
}

// mustAdmit admits obj as created, failing the test on any error.
func mustAdmit(t *testing.T, s *Schema, obj *unstructured.Unstructured) {
	t.Helper()
	if _, errs := s.Admit(context.Background(), obj, nil, ""); len(errs) > 0 {
		t.Fatal(errs)
	}
}

// TestAdmitMalformedMetadata: metadata that does not decode is a 400 with
// upstream's decoder text, and nothing else is checked.
func TestAdmitMalformedMetadata(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	obj := parseObj(t, "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  labels: notamap\nspec:\n  size: huge\n")
	_, errs := s.Admit(context.Background(), obj, nil, "")
	st := StatusError(s.GroupVersionKind().GroupKind(), "w1", errs)
	want := `Widget in version "v1" cannot be handled as a Widget: json: cannot unmarshal string into Go struct field ObjectMeta.labels of type map[string]string`
	if st.ErrStatus.Code != 400 || st.ErrStatus.Message != want {
		t.Fatalf("status %d %q\nwant 400 %q", st.ErrStatus.Code, st.ErrStatus.Message, want)
	}
}

// TestAdmitConcurrent admits from several goroutines through one Schema,
// as the gateway does (run with -race): results are the same as alone.
func TestAdmitConcurrent(t *testing.T) {
	s := compile(t, "widgets.yaml", "v1")
	old := parseObj(t, widget("  size: small\n  name: first\n"))
	mustAdmit(t, s, old)
	update := parseObj(t, widget("  size: small\n  name: second\n  color: black\n"))
	stored := parseObj(t, widget("  size: small\n"))
	var wg sync.WaitGroup
	errc := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			for range 20 {
				_, errs := s.Admit(context.Background(), update.DeepCopy(), old, FieldValidationWarn)
				if got := strings.Join(errStrings(errs), "; "); got != `spec: Invalid value: a small widget cannot be black; spec.name: Invalid value: "second": name is immutable` {
					errc <- got
					return
				}
				s.DefaultOnRead(stored.DeepCopy())
			}
		})
	}
	wg.Wait()
	close(errc)
	for got := range errc {
		t.Errorf("errors = %s", got)
	}
}

// TestAdmitNestedListSet: a listType=set deep in the schema (under
// additionalProperties and items) is found, and its duplicates refused.
func TestAdmitNestedListSet(t *testing.T) {
	s, err := Compile(parseCRD(t, crdWithSchema(`type: object
additionalProperties:
  type: array
  items:
    type: array
    x-kubernetes-list-type: set
    items: {type: string}
`)), "v1")
	if err != nil {
		t.Fatal(err)
	}
	obj := parseObj(t, "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g, namespace: default}\nspec: {a: [[x, y, x]]}\n")
	_, errs := s.Admit(context.Background(), obj, nil, "")
	wantErrs(t, errs, []string{`spec[a][0][2]: Duplicate value: "x"`})
}
