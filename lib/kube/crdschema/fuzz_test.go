package crdschema

import (
	"context"
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FuzzAdmit feeds arbitrary JSON to Admit of the widgets schema (as the
// body of a create, and of an update of the previous valid object) and
// checks what must hold for any input: no panic; every error has a type
// and renders as a Status; pruning and defaulting are idempotent (the
// admitted object, admitted again under Strict, has no unknown field and
// does not change); an accepted object encodes as JSON.
func FuzzAdmit(f *testing.F) {
	for _, seed := range []string{
		`{"spec":{"size":"small"}}`,
		`{"spec":{"size":"large","replicas":3,"minReplicas":2,"color":"red","name":"abc","port":"http","tags":["a"],"ports":[{"name":"web","port":80}],"labels":{"a":"b"},"ratio":0.5}}`,
		`{"spec":{"size":"small","foo":1,"ports":[{"name":"a","bar":2}],"template":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x","junk":1},"spec":{"any":"thing"}}},"status":{"phase":"Ready","x":1},"what":1}`,
		`{"spec":{"size":"small","nickname":null,"color":null,"ports":[{"name":"a"},{"name":"a"}]}}`,
		`{"metadata":{"name":"w1","labels":{"bad key":"x"},"finalizers":["f"]},"spec":{"size":"small","replicas":1,"minReplicas":2}}`,
		`{"metadata":{"name":7},"spec":[]}`,
		`{"spec":{"size":"small","extra":{"a":{"b":[1,2,{"c":null}]}}}}`,
	} {
		f.Add([]byte(seed), uint8(0), true)
	}
	crd := loadCRD(f, "widgets.yaml")
	s, err := Compile(crd, "v1")
	if err != nil {
		f.Fatal(err)
	}
	modes := []string{"", FieldValidationIgnore, FieldValidationWarn, FieldValidationStrict}
	f.Fuzz(func(t *testing.T, data []byte, mode uint8, typed bool) {
		obj := decodeObject(data, typed)
		if obj == nil {
			return
		}
		ctx := context.Background()
		_, errs := s.Admit(ctx, obj.DeepCopy(), nil, modes[int(mode)%len(modes)])
		checkErrs(t, s, errs)

		admitted := obj.DeepCopy()
		if _, errs := s.Admit(ctx, admitted, nil, FieldValidationIgnore); len(errs) == 0 {
			if _, err := json.Marshal(admitted.Object); err != nil {
				t.Fatalf("accepted object does not encode: %v", err)
			}
			again := admitted.DeepCopy()
			_, errs := s.Admit(ctx, again, nil, FieldValidationStrict)
			if UnknownFieldErrors(errs) {
				t.Fatalf("unknown fields after pruning: %v", errs)
			}
			if !equality.Semantic.DeepEqual(again.Object, admitted.Object) {
				t.Fatalf("second admission changed the object:\n%v\n%v", admitted.Object, again.Object)
			}
			// An update of the admitted object to the raw input.
			admitted.SetResourceVersion("1")
			update := obj.DeepCopy()
			update.SetResourceVersion("1")
			_, errs = s.Admit(ctx, update, admitted, FieldValidationWarn)
			checkErrs(t, s, errs)
			if _, errs := s.AdmitStatus(ctx, obj.DeepCopy(), admitted, FieldValidationWarn); errs != nil {
				checkErrs(t, s, errs)
			}
		}
	})
}

// decodeObject decodes data as the gateway does (integers as int64); with
// typed it sets the Widget's apiVersion and kind so the input reaches the
// schema checks. It returns nil for JSON that is not an object.
func decodeObject(data []byte, typed bool) *unstructured.Unstructured {
	m := map[string]any{}
	if err := utiljson.Unmarshal(data, &m); err != nil {
		return nil
	}
	if typed {
		m["apiVersion"], m["kind"] = "example.com/v1", "Widget"
		if md, ok := m["metadata"].(map[string]any); ok {
			md["namespace"] = "default"
		}
	}
	return &unstructured.Unstructured{Object: m}
}

// checkErrs fails on an error without a type, and renders errs as the
// gateway would.
func checkErrs(t *testing.T, s *Schema, errs field.ErrorList) {
	t.Helper()
	for _, e := range errs {
		if e == nil || e.Type == "" {
			t.Fatalf("malformed error in %v", errs)
		}
	}
	if len(errs) > 0 {
		if st := StatusError(s.GroupVersionKind().GroupKind(), "w", errs); st.ErrStatus.Code != 400 && st.ErrStatus.Code != 422 {
			t.Fatalf("status code %d", st.ErrStatus.Code)
		}
	}
}
