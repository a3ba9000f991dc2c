package resources

import (
	"net/http"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNegotiateOutput: what a read, watch or write answers in, for each
// Accept header and includeObject parameter.
func TestNegotiateOutput(t *testing.T) {
	const notServed = "none of the requested media types is served: application/json, application/yaml, application/vnd.kubernetes.protobuf and application/json;as=Table;g=meta.k8s.io;v=v1 are"
	for _, c := range []struct {
		name          string
		accept        string
		includeObject string
		opts          negotiation.Options
		want          output
		fails         failure
	}{
		{name: "no Accept", want: output{mediaType: negotiation.JSON}, opts: negotiation.Reads},
		{name: "any", accept: "*/*", want: output{mediaType: negotiation.JSON}, opts: negotiation.Reads},
		{name: "YAML", accept: "application/yaml", want: output{mediaType: negotiation.YAML}, opts: negotiation.Reads},
		{name: "protobuf first", accept: "application/vnd.kubernetes.protobuf, application/json", want: output{mediaType: negotiation.Protobuf}, opts: negotiation.Reads},
		{name: "a Table", accept: acceptTable, opts: negotiation.Reads,
			want: output{mediaType: negotiation.JSON, table: true, includeObject: metav1.IncludeMetadata}},
		{name: "a Table with whole objects", accept: acceptTable, includeObject: "Object", opts: negotiation.Reads,
			want: output{mediaType: negotiation.JSON, table: true, includeObject: metav1.IncludeObject}},
		{name: "a Table without objects", accept: acceptTable, includeObject: "None", opts: negotiation.Reads,
			want: output{mediaType: negotiation.JSON, table: true, includeObject: metav1.IncludeNone}},
		{name: "a Table, then JSON", accept: acceptTable + ", application/json", opts: negotiation.Reads,
			want: output{mediaType: negotiation.JSON, table: true, includeObject: metav1.IncludeMetadata}},
		{name: "includeObject without a Table", accept: "application/json", includeObject: "Bogus", opts: negotiation.Reads,
			want: output{mediaType: negotiation.JSON}},
		{name: "metadata only", accept: acceptPartial, opts: negotiation.Reads, want: output{mediaType: negotiation.JSON, partial: true}},
		{name: "metadata only, as protobuf", accept: "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", opts: negotiation.Reads,
			want: output{mediaType: negotiation.Protobuf, partial: true}},
		{name: "a watch as a Table", accept: acceptTable, opts: negotiation.Watches,
			want: output{mediaType: negotiation.JSON, table: true, includeObject: metav1.IncludeMetadata}},

		{name: "a Table with an includeObject not served", accept: acceptTable, includeObject: "Bogus", opts: negotiation.Reads,
			fails: failure{http.StatusBadRequest, metav1.StatusReasonBadRequest, `includeObject: unsupported value "Bogus"`}},
		{name: "HTML", accept: "text/html", opts: negotiation.Reads,
			fails: failure{http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable, notServed}},
		{name: "a Table of another group", accept: "application/json;as=Table;g=example.com;v=v1", opts: negotiation.Reads,
			fails: failure{http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable, notServed}},
		{name: "a watch in YAML", accept: "application/yaml", opts: negotiation.Watches,
			fails: failure{code: http.StatusNotAcceptable, reason: metav1.StatusReasonNotAcceptable}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := negotiateOutput(c.accept, c.includeObject, c.opts)
			c.fails.check(t, err)
			if err == nil && got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestWriteMediaType: what a write answers in. Tables and metadata-only
// answers are for reads.
func TestWriteMediaType(t *testing.T) {
	for accept, want := range map[string]string{
		"":                 negotiation.JSON,
		"application/json": negotiation.JSON,
		"application/yaml": negotiation.YAML,
		"application/vnd.kubernetes.protobuf, application/json":        negotiation.Protobuf,
		"application/json;as=Table;g=meta.k8s.io;v=v1":                 "",
		"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1": "",
		"text/html": "",
	} {
		got, err := (&Server{cfg: Config{Registry: registry.New(registry.Core()...)}}).mediaType(&apiv1.ResourceRef{Version: "v1", Resource: "configmaps"}, accept)
		if want == "" {
			failure{code: http.StatusNotAcceptable, reason: metav1.StatusReasonNotAcceptable}.check(t, err)
			continue
		}
		if err != nil || got != want {
			t.Errorf("mediaType(%q) = %q, %v; want %q", accept, got, err, want)
		}
	}
}
