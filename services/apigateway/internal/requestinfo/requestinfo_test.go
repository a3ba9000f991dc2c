package requestinfo

import (
	"net/url"
	"reflect"
	"testing"
)

func TestNew(t *testing.T) {
	type want struct {
		resource                                 bool
		verb, group, version, ns, res, name, sub string
	}
	cases := []struct {
		method, url string
		want        want
	}{
		{"GET", "/api/v1/namespaces", want{true, "list", "", "v1", "", "namespaces", "", ""}},
		{"GET", "/api/v1/namespaces/demo", want{true, "get", "", "v1", "", "namespaces", "demo", ""}},
		{"PUT", "/api/v1/namespaces/demo/status", want{true, "update", "", "v1", "", "namespaces", "demo", "status"}},
		{"PUT", "/api/v1/namespaces/demo/finalize", want{true, "update", "", "v1", "", "namespaces", "demo", "finalize"}},
		{"GET", "/api/v1/namespaces/demo/configmaps", want{true, "list", "", "v1", "demo", "configmaps", "", ""}},
		{"GET", "/api/v1/namespaces/demo/configmaps?watch=1", want{true, "watch", "", "v1", "demo", "configmaps", "", ""}},
		{"GET", "/api/v1/namespaces/demo/configmaps?watch=true", want{true, "watch", "", "v1", "demo", "configmaps", "", ""}},
		{"GET", "/api/v1/namespaces/demo/configmaps/app", want{true, "get", "", "v1", "demo", "configmaps", "app", ""}},
		{"POST", "/api/v1/namespaces/demo/configmaps", want{true, "create", "", "v1", "demo", "configmaps", "", ""}},
		{"DELETE", "/api/v1/namespaces/demo/configmaps", want{true, "deletecollection", "", "v1", "demo", "configmaps", "", ""}},
		{"DELETE", "/api/v1/namespaces/demo/configmaps/app", want{true, "delete", "", "v1", "demo", "configmaps", "app", ""}},
		{"PATCH", "/api/v1/namespaces/demo/configmaps/app", want{true, "patch", "", "v1", "demo", "configmaps", "app", ""}},
		{"GET", "/api/v1/configmaps", want{true, "list", "", "v1", "", "configmaps", "", ""}},
		{"GET", "/api/v1/watch/namespaces/demo/configmaps", want{true, "watch", "", "v1", "demo", "configmaps", "", ""}},
		{"GET", "/apis/apps/v1/namespaces/demo/deployments/web/scale", want{true, "get", "apps", "v1", "demo", "deployments", "web", "scale"}},
		{"GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin", want{true, "get", "rbac.authorization.k8s.io", "v1", "", "clusterroles", "admin", ""}},
		{"GET", "/api/v1", want{false, "get", "", "v1", "", "", "", ""}},
		{"GET", "/apis/apps", want{false, "get", "apps", "", "", "", "", ""}},
		{"GET", "/version", want{false, "get", "", "", "", "", "", ""}},
		{"GET", "/healthz", want{false, "get", "", "", "", "", "", ""}},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		i := New(c.method, u)
		got := want{i.IsResourceRequest, i.Verb, i.APIGroup, i.APIVersion, i.Namespace, i.Resource, i.Name, i.Subresource}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %s:\n got  %+v\n want %+v", c.method, c.url, got, c.want)
		}
	}
}
