package codec

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// checkAppendJSON fails t unless appendJSON writes what encoding/json's
// Marshal writes for v, or leaves v to encoding/json.
func checkAppendJSON(t *testing.T, v any) {
	t.Helper()
	got, ok := appendJSON(nil, v)
	want, err := json.Marshal(v)
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("appendJSON encoded %#v, which encoding/json refuses: %v", v, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("appendJSON(%#v)\n got %s\nwant %s", v, got, want)
	}
}

// TestAppendJSON: custom resource values encode as encoding/json encodes
// them, and values appendJSON does not handle are left to it.
func TestAppendJSON(t *testing.T) {
	for _, v := range []any{
		nil, true, false, "", int64(0), int64(-1), int64(math.MaxInt64), int64(math.MinInt64),
		0.0, math.Copysign(0, -1), 1.5, -2.25, 1e-6, 1e-7, 9.99e-7, 1e20, 1e21, 1.5e300, 5e-324, 1e-9, 123456789.125,
		"plain", `quote " backslash \ slash /`, "<script>&amp;</script>", "\b\f\n\r\t\x00\x01\x1f\x7f",
		"é ü 日本 🙂", "\xff\xfe bad utf-8 \xc3", "line\u2028para\u2029", "\u2027\u202a",
		map[string]any(nil), map[string]any{}, []any(nil), []any{},
		map[string]any{"b": int64(1), "a": []any{"x", nil, 2.5, map[string]any{"z": true, "<": ">"}}, "B": map[string]any{}},
	} {
		if _, ok := appendJSON(nil, v); !ok {
			t.Errorf("appendJSON left %#v to encoding/json", v)
		}
		checkAppendJSON(t, v)
	}
	for _, v := range []any{
		int(1), int32(1), float32(1.5), []string{"a"}, map[string]string{"a": "b"}, math.NaN(), math.Inf(1),
		map[string]any{"ok": "x", "bad": int(3)}, []any{"x", math.Inf(-1)}, json.Number("1"),
	} {
		if _, ok := appendJSON(nil, v); ok {
			t.Errorf("appendJSON handled %#v (%T), which it should leave to encoding/json", v, v)
		}
	}
}

// TestEncodeUnstructuredJSON: a custom resource's JSON is the scheme's,
// byte for byte, with the fast path and with a value that falls back.
func TestEncodeUnstructuredJSON(t *testing.T) {
	for _, obj := range []map[string]any{
		{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w", "generation": int64(1)},
			"spec": map[string]any{"size": 2.5, "tags": []any{"a&b", "<c>"}, "n": int64(7)}},
		{"apiVersion": "example.com/v1", "kind": "Widget", "spec": map[string]any{"typed": []string{"x"}}},
	} {
		u := &unstructured.Unstructured{Object: obj}
		var want, got, gotW bytes.Buffer
		if err := unstructured.UnstructuredJSONScheme.Encode(u, &want); err != nil {
			t.Fatal(err)
		}
		got.WriteString("prefix:")
		if err := encodeUnstructuredJSON(&got, u); err != nil {
			t.Fatal(err)
		}
		if g := bytes.TrimPrefix(got.Bytes(), []byte("prefix:")); !bytes.Equal(g, want.Bytes()) {
			t.Fatalf("got %s\nwant %s", g, want.Bytes())
		}
		// A writer that is not a bytes.Buffer.
		if err := encodeUnstructuredJSON(struct{ *bytes.Buffer }{&gotW}, u); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(gotW.Bytes(), want.Bytes()) {
			t.Fatalf("got %s\nwant %s", gotW.Bytes(), want.Bytes())
		}
	}
}

// FuzzAppendJSON: any JSON document, decoded as a custom resource is
// (integers as int64), and any string encode as encoding/json encodes
// them.
func FuzzAppendJSON(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[1.5,"x",null,true,{"c":"<&>"}],"A":{}}`, `[1e-7,1e21,-0.0,5e-324]`, `"\u2028\ud800"`,
		`{"metadata":{"name":"w","labels":{"z":"1","a":"2"}},"spec":{"n":9007199254740993}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAppendJSON(t, string(data))
		var v any
		if err := utiljson.Unmarshal(data, &v); err != nil {
			return
		}
		checkAppendJSON(t, v)
	})
}

// BenchmarkEncodeUnstructuredJSON: a custom resource of 20 spec fields
// (about 1 KiB of JSON), encoded by appendJSON ("direct") and by the
// scheme's encoding/json ("scheme").
func BenchmarkEncodeUnstructuredJSON(b *testing.B) {
	spec := map[string]any{}
	for i := range 20 {
		k := string(rune('a'+i)) + "field"
		switch i % 4 {
		case 0:
			spec[k] = "value-of-the-field-" + k
		case 1:
			spec[k] = int64(i * 1000)
		case 2:
			spec[k] = []any{"x", "y", "z"}
		default:
			spec[k] = map[string]any{"enabled": true, "ratio": 0.25}
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "bench.example.com/v1", "kind": "Bench",
		"metadata": map[string]any{"name": "b-1", "namespace": "default", "uid": "0b6f8f1e-6f8e-4a55-9b3a-1d2e3f4a5b6c",
			"resourceVersion": "12345", "generation": int64(1), "creationTimestamp": "2026-11-29T07:00:00Z",
			"labels": map[string]any{"app": "bench", "tier": "x"}},
		"spec": spec,
	}}
	var buf bytes.Buffer
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			if err := encodeUnstructuredJSON(&buf, u); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scheme", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			if err := unstructured.UnstructuredJSONScheme.Encode(u, &buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}
