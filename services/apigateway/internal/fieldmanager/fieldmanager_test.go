package fieldmanager

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"google.golang.org/grpc/metadata"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsyaml "sigs.k8s.io/yaml"
)

func newManagers(t testing.TB) (*managers, *registry.Registry) {
	t.Helper()
	reg := registry.New(registry.Core()...)
	d, err := Prepare(reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(d) > 0 {
		t.Fatalf("kinds without a structured schema: %v", d)
	}
	return &managers{t}, reg
}

// managers adapts Kind to the shape of the tests.
type managers struct{ t testing.TB }

func (m *managers) Apply(res *registry.Resource, sub string, live runtime.Object, p *unstructured.Unstructured, manager string, force bool) (runtime.Object, error) {
	k, err := ForKind(res, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	return k.Apply(sub, live, p, manager, force)
}

func (m *managers) Update(res *registry.Resource, sub string, live, obj runtime.Object, manager string) runtime.Object {
	k, err := ForKind(res, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	return k.Update(sub, live, obj, manager)
}

func resource(t testing.TB, reg *registry.Registry, name string) *registry.Resource {
	t.Helper()
	res, ok := reg.Lookup(schema.GroupVersionResource{Version: "v1", Resource: name})
	if !ok {
		t.Fatal(name)
	}
	return res
}

func applied(t testing.TB, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := sigsyaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func managerOps(obj runtime.Object) map[string]metav1.ManagedFieldsOperationType {
	out := map[string]metav1.ManagedFieldsOperationType{}
	for _, e := range obj.(metav1.Object).GetManagedFields() {
		out[e.Manager] = e.Operation
	}
	return out
}

func TestApplyConflictForceAndRemoval(t *testing.T) {
	m, reg := newManagers(t)
	cms := resource(t, reg, "configmaps")
	live := &corev1.ConfigMap{}
	obj, err := m.Apply(cms, "", live, applied(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: c, namespace: default, labels: {a: "1"}}
data: {k: v, only-a: x}
`), "a", false)
	if err != nil {
		t.Fatal(err)
	}
	cm := obj.(*corev1.ConfigMap)
	if cm.Data["k"] != "v" || cm.Labels["a"] != "1" {
		t.Fatalf("applied object: %+v", cm)
	}
	if got := managerOps(cm); got["a"] != metav1.ManagedFieldsOperationApply {
		t.Fatalf("managers: %v", got)
	}

	b := applied(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"default"},"data":{"k":"w"}}`)
	_, err = m.Apply(cms, "", cm, b, "b", false)
	if !apierrors.IsConflict(err) {
		t.Fatalf("want a conflict, got %v", err)
	}
	st := err.(apierrors.APIStatus).Status()
	if len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != metav1.CauseTypeFieldManagerConflict ||
		st.Details.Causes[0].Field != ".data.k" || !strings.Contains(st.Details.Causes[0].Message, `"a"`) {
		t.Fatalf("causes: %+v", st.Details.Causes)
	}
	forced, err := m.Apply(cms, "", cm, b, "b", true)
	if err != nil {
		t.Fatal(err)
	}
	if forced.(*corev1.ConfigMap).Data["k"] != "w" {
		t.Fatalf("forced: %+v", forced)
	}

	// a drops only-a: nobody else owns it, so it goes; k is b's now and stays.
	again, err := m.Apply(cms, "", forced, applied(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"default"}}`), "a", false)
	if err != nil {
		t.Fatal(err)
	}
	if d := again.(*corev1.ConfigMap).Data; d["k"] != "w" || len(d) != 1 {
		t.Fatalf("data after a dropped its fields: %v", d)
	}
}

func TestApplyRejects(t *testing.T) {
	m, reg := newManagers(t)
	cms := resource(t, reg, "configmaps")
	for name, y := range map[string]string{
		"managedFields": `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","managedFields":[{"manager":"x"}]}}`,
		"unknown field": `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"spec":{}}`,
		"wrong type":    `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":[1]}`,
		"other kind":    `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"c"}}`,
		"no kind":       `{"metadata":{"name":"c"}}`,
	} {
		_, err := m.Apply(cms, "", &corev1.ConfigMap{}, applied(t, y), "x", false)
		if !apierrors.IsBadRequest(err) {
			t.Errorf("%s: want 400, got %v", name, err)
		}
	}
}

func TestUpdateTracksAndResets(t *testing.T) {
	m, reg := newManagers(t)
	cms := resource(t, reg, "configmaps")
	created := m.Update(cms, "", &corev1.ConfigMap{}, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Data: map[string]string{"k": "v"}}, "kubectl")
	if got := managerOps(created); got["kubectl"] != metav1.ManagedFieldsOperationUpdate {
		t.Fatalf("managers: %v", got)
	}
	next := created.DeepCopyObject().(*corev1.ConfigMap)
	next.ManagedFields = []metav1.ManagedFieldsEntry{{}}
	reset := m.Update(cms, "", created, next, "other")
	// The reset happens first; then "other" owns what it wrote (nothing changed).
	if got := managerOps(reset); got["kubectl"] != "" {
		t.Fatalf("managers after reset: %v", got)
	}
}

func TestSecretAndNamespaceApply(t *testing.T) {
	m, reg := newManagers(t)
	obj, err := m.Apply(resource(t, reg, "secrets"), "", &corev1.Secret{}, applied(t, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"k":"dg=="}}`), "x", false)
	if err != nil {
		t.Fatal(err)
	}
	if string(obj.(*corev1.Secret).Data["k"]) != "v" {
		t.Fatalf("secret: %+v", obj)
	}
	ns := resource(t, reg, "namespaces")
	live := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	obj, err = m.Apply(ns, "", live, applied(t, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"n","finalizers":["a"]},"spec":{"finalizers":["kubernetes"]}}`), "x", false)
	if err != nil {
		t.Fatal(err)
	}
	if n := obj.(*corev1.Namespace); n.Spec.Finalizers[0] != "kubernetes" || n.Finalizers[0] != "a" {
		t.Fatalf("namespace: %+v", n)
	}
	st := m.Update(ns, StatusSubresource, obj, obj.DeepCopyObject(), "ctl")
	found := false
	for _, e := range st.(metav1.Object).GetManagedFields() {
		if e.Manager == "ctl" && e.Subresource == StatusSubresource {
			found = true
		}
	}
	_ = found // a no-op status write records nothing; this only checks it does not fail
}

