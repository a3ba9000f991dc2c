package resources

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// decodeApplyTwice is decodeApply as it was: the lenient reader, then the
// strict one for duplicates. It returns the object, the error, and the
// warning it would send.
func decodeApplyTwice(data []byte, fv fieldValidation) (map[string]any, error, string) {
	obj := map[string]any{}
	if err := sigsyaml.Unmarshal(data, &obj, useNumber); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err)), ""
	}
	if obj == nil {
		return nil, apierrors.NewBadRequest("error decoding YAML: the applied configuration must be an object"), ""
	}
	if err := utiljson.ConvertMapNumbers(obj, 0); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err)), ""
	}
	if fv != validationIgnore {
		if err := sigsyaml.UnmarshalStrict(data, &map[string]any{}); err != nil {
			if fv == validationStrict {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("error strict decoding YAML: %v", err)), ""
			}
			return obj, nil, err.Error()
		}
	}
	return obj, nil, ""
}

// TestDecodeApplyReadsOnce: reading strictly first answers exactly as
// reading leniently then strictly did.
func TestDecodeApplyReadsOnce(t *testing.T) {
	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"x":"1"}},"data":{"v":"` + strings.Repeat("x", 1000) + `"}}`
	for _, data := range []string{
		cm,
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  n: \"1\"\n  b: 'true'\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  name: b\n",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"metadata":{"name":"b"}}`,
		"replicas: 3\nratio: 0.5\nbig: 12345678901234567890\nflag: yes\n",
		"null", "", "[]", "- a\n- b\n", "{", "a: [1, 2", "key: value\n\tbad: tab\n", "\"just a string\"", "42",
	} {
		for _, fv := range []fieldValidation{validationIgnore, validationWarn, validationStrict} {
			wantObj, wantErr, wantWarn := decodeApplyTwice([]byte(data), fv)
			var warned []string
			ctx := withWarnings(context.Background(), &warned)
			got, err := decodeApply(ctx, []byte(data), fv)
			if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Errorf("%q %s: error %v, want %v", data, fv, err, wantErr)
				continue
			}
			if err != nil {
				continue
			}
			if !reflect.DeepEqual(got.Object, wantObj) {
				t.Errorf("%q %s: object %v, want %v", data, fv, got.Object, wantObj)
			}
			if w := strings.Join(warned, "|"); w != wantWarn {
				t.Errorf("%q %s: warning %q, want %q", data, fv, w, wantWarn)
			}
		}
	}
}

// TestDecodeApplyIntegers: an applied configuration's integers are int64
// and its other numbers float64, as in objects decoded from storage, so a
// custom resource's scale replicas (NestedInt64) and CEL ints read them.
func TestDecodeApplyIntegers(t *testing.T) {
	for _, data := range []string{
		`{"spec":{"replicas":2,"ratio":0.5,"big":12345678901234567890,"list":[3]}}`,
		"spec:\n  replicas: 2\n  ratio: 0.5\n  big: 12345678901234567890\n  list: [3]\n",
	} {
		u, err := decodeApply(context.Background(), []byte(data), validationStrict)
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		spec := u.Object["spec"].(map[string]any)
		if got, ok := spec["replicas"].(int64); !ok || got != 2 {
			t.Errorf("%q: replicas %#v, want int64 2", data, spec["replicas"])
		}
		if got, ok := spec["list"].([]any)[0].(int64); !ok || got != 3 {
			t.Errorf("%q: list[0] %#v, want int64 3", data, spec["list"].([]any)[0])
		}
		if got, ok := spec["ratio"].(float64); !ok || got != 0.5 {
			t.Errorf("%q: ratio %#v, want float64 0.5", data, spec["ratio"])
		}
		if _, ok := spec["big"].(float64); !ok {
			t.Errorf("%q: big %#v, want a float64 (beyond int64)", data, spec["big"])
		}
	}
}

func BenchmarkDecodeApply(b *testing.B) {
	data := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"v":"` + strings.Repeat("x", 1000) + `"}}`)
	ctx := withWarnings(context.Background(), new([]string))
	for b.Loop() {
		if _, err := decodeApply(ctx, data, validationWarn); err != nil {
			b.Fatal(err)
		}
	}
}

// withWarnings returns a context whose gRPC header carries Warnings into
// *into, as the ResourceService's would to the client.
func withWarnings(ctx context.Context, into *[]string) context.Context {
	return grpc.NewContextWithServerTransportStream(ctx, &headerRecorder{warnings: into})
}

// headerRecorder is a grpc.ServerTransportStream that keeps the header
// set on it, and the warnings in it in *warnings when that is not nil.
type headerRecorder struct {
	md       metadata.MD
	warnings *[]string
}

func (h *headerRecorder) Method() string { return "/test" }

func (h *headerRecorder) SetHeader(md metadata.MD) error {
	h.md = metadata.Join(h.md, md)
	if h.warnings == nil {
		return nil
	}
	for _, v := range md.Get("warning") {
		// "299 - "+quoted message, as warn writes it.
		m, err := strconv.Unquote(strings.TrimPrefix(v, "299 - "))
		if err != nil {
			return err
		}
		*h.warnings = append(*h.warnings, m)
	}
	return nil
}

func (h *headerRecorder) SendHeader(md metadata.MD) error { return h.SetHeader(md) }

func (h *headerRecorder) SetTrailer(metadata.MD) error { return nil }
