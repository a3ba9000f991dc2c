package frontend

import (
	"net/url"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/protobuf/proto"
)

// TestQueryParserIsTheDefault: for the queries the front end builds, and
// for ones it does not, queryParser fills get, list and write requests
// exactly as grpc-gateway's DefaultQueryParser does, errors included; a
// write's body, decoded before the query, is kept.
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
		ref + "&dryRun=All&fieldManager=kubectl&fieldValidation=Strict&accept=application%2Fjson",
		ref + "&dry_run=All&field_manager=m&field_validation=Ignore",
		ref + "&dryRun=All&dryRun=All",
		ref + "&fieldManager=m&force=true",
		ref + "&force=false",
		ref + "&force=1",
		ref + "&force=maybe",
		ref + "&body=x",
		ref + "&body.content_type=x",
		"",
		"ref.name=x",
	}
	reads := &utilities.DoubleArray{Encoding: map[string]int{}}
	writes := utilities.NewDoubleArray([][]string{{"body"}}) // as the generated handlers' filters
	body := func() *httpbody.HttpBody {
		return &httpbody.HttpBody{ContentType: "application/json", Data: []byte("{}")}
	}
	for _, q := range queries {
		values, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		for _, pair := range [][2]proto.Message{
			{&apiv1.GetRequest{}, &apiv1.GetRequest{}},
			{&apiv1.ListRequest{}, &apiv1.ListRequest{}},
			{&apiv1.CreateRequest{Body: body()}, &apiv1.CreateRequest{Body: body()}},
			{&apiv1.UpdateRequest{Body: body()}, &apiv1.UpdateRequest{Body: body()}},
			{&apiv1.PatchRequest{Body: body()}, &apiv1.PatchRequest{Body: body()}},
		} {
			fast, def := pair[0], pair[1]
			filter := reads
			switch fast.(type) {
			case *apiv1.CreateRequest, *apiv1.UpdateRequest, *apiv1.PatchRequest:
				filter = writes
			}
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
