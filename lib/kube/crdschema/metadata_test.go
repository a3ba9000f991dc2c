package crdschema

import (
	"math/rand/v2"
	"reflect"
	"testing"

	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apimachinery/pkg/runtime"
)

// roundTrip is upstream's treatment of metadata that canonicalMetadata
// lets prune skip: the map after GetObjectMeta and SetObjectMeta, and the
// unknown fields reported.
func roundTrip(t *testing.T, metadata any) (out any, unknown []string, err error) {
	t.Helper()
	obj := map[string]any{"metadata": runtime.DeepCopyJSONValue(metadata)}
	meta, _, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(obj, schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return nil, nil, err
	}
	if err := schemaobjectmeta.SetObjectMeta(obj, meta); err != nil {
		t.Fatal(err)
	}
	return obj["metadata"], unknown, nil
}

// metadataValues are candidate values per metadata key: the forms the
// gateway produces and near misses the round trip changes or rejects.
var metadataValues = map[string][]any{
	"name":              {"w1", "", int64(3), "bad\xffutf8", nil},
	"generateName":      {"w-", ""},
	"namespace":         {"default", ""},
	"uid":               {"6f1c2a9e-0000-4000-8000-000000000001", ""},
	"resourceVersion":   {"42", "", int64(42)},
	"selfLink":          {"/apis/x", ""},
	"generation":        {int64(1), int64(0), float64(1), "1"},
	"creationTimestamp": {"2026-11-28T23:00:00Z", "2026-11-28T23:00:00.5Z", "2026-11-28T23:00:00+01:00", "0001-01-01T00:00:00Z", "yesterday", nil},
	"labels":            {map[string]any{"a": "b", "e": ""}, map[string]any{}, map[string]any{"a": int64(1)}, map[string]any{"a": nil}},
	"annotations":       {map[string]any{"note": "x"}, map[string]any{}},
	"finalizers":        {[]any{"example.com/f"}},
	"unknownKey":        {"x"},
	"managedFields": {
		[]any{map[string]any{"manager": "kubectl", "operation": "Update", "apiVersion": "example.com/v1", "time": "2026-11-28T23:00:00Z", "fieldsType": "FieldsV1",
			"fieldsV1": map[string]any{"f:spec": map[string]any{".": map[string]any{}, "f:n": map[string]any{}}}}},
		[]any{map[string]any{"manager": "m", "operation": "Apply", "apiVersion": "example.com/v1", "fieldsType": "FieldsV1", "fieldsV1": map[string]any{}, "subresource": "status"}},
		[]any{map[string]any{"manager": "m", "time": "2026-11-28T23:00:00.25Z"}},
		[]any{map[string]any{"manager": "m", "fieldsV1": map[string]any{"f:a": "x"}}},
		[]any{map[string]any{"manager": "m", "extra": "x"}},
		[]any{map[string]any{"manager": ""}},
		[]any{},
		[]any{"not an entry"},
	},
}

// TestCanonicalMetadataIsRoundTripIdentity checks, on random metadata
// built from metadataValues, that whenever canonicalMetadata lets prune
// skip the round trip through ObjectMeta, the round trip would have
// returned the same map and reported nothing; and that it does not skip
// the gateway's usual create metadata's near misses.
func TestCanonicalMetadataIsRoundTripIdentity(t *testing.T) {
	keys := make([]string, 0, len(metadataValues))
	for k := range metadataValues {
		keys = append(keys, k)
	}
	rng := rand.New(rand.NewPCG(19, 19))
	skipped := 0
	for i := range 5000 {
		m := map[string]any{}
		for _, k := range keys {
			if rng.IntN(3) == 0 {
				// The first value is the usual one: half the time.
				vs := metadataValues[k]
				v := vs[0]
				if rng.IntN(2) == 0 {
					v = vs[rng.IntN(len(vs))]
				}
				m[k] = runtime.DeepCopyJSONValue(v)
			}
		}
		if !canonicalMetadata(m) {
			continue
		}
		skipped++
		out, unknown, err := roundTrip(t, m)
		if err != nil || len(unknown) > 0 || !reflect.DeepEqual(out, m) {
			t.Fatalf("case %d: canonicalMetadata(%#v) is true, but the round trip gives %#v, unknown %v, error %v", i, m, out, unknown, err)
		}
	}
	if skipped < 300 {
		t.Fatalf("only %d of 5000 random metadata maps were canonical; the test covers too little", skipped)
	}

	for _, m := range []map[string]any{
		{"name": "w1", "creationTimestamp": "2026-11-28T23:00:00.5Z"},
		{"name": "w1", "labels": map[string]any{}},
		{"name": "w1", "unknownKey": "x"},
		{"name": "w1", "generation": float64(1)},
		{"name": "w1", "finalizers": []any{"example.com/f"}},
	} {
		if canonicalMetadata(m) {
			t.Errorf("canonicalMetadata(%#v) is true; the round trip changes or reports it", m)
		}
	}
}
