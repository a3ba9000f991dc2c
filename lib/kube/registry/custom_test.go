package registry

import (
	"sync"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func testCRD(established bool) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "widgets.example.com"
	crd.Spec.Group = "example.com"
	crd.Spec.Scope = apiextensionsv1.NamespaceScoped
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"}
	crd.Status.AcceptedNames = crd.Spec.Names
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{
		{Name: "v1beta1", Served: true},
		{Name: "v1", Served: true, Storage: true},
		{Name: "v0", Served: false},
	}
	if established {
		crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
	}
	return crd
}

// TestCustomResources: an established CRD gives one resource per served
// version, the storage version first (so ForKey decodes stored objects
// as it); one not established gives none.
func TestCustomResources(t *testing.T) {
	if got := CustomResources(testCRD(false)); len(got) != 0 {
		t.Errorf("a CRD not established is served: %v", got)
	}
	got := CustomResources(testCRD(true))
	if len(got) != 2 || got[0].GVR.Version != "v1" || got[1].GVR.Version != "v1beta1" {
		t.Fatalf("resources %v, want v1 then v1beta1", got)
	}
	for _, r := range got {
		if r.KeyPrefix("") != "/registry/example.com/widgets/" || r.Custom.StorageVersion != "v1" || !r.Namespaced {
			t.Errorf("%s: prefix %s, storage %s", r.GVR, r.KeyPrefix(""), r.Custom.StorageVersion)
		}
		if u := r.New(); u.GetObjectKind().GroupVersionKind() != r.GVK() {
			t.Errorf("%s: New() is a %v", r.GVR, u.GetObjectKind().GroupVersionKind())
		}
	}
}

// TestSetCustom: custom resources come and go with SetCustom, never
// shadow a built-in one, and readers racing with it see whole tables.
func TestSetCustom(t *testing.T) {
	reg := New(Core()...)
	changed := reg.Changed()
	widgets := CustomResources(testCRD(true))
	clash := *widgets[0]
	clash.GVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	reg.SetCustom(append(widgets, &clash))
	select {
	case <-changed:
	default:
		t.Error("Changed was not closed by SetCustom")
	}
	if res, ok := reg.Lookup(widgets[1].GVR); !ok || res != widgets[1] {
		t.Errorf("v1beta1 widgets not served")
	}
	if res := reg.ForKey("/registry/example.com/widgets/ns/a"); res != widgets[0] {
		t.Errorf("ForKey gave %v, want the storage version", res)
	}
	if res, _ := reg.Lookup(clash.GVR); res.Custom != nil {
		t.Error("a custom resource shadows configmaps")
	}
	if _, gen := reg.CustomGeneration(); gen != 1 {
		t.Errorf("generation %d, want 1", gen)
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 1000 {
			// Both versions are there or neither is.
			_, a := reg.Lookup(widgets[0].GVR)
			_, b := reg.Lookup(widgets[1].GVR)
			custom := reg.Custom()
			if len(custom) != 0 && len(custom) != 2 {
				t.Errorf("a half table: %d custom resources", len(custom))
				return
			}
			_ = a && b
		}
	}()
	for i := range 1000 {
		if i%2 == 0 {
			reg.SetCustom(nil)
		} else {
			reg.SetCustom(widgets)
		}
	}
	wg.Wait()
	reg.SetCustom(nil)
	if _, ok := reg.Lookup(widgets[0].GVR); ok {
		t.Error("widgets still served after SetCustom(nil)")
	}
}