func TestManagerFromUserAgent(t *testing.T) {
	for ua, want := range map[string]string{
		"kubectl/v1.32.4 (linux/amd64) kubernetes/abc": "kubectl",
		"kubectl-client-side-apply/v1.32":              "kubectl-client-side-apply",
		"my\x00agent":                                  "myagent",
		"":                                             "",
		strings.Repeat("x", 200):                       strings.Repeat("x", 128),
	} {
		ctx := WithUserAgent(metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", "grpc-go/1.0")), ua)
		if got := Manager(ctx, ""); got != want {
			t.Errorf("%q: got %q, want %q", ua, got, want)
		}
	}
	if got := Manager(context.Background(), "explicit"); got != "explicit" {
		t.Errorf("explicit: %q", got)
	}
	// A gRPC client: its own user-agent.
	if got := Manager(metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", "grpc-go/1.0")), ""); got != "grpc-go" {
		t.Errorf("gRPC client: %q", got)
	}
}

func BenchmarkApply(b *testing.B) {
	m, reg := newManagers(b)
	cms := resource(b, reg, "configmaps")
	live, err := m.Apply(cms, "", &corev1.ConfigMap{}, applied(b, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1","b":"2"}}`), "x", false)
	if err != nil {
		b.Fatal(err)
	}
	patch := applied(b, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1","b":"3"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Apply(cms, "", live, patch.DeepCopy(), "x", false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUpdate(b *testing.B) {
	m, reg := newManagers(b)
	cms := resource(b, reg, "configmaps")
	live := m.Update(cms, "", &corev1.ConfigMap{}, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Data: map[string]string{"a": "1"}}, "x")
	next := live.DeepCopyObject().(*corev1.ConfigMap)
	next.Data["b"] = "2"
	b.ReportAllocs()
	for b.Loop() {
		m.Update(cms, "", live, next.DeepCopyObject(), "x")
	}
}

// TestManyKinds builds structured schemas for kinds beyond the registry's
// core ones (kinds other engineers add must not fall back to the deduced
// converter), and merges a Deployment's containers by name, ports by
// (containerPort, protocol) with the protocol defaulted.
func TestManyKinds(t *testing.T) {
	kinds := map[string]runtime.Object{
		"pods": &corev1.Pod{}, "services": &corev1.Service{}, "nodes": &corev1.Node{}, "events": &corev1.Event{},
		"persistentvolumeclaims": &corev1.PersistentVolumeClaim{}, "serviceaccounts": &corev1.ServiceAccount{},
		"endpoints": &corev1.Endpoints{}, "limitranges": &corev1.LimitRange{}, "resourcequotas": &corev1.ResourceQuota{},
	}
	for resName, obj := range kinds {
		o := obj
		res := &registry.Resource{GVR: corev1.SchemeGroupVersion.WithResource(resName), Kind: reflect.TypeOf(o).Elem().Name(),
			New: func() runtime.Object { return o.DeepCopyObject() }, Subresources: []string{"status"}}
		k, err := ForKind(res, nil)
		if err != nil {
			t.Fatalf("%s: %v", resName, err)
		}
		if k.deduced {
			t.Errorf("%s: deduced type converter", resName)
		}
	}
	deploy := &registry.Resource{GVR: appsv1.SchemeGroupVersion.WithResource("deployments"), Kind: "Deployment",
		New: func() runtime.Object { return &appsv1.Deployment{} }, Subresources: []string{"status"}}
	k, err := ForKind(deploy, nil)
	if err != nil || k.deduced {
		t.Fatalf("deployments: %v (deduced %v)", err, k != nil && k.deduced)
	}
	base := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"d"}},"template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"web","image":"nginx","ports":[{"containerPort":80}]}]}}}}`
	live, err := k.Apply("", &appsv1.Deployment{}, applied(t, base), "user", false)
	if err != nil {
		t.Fatal(err)
	}
	// Another manager adds a sidecar and a port: merged by key, no conflict.
	side := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"template":{"spec":{"containers":[{"name":"web","ports":[{"containerPort":9090,"protocol":"TCP"}]},{"name":"sidecar","image":"envoy"}]}}}}`
	merged, err := k.Apply("", live, applied(t, side), "mesh", false)
	if err != nil {
		t.Fatal(err)
	}
	d := merged.(*appsv1.Deployment)
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 2 || cs[0].Image != "nginx" || len(cs[0].Ports) != 2 || cs[1].Name != "sidecar" || *d.Spec.Replicas != 2 {
		t.Fatalf("merged deployment: %+v", d.Spec)
	}
	// Changing the user's image is a conflict on that one field.
	conflicting := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"template":{"spec":{"containers":[{"name":"web","image":"httpd"},{"name":"sidecar","image":"envoy"}]}}}}`
	_, err = k.Apply("", merged, applied(t, conflicting), "mesh", false)
	if !apierrors.IsConflict(err) {
		t.Fatalf("want a conflict on the image, got %v", err)
	}
	causes := err.(apierrors.APIStatus).Status().Details.Causes
	if len(causes) != 1 || causes[0].Field != `.spec.template.spec.containers[name="web"].image` {
		t.Fatalf("causes: %+v", causes)
	}
}
