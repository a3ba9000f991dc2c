package admitattrs

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// decodeCases are documents the fast decoder reads and ones it leaves to
// the fallback, valid and not.
var decodeCases = []string{
	`{}`,
	` { } `,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"app":"x"}},"data":{"k":"v"}}`,
	`{"spec":{"replicas":3,"ratio":-0.5e3,"big":12345678901234567890,"zero":0,"neg":-0,"exp":1E+2,"frac":0.25,"whole":3.0,"min":-9223372036854775808}}`,
	`{"a":[],"b":[1,"x",true,false,null,{"c":[[]]}],"d":null}`,
	"{\"a\" :\t[ 1 ,\n2 ]\r}",
	`{"dup":1,"dup":{"x":2}}`,
	`{"nested":{"dup":1,"dup":2}}`,
	`{"unicode":"héllo ☃ 𝄞","key ☃":"v"}`,
	`{"escaped":"a\"b\\c\n\u00e9\ud83d\ude00"}`,
	`{"invalid utf8":"` + "\xff\xfe" + `"}`,
	`{"control":"` + "\x01" + `"}`,
	`{"huge":1e400}`,
	`{"a":01}`,
	`{"a":1.}`,
	`{"a":.5}`,
	`{"a":1e}`,
	`{"a":-}`,
	`{"a":+1}`,
	`{"a":tru}`,
	`{"a":nul}`,
	`{"a":1,}`,
	`{"a":[1,]}`,
	`{"a" 1}`,
	`{a:1}`,
	`{"a":1}}`,
	`{"a":1} x`,
	`{"a":1`,
	`{"a":"x`,
	`[1,2]`,
	`null`,
	`"s"`,
	``,
	`   `,
	strings.Repeat(`{"a":`, 1200) + `1` + strings.Repeat(`}`, 1200),
	strings.Repeat(`[`, 1200) + strings.Repeat(`]`, 1200),
}

// reference is the map k8s.io/apimachinery's json.Unmarshal fills (as
// kube-apiserver decodes unstructured objects: integers as int64).
func reference(data []byte) (map[string]any, error) {
	m := map[string]any{}
	if err := utiljson.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func checkSame(t *testing.T, data []byte) {
	t.Helper()
	want, wantErr := reference(data)
	got, err := unmarshalObject(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%q: error %v, the reference's %v", data, err, wantErr)
	}
	if err != nil {
		if err.Error() != wantErr.Error() {
			t.Fatalf("%q: error %q, the reference's %q", data, err, wantErr)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decoded %#v, the reference %#v", data, got, want)
	}
	// The same nil-ness of every map and slice, which DeepEqual checks,
	// and the same types, which %#v shows.
	if g, w := fmt.Sprintf("%#v", got), fmt.Sprintf("%#v", want); g != w {
		t.Fatalf("%q: decoded %s, the reference %s", data, g, w)
	}
}

// TestUnmarshalObjectAsUnstructured: every document decodes to what
// k8s.io/apimachinery's json.Unmarshal makes of it, or fails with its
// error; integers are int64.
func TestUnmarshalObjectAsUnstructured(t *testing.T) {
	for _, c := range decodeCases {
		checkSame(t, []byte(c))
	}
	m, err := unmarshalObject([]byte(`{"spec":{"replicas":3,"ratio":0.5}}`))
	if err != nil {
		t.Fatal(err)
	}
	spec := m["spec"].(map[string]any)
	if _, ok := spec["replicas"].(int64); !ok {
		t.Errorf("replicas decoded as %T, want int64", spec["replicas"])
	}
	if _, ok := spec["ratio"].(float64); !ok {
		t.Errorf("ratio decoded as %T, want float64", spec["ratio"])
	}
}

// TestFastDecoderReadsPlainJSON: the documents the gateway sends are read
// by the fast decoder itself, not by the fallback.
func TestFastDecoderReadsPlainJSON(t *testing.T) {
	for _, c := range decodeCases[:9] {
		d := fastDecoder{data: []byte(c), text: c}
		d.space()
		if _, ok := d.object(0); !ok {
			t.Errorf("%s: the fast decoder gave up", c)
		}
	}
}

func FuzzUnmarshalObject(f *testing.F) {
	for _, c := range decodeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSame(t, data)
	})
}

// BenchmarkDecodeObject decodes the loadtest's 1 KiB ConfigMap.
func BenchmarkDecodeObject(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"load","namespace":"default","uid":"6b2f0c55-7d43-4c53-9a5e-1b9c0c0b4e11","resourceVersion":"0","creationTimestamp":"2026-11-29T10:00:00Z","labels":{"app":"load"}},"data":{`)
	for i := range 9 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"key-%d":"%s"`, i, strings.Repeat("v", 90))
	}
	sb.WriteString("}}")
	data := []byte(sb.String())
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeObject(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reference(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
