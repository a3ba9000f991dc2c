package resources

import (
	"slices"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/selection"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestKeyRange: a read scans its collection's prefix, or the one key a
// field selector on metadata.name pins when the namespace is known.
func TestKeyRange(t *testing.T) {
	e := newEnv(t, Config{})
	for _, c := range []struct {
		resource, group, ns, labels, fields string
		want                                string
	}{
		{resource: "configmaps", ns: "ns", want: "/registry/configmaps/ns/"},
		{resource: "configmaps", want: "/registry/configmaps/"},
		{resource: "configmaps", ns: "ns", fields: "metadata.name=a", want: "/registry/configmaps/ns/a"},
		{resource: "configmaps", ns: "ns", fields: "metadata.name==a,metadata.namespace=ns", want: "/registry/configmaps/ns/a"},
		{resource: "configmaps", fields: "metadata.name=a", want: "/registry/configmaps/"}, // every namespace's "a"
		{resource: "configmaps", ns: "ns", fields: "metadata.name!=a", want: "/registry/configmaps/ns/"},
		{resource: "configmaps", ns: "ns", labels: "app=a", want: "/registry/configmaps/ns/"},
		{resource: "namespaces", fields: "metadata.name=a", want: "/registry/namespaces/a"},
		{resource: "namespaces", want: "/registry/namespaces/"},
		{resource: "leases", group: "coordination.k8s.io", ns: "ns", fields: "metadata.name=l", want: "/registry/coordination.k8s.io/leases/ns/l"},
	} {
		res, ok := e.reg.Lookup(schema.GroupVersionResource{Group: c.group, Version: "v1", Resource: c.resource})
		if !ok {
			t.Fatalf("%s not served", c.resource)
		}
		f, err := selection.New(res, c.labels, c.fields)
		if err != nil {
			t.Fatal(err)
		}
		if got := keyRange(res, c.ns, f); got != c.want {
			t.Errorf("keyRange(%s, %q, %q %q) = %q, want %q", c.resource, c.ns, c.labels, c.fields, got, c.want)
		}
	}

	// Keys that merely start with the pinned name are in the range, and
	// the selector drops them.
	e.namespace("ns")
	for _, name := range []string{"a", "ab", "b"} {
		e.mustCreate(configMap("ns", ""), `{"metadata":{"name":"`+name+`"}}`)
	}
	ls := &listStream{ctx: t.Context()}
	if err := e.s.List(&apiv1.ListRequest{Ref: configMap("ns", ""), FieldSelector: "metadata.name=a", Accept: acceptJSON}, ls); err != nil {
		t.Fatal(err)
	}
	var list corev1.ConfigMapList
	if err := e.codec.Decode(ls.body(), acceptJSON, corev1.SchemeGroupVersion.WithKind("ConfigMapList"), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range list.Items {
		names = append(names, cm.Name)
	}
	if !slices.Equal(names, []string{"a"}) {
		t.Errorf("listed %v, want [a]", names)
	}
}
