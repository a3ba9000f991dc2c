package frontend

import (
	"net/url"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/protobuf/proto"
)

// TestQueryParserIsTheDefault: for the queries the front end builds, and
// for ones it does not, queryParser fills get and list requests exactly as
// grpc-gateway's DefaultQueryParser does, errors included.
func TestQueryParserIsTheDefault(t *testing.T) {
	ref := "ref.group=apps&ref.version=v1&ref.resource=deployments&ref.namespace=ns&ref.name=web&ref.subresource="
	queries := []string{
		ref + "&accept=application%2Fjson",
		ref + "&accept=&resourceVersion=0&includeObject=Object",
		ref + "&resource_version=12&include_object=None",
		ref + "&labelSelector=a%3Db&fieldSelector=metadata.name%3Dx&resourceVersion=5&resourceVersionMatch=Exact&limit=500&continue=abc&accept=x",
		ref + "&label_selector=a&field_selector=b&resource_version_match=NotOlderThan&continue_token=t",
		ref + "&limit=abc",
		ref + "&limit=99999999999999999999",
		ref + "&limit=-3",
		ref + "&resourceVersion=1&resourceVersion=2",
		ref + "&unknown=1",
		ref + "&ref.bogus=1",
		ref + "&labels[a]=b",
		"",
		"ref.name=x",
	}
	filter := &utilities.DoubleArray{Encoding: map[string]int{}}
	for _, q := range queries {
		values, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		for _, pair := range [][2]proto.Message{{&apiv1.GetRequest{}, &apiv1.GetRequest{}}, {&apiv1.ListRequest{}, &apiv1.ListRequest{}}} {
			fast, def := pair[0], pair[1]
			ferr := queryParser{}.Parse(fast, values, filter)
			derr := (&runtime.DefaultQueryParser{}).Parse(def, values, filter)
			if (ferr == nil) != (derr == nil) || ferr != nil && ferr.Error() != derr.Error() {
				t.Errorf("%T %q: error %v, the default's %v", fast, q, ferr, derr)
				continue
			}
			if ferr == nil && !proto.Equal(fast, def) {
				t.Errorf("%T %q:\n got %v\nwant %v", fast, q, fast, def)
			}
		}
	}
}
