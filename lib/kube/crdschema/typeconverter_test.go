package crdschema

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/managedfields"
)

// sameVersion converts a single-version kind: every conversion is the
// identity, as for a CRD with one version.
type sameVersion struct{}

func (sameVersion) Convert(in, out, _ any) error {
	out.(*unstructured.Unstructured).Object = runtime.DeepCopyJSON(in.(*unstructured.Unstructured).Object)
	return nil
}
func (sameVersion) ConvertToVersion(in runtime.Object, _ runtime.GroupVersioner) (runtime.Object, error) {
	return in, nil
}
func (sameVersion) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

// creater makes unstructured objects of any kind.
type creater struct{}

func (creater) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// defaulter applies the schema's defaults, as the CR handler does to an
// applied configuration.
type defaulter struct{ s *Schema }

func (d defaulter) Default(obj runtime.Object) { d.s.DefaultOnRead(obj.(*unstructured.Unstructured)) }

func routerManager(t *testing.T) (*managedfields.FieldManager, *Schema) {
	t.Helper()
	crd := loadCRD(t, "listmaps.yaml")
	tc, err := TypeConverter(crd)
	if err != nil {
		t.Fatalf("TypeConverter: %v", err)
	}
	s, err := Compile(crd, "v1")
	if err != nil {
		t.Fatal(err)
	}
	gvk := s.GroupVersionKind()
	fm, err := managedfields.NewDefaultCRDFieldManager(tc, sameVersion{}, defaulter{s}, creater{}, gvk, gvk.GroupVersion(), "", nil)
	if err != nil {
		t.Fatalf("field manager: %v", err)
	}
	return fm, s
}

func router(spec string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: mustJSON("{\"apiVersion\":\"example.com/v1\",\"kind\":\"Router\",\"metadata\":{\"name\":\"r\",\"namespace\":\"default\"},\"spec\":" + spec + "}")}
}

func mustJSON(s string) map[string]any {
	m := map[string]any{}
	if err := utiljson.Unmarshal([]byte(s), &m); err != nil {
		panic(fmt.Sprintf("%v: %s", err, s))
	}
	return m
}

// TestTypeConverterApplyTwoManagers applies configurations of two managers
// to one object: entries of the listType=map list (keyed by name and
// protocol) and of the set merge by key and each manager owns its own;
// the unmarked list and the atomic map are replaced whole by the last
// applier; a granular map merges key by key.
func TestTypeConverterApplyTwoManagers(t *testing.T) {
	fm, _ := routerManager(t)
	live := router(`{}`)
	live.SetName("r")
	obj, err := fm.Apply(live, router(`{"ports":[{"name":"http","protocol":"TCP","port":80}],"hosts":["a"],"args":["x","y"],"selector":{"app":"a","tier":"web"},"labels":{"a":"1"}}`), "alice", false)
	if err != nil {
		t.Fatalf("alice apply: %v", err)
	}
	obj, err = fm.Apply(obj, router(`{"ports":[{"name":"http","protocol":"UDP","port":81},{"name":"dns","protocol":"UDP","port":53}],"hosts":["b"],"args":["z"],"selector":{"app":"b"},"labels":{"b":"2"}}`), "bob", true)
	if err != nil {
		t.Fatalf("bob apply: %v", err)
	}
	got := obj.(*unstructured.Unstructured).Object["spec"]
	want := mustJSON(`{"ports":[{"name":"http","protocol":"TCP","port":80},{"name":"http","protocol":"UDP","port":81},{"name":"dns","protocol":"UDP","port":53}],"hosts":["a","b"],"args":["z"],"selector":{"app":"b"},"labels":{"a":"1","b":"2"}}`)
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("merged spec = %v\nwant %v", got, want)
	}

	// Alice drops her port: only her entry goes; bob's entries stay.
	obj, err = fm.Apply(obj, router(`{"hosts":["a"],"labels":{"a":"1"}}`), "alice", false)
	if err != nil {
		t.Fatalf("alice re-apply: %v", err)
	}
	got = obj.(*unstructured.Unstructured).Object["spec"]
	want = mustJSON(`{"ports":[{"name":"http","protocol":"UDP","port":81},{"name":"dns","protocol":"UDP","port":53}],"hosts":["a","b"],"args":["z"],"selector":{"app":"b"},"labels":{"a":"1","b":"2"}}`)
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("after alice drops her port spec = %v\nwant %v", got, want)
	}

	// A conflicting non-forced apply of an entry bob owns is refused,
	// naming the key fields of the list entry.
	_, err = fm.Apply(obj, router(`{"ports":[{"name":"dns","protocol":"UDP","port":54}]}`), "alice", false)
	if err == nil || !strings.Contains(err.Error(), `conflict with "bob": .spec.ports[name="dns",protocol="UDP"].port`) {
		t.Fatalf("conflict error = %v", err)
	}
}

// TestTypeConverterDefaultedKey: a map key with a default (protocol) is
// filled in from the schema before merging, so an entry applied without
// it is the same entry as one applied with the default.
func TestTypeConverterDefaultedKey(t *testing.T) {
	fm, s := routerManager(t)
	live := router(`{}`)
	obj, err := fm.Apply(live, router(`{"ports":[{"name":"http","port":80}]}`), "alice", false)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if _, errs := s.Admit(context.Background(), obj.(*unstructured.Unstructured), nil, ""); len(errs) > 0 {
		t.Fatal(errs)
	}
	obj, err = fm.Apply(obj, router(`{"ports":[{"name":"http","protocol":"TCP","port":8080}]}`), "alice", false)
	if err != nil {
		t.Fatalf("second apply: %v", err)
	}
	want := mustJSON(`{"ports":[{"name":"http","protocol":"TCP","port":8080}]}`)
	if got := obj.(*unstructured.Unstructured).Object["spec"]; !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("spec = %v, want %v", got, want)
	}
}

// TestTypeConverterWidgets applies a widget using every kind of schema
// node (int-or-string, preserved unknown fields, embedded resource,
// nullable, defaults) and changes the int-or-string from a string to a
// number through a second manager.
func TestTypeConverterWidgets(t *testing.T) {
	crd := loadCRD(t, "widgets.yaml")
	tc, err := TypeConverter(crd)
	if err != nil {
		t.Fatal(err)
	}
	s := compile(t, "widgets.yaml", "v1")
	gvk := s.GroupVersionKind()
	fm, err := managedfields.NewDefaultCRDFieldManager(tc, sameVersion{}, defaulter{s}, creater{}, gvk, gvk.GroupVersion(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	w := func(spec string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: mustJSON(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"default"},"spec":` + spec + `}`)}
	}
	live := &unstructured.Unstructured{Object: mustJSON(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"default"}}`)}
	obj, err := fm.Apply(live, w(`{"size":"small","port":"http","nickname":null,"extra":{"any":{"deep":[1,"x"]}},"template":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"a":"b"}},"spec":{"containers":[]}},"ports":[{"name":"web"}]}`), "alice", false)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	obj, err = fm.Apply(obj, w(`{"port":8080}`), "bob", true)
	if err != nil {
		t.Fatalf("second apply: %v", err)
	}
	spec := obj.(*unstructured.Unstructured).Object["spec"].(map[string]any)
	if spec["port"] != int64(8080) || spec["size"] != "small" {
		t.Fatalf("spec = %v", spec)
	}
	if got := obj.(*unstructured.Unstructured).GetManagedFields(); len(got) != 2 {
		t.Fatalf("managedFields = %v, want alice and bob", got)
	}
}
