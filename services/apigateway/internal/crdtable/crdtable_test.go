package crdtable

import (
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestTable: a published batch makes the registry serve each established
// CRD's versions; a CRD deleted (or not established) is no longer served;
// Synced closes at the first publish.
func TestTable(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Standard()...)
	tbl, err := New(Config{Registry: reg, Codec: c, Store: storagetest.Start(t)})
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "widgets.example.com"
	crd.Spec.Group, crd.Spec.Scope = "example.com", apiextensionsv1.ClusterScoped
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget", ListKind: "WidgetList", Singular: "widget"}
	crd.Status.AcceptedNames = crd.Spec.Names
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true}}
	crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
	value, err := c.EncodeStorage(crd)
	if err != nil {
		t.Fatal(err)
	}
	key := tbl.prefix + crd.Name
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

	tbl.Reset()
	tbl.Apply(key, value, 5)
	tbl.Apply(tbl.prefix+"broken.example.com", []byte("not a CRD"), 6)
	tbl.Publish(6, true)
	select {
	case <-tbl.Synced():
	default:
		t.Error("Synced is open after the first publish")
	}
	if res, ok := reg.Lookup(widgets); !ok || res.Namespaced || res.Custom.CRD.Name != crd.Name {
		t.Fatalf("widgets not served after the CRD was published: %v", res)
	}
	tbl.Apply(key, nil, 7)
	tbl.Publish(7, false)
	if _, ok := reg.Lookup(widgets); ok {
		t.Error("widgets still served after the CRD was deleted")
	}
}
