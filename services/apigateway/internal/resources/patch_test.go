package resources

import (
	"strings"
	"testing"

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
