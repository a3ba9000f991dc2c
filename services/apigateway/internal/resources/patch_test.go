package resources

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestPatchPreconditionMatchesYAML: the JSON fast path of patchPrecondition
// answers as reading the patch as YAML does, errors included.
func TestPatchPreconditionMatchesYAML(t *testing.T) {
	viaYAML := func(patch []byte) (string, bool) {
		var p struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		err := sigsyaml.Unmarshal(patch, &p)
		return p.Metadata.ResourceVersion, err == nil
	}
	for _, patch := range []string{
		`{"data":{"v":"` + strings.Repeat("x", 1000) + `"}}`,
		`{"metadata":{"resourceVersion":"12"},"data":{"a":"b"}}`,
		`{"metadata":{"resourceVersion":"1"},"metadata":{"resourceVersion":"2"}}`,
		`{"metadata":{"resourceVersion":"1","resourceVersion":"2"}}`,
		`{"metadata":{"resourceVersion":5}}`,
		`{"metadata":{"resourceVersion":null}}`,
		`{"metadata":null}`,
		`{"metadata":[]}`,
		`{"Metadata":{"ResourceVersion":"7"}}`,
		`{"metadata":{"resourceversion":"8"}}`,
		`{"metadata":{"resourceVersion":"\u00e9\t"}}`,
		"{\t\"metadata\" :\n{ \"resourceVersion\":\"3\" } }",
		`{metadata: {resourceVersion: "4"}}`,
		`{"metadata":{"resourceVersion":"4"}`,
		`{"a":1e400}`,
		"{\"metadata\":{\"resourceVersion\":\"\xff\"}}",
		`[]`,
		`{}`,
	} {
		rv, err := patchPrecondition(negotiation.MergePatch, []byte(patch))
		want, ok := viaYAML([]byte(patch))
		if ok != (err == nil) || rv != want {
			t.Errorf("%q: got %q, %v; the YAML reader gives %q (ok %v)", patch, rv, err, want, ok)
		}
		if err != nil && !apierrors.IsBadRequest(err) {
			t.Errorf("%q: %v, want a BadRequest", patch, err)
		}
	}
}

func BenchmarkPatchPrecondition(b *testing.B) {
	patch := []byte(`{"data":{"v":"` + strings.Repeat("x", 1000) + `"}}`)
	for b.Loop() {
		if _, err := patchPrecondition(negotiation.MergePatch, patch); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPatchLimits: the JSON patch copy limit (422) and the patched object
// limit (413) of applyPatch, and a panicking strategic merge directive
// (400), through the functions the handler uses.
func TestPatchLimits(t *testing.T) {
	pf := newPatchFuzzer(t)
	doubling := `[{"op":"add","path":"/metadata/annotations/x","value":"` + strings.Repeat("y", 1024) + `"},{"op":"add","path":"/x","value":[]}`
	for range 17 {
		doubling += `,{"op":"copy","from":"/metadata/annotations","path":"/x/-"},{"op":"copy","from":"/x","path":"/metadata/annotations/x"}`
	}
	doubling += `]`
	big := `[{"op":"add","path":"/data/big","value":"` + strings.Repeat("b", maxPatchedObjectBytes) + `"}]`
	for _, c := range []struct {
		name, mediaType, body string
		code                  int32
		reason                string
	}{
		{"copy doubling", negotiation.JSONPatch, doubling, 422, "Invalid"},
		{"too large a result", negotiation.JSONPatch, big, 413, "RequestEntityTooLarge"},
		{"retainKeys holding an object", negotiation.StrategicMergePatch, `{"data":{"$retainKeys":[1,{}]}}`, 400, "BadRequest"},
		{"unknown directive value", negotiation.StrategicMergePatch, `{"data":{"$patch":1}}`, 422, "Invalid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, ref, old := pf.target(0)
			p, err := pf.srv.decodePatch(pf.ctx, res, ref.GetName(), c.mediaType, []byte(c.body), validationStrict)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = pf.srv.applyPatch(pf.ctx, res, ref, p, old, "test")
			var se apierrors.APIStatus
			if !errors.As(err, &se) || se.Status().Code != c.code || string(se.Status().Reason) != c.reason {
				t.Fatalf("got %v, want %d %s", err, c.code, c.reason)
			}
			checkPatchError(t, c.mediaType, nil, err)
			t.Logf("%d %s after %v: %s", c.code, c.reason, time.Since(start).Round(time.Millisecond), se.Status().Message)
		})
	}
}
