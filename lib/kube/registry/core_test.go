package registry

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// fieldErrors is errs as sorted "type field" strings (map iteration makes
// their order random).
func fieldErrors(errs field.ErrorList) []string {
	out := []string{}
	for _, e := range errs {
		out = append(out, string(e.Type)+" "+e.Field)
	}
	slices.Sort(out)
	return out
}

// TestConfigMapAndSecretValidation: keys must be valid ConfigMap keys, a
// ConfigMap key may not be in both data and binaryData, the values may
// not exceed MaxSecretSize together, and an immutable object stays
// immutable with the same data.
func TestConfigMapAndSecretValidation(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "x", Namespace: "ns", ResourceVersion: "1"}
	yes, no := true, false
	big := strings.Repeat("v", corev1.MaxSecretSize/2+1)
	cm := func(data map[string]string, binary map[string][]byte, immutable *bool) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: meta, Data: data, BinaryData: binary, Immutable: immutable}
	}
	sec := func(data map[string][]byte, immutable *bool) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: meta, Data: data, Immutable: immutable, Type: corev1.SecretTypeOpaque}
	}
	for _, tc := range []struct {
		name     string
		strategy Strategy
		obj, old runtime.Object // old nil: a create
		want     []string
	}{
		{"valid configmap", configMapStrategy{}, cm(map[string]string{"a": "1"}, map[string][]byte{"b": {1}}, nil), nil, []string{}},
		{"configmap keys", configMapStrategy{}, cm(map[string]string{"a b": "1", "ok": "2"}, map[string][]byte{"c/d": {1}}, nil), nil,
			[]string{"FieldValueInvalid binaryData[c/d]", "FieldValueInvalid data[a b]"}},
		{"configmap key in data and binaryData", configMapStrategy{}, cm(map[string]string{"a": "1"}, map[string][]byte{"a": {1}}, nil), nil,
			[]string{"FieldValueInvalid data[a]"}},
		{"configmap too large", configMapStrategy{}, cm(map[string]string{"a": big}, map[string][]byte{"b": []byte(big)}, nil), nil,
			[]string{"FieldValueTooLong []"}},
		{"valid secret", secretStrategy{}, sec(map[string][]byte{"a": {1}}, nil), nil, []string{}},
		{"secret keys", secretStrategy{}, sec(map[string][]byte{"a b": {1}, "ok": {2}}, nil), nil, []string{"FieldValueInvalid data[a b]"}},
		{"secret too large", secretStrategy{}, sec(map[string][]byte{"a": []byte(big), "b": []byte(big)}, nil), nil, []string{"FieldValueTooLong data"}},

		{"configmap update", configMapStrategy{}, cm(map[string]string{"a": "2"}, nil, nil), cm(map[string]string{"a": "1"}, nil, nil), []string{}},
		{"configmap made immutable", configMapStrategy{}, cm(map[string]string{"a": "2"}, nil, &yes), cm(map[string]string{"a": "1"}, nil, &no), []string{}},
		{"immutable configmap unchanged", configMapStrategy{}, cm(map[string]string{"a": "1"}, map[string][]byte{"b": {1}}, &yes), cm(map[string]string{"a": "1"}, map[string][]byte{"b": {1}}, &yes), []string{}},
		{"immutable configmap data", configMapStrategy{}, cm(map[string]string{"a": "2"}, nil, &yes), cm(map[string]string{"a": "1"}, nil, &yes),
			[]string{"FieldValueForbidden data"}},
		{"immutable configmap binaryData", configMapStrategy{}, cm(nil, map[string][]byte{"b": {2}}, &yes), cm(nil, map[string][]byte{"b": {1}}, &yes),
			[]string{"FieldValueForbidden data"}},
		{"immutable configmap made mutable", configMapStrategy{}, cm(map[string]string{"a": "1"}, nil, nil), cm(map[string]string{"a": "1"}, nil, &yes),
			[]string{"FieldValueForbidden immutable"}},
		{"immutable configmap made mutable and changed", configMapStrategy{}, cm(map[string]string{"a": "2"}, nil, &no), cm(map[string]string{"a": "1"}, nil, &yes),
			[]string{"FieldValueForbidden data", "FieldValueForbidden immutable"}},
		{"immutable secret unchanged", secretStrategy{}, sec(map[string][]byte{"a": {1}}, &yes), sec(map[string][]byte{"a": {1}}, &yes), []string{}},
		{"immutable secret data", secretStrategy{}, sec(map[string][]byte{"a": {2}}, &yes), sec(map[string][]byte{"a": {1}}, &yes),
			[]string{"FieldValueForbidden data"}},
		{"immutable secret made mutable and changed", secretStrategy{}, sec(nil, nil), sec(map[string][]byte{"a": {1}}, &yes),
			[]string{"FieldValueForbidden data", "FieldValueForbidden immutable"}},
		{"immutable secret with a bad key", secretStrategy{}, sec(map[string][]byte{"a b": {1}}, &yes), sec(map[string][]byte{"a": {1}}, &yes),
			[]string{"FieldValueForbidden data", "FieldValueInvalid data[a b]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errs field.ErrorList
			if tc.old == nil {
				errs = tc.strategy.Validate(tc.obj)
			} else {
				errs = tc.strategy.ValidateUpdate(tc.obj, tc.old)
			}
			if got := fieldErrors(errs); !slices.Equal(got, tc.want) {
				t.Fatalf("errors %q, want %q (%v)", got, tc.want, errs)
			}
		})
	}
}
