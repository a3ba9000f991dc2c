package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// owners returns, per manager, the operation of its entry and whether its
// fieldsV1 names field (e.g. `f:k` under `f:data`).
func owners(cm *corev1.ConfigMap, dataKey string) map[string]bool {
	out := map[string]bool{}
	for _, e := range cm.ManagedFields {
		out[e.Manager] = e.FieldsV1 != nil && strings.Contains(string(e.FieldsV1.Raw), `"f:`+dataKey+`"`)
	}
	return out
}

func entry(cm *corev1.ConfigMap, manager string) (metav1.ManagedFieldsEntry, bool) {
	for _, e := range cm.ManagedFields {
		if e.Manager == manager {
			return e, true
		}
	}
	return metav1.ManagedFieldsEntry{}, false
}

// TestServerSideApply drives server-side apply through client-go's typed
// apply configurations: create by apply, conflicts with one cause per field
// naming the other manager, force, removal of dropped fields, shared
// ownership, dry run, and Update entries for ordinary writes.
func TestServerSideApply(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")

	// Apply creates a missing object, with an Apply entry.
	cm, err := cms.Apply(ctx, corev1ac.ConfigMap("ssa", "default").WithData(map[string]string{"k": "a", "only-a": "1"}), metav1.ApplyOptions{FieldManager: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if cm.UID == "" || cm.ResourceVersion == "" || cm.Data["k"] != "a" {
		t.Fatalf("created by apply: %+v", cm)
	}
	if en, ok := entry(cm, "a"); !ok || en.Operation != metav1.ManagedFieldsOperationApply || en.APIVersion != "v1" || en.FieldsType != "FieldsV1" || en.Time == nil {
		t.Fatalf("apply entry: %+v", cm.ManagedFields)
	}

	// b changes a's field: a conflict naming a, one cause per field.
	_, err = cms.Apply(ctx, corev1ac.ConfigMap("ssa", "default").WithData(map[string]string{"k": "b", "only-a": "2"}), metav1.ApplyOptions{FieldManager: "b"})
	if !apierrors.IsConflict(err) {
		t.Fatalf("want a conflict, got %v", err)
	}
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Details == nil || len(se.ErrStatus.Details.Causes) != 2 {
		t.Fatalf("conflict status: %+v", err)
	}
	fields := map[string]bool{}
	for _, c := range se.ErrStatus.Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict || c.Message != `conflict with "a"` {
			t.Errorf("cause %+v", c)
		}
		fields[c.Field] = true
	}
	if !fields[".data.k"] || !fields[".data.only-a"] {
		t.Errorf("conflicting fields: %v", fields)
	}
	if !strings.Contains(se.ErrStatus.Message, "Apply failed with 2 conflicts") {
		t.Errorf("message: %s", se.ErrStatus.Message)
	}

	// force: b takes k over.
	cm, err = cms.Apply(ctx, corev1ac.ConfigMap("ssa", "default").WithData(map[string]string{"k": "b"}), metav1.ApplyOptions{FieldManager: "b", Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if o := owners(cm, "k"); cm.Data["k"] != "b" || !o["b"] || o["a"] {
		t.Fatalf("after force: data %v, owners of k %v", cm.Data, o)
	}

	// a stops applying only-a, which nobody else owns: it is removed.
	// k stays (b owns it).
	cm, err = cms.Apply(ctx, corev1ac.ConfigMap("ssa", "default").WithLabels(map[string]string{"l": "a"}), metav1.ApplyOptions{FieldManager: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cm.Data["only-a"]; ok || cm.Data["k"] != "b" || cm.Labels["l"] != "a" {
		t.Fatalf("after a dropped only-a: %+v", cm)
	}

	// Shared ownership: c applies b's value; both own it. b drops it: it
	// stays, owned by c alone.
	cm, err = cms.Apply(ctx, corev1ac.ConfigMap("ssa", "default").WithData(map[string]string{"k": "b"}), metav1.ApplyOptions{FieldManager: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if o := owners(cm, "k"); !o["b"] || !o["c"] {
		t.Fatalf("shared: owners of k %v", o)
	}
	cm, err = cms.Apply(ctx, corev1ac.ConfigMap("ssa", "default"), metav1.ApplyOptions{FieldManager: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if o := owners(cm, "k"); cm.Data["k"] != "b" || o["b"] || !o["c"] {
		t.Fatalf("after b let go: data %v, owners of k %v", cm.Data, o)
	}

	// An ordinary update is recorded as an Update entry of its manager.
	cm.Data["upd"] = "x"
	cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "updater"})
	if err != nil {
		t.Fatal(err)
	}
	if en, ok := entry(cm, "updater"); !ok || en.Operation != metav1.ManagedFieldsOperationUpdate || !strings.Contains(string(en.FieldsV1.Raw), `"f:upd"`) {
		t.Fatalf("update entry: %+v", cm.ManagedFields)
	}
	// Without a fieldManager the manager is the User-Agent's first segment.
	ua := *e.config
	ua.UserAgent = "my-controller/v9 (linux/amd64)"
	c2, err := kubernetes.NewForConfig(&ua)
	if err != nil {
		t.Fatal(err)
	}
	cm, err = c2.CoreV1().ConfigMaps("default").Patch(ctx, "ssa", types.MergePatchType, []byte(`{"data":{"by-ua":"1"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if en, ok := entry(cm, "my-controller"); !ok || en.Operation != metav1.ManagedFieldsOperationUpdate {
		t.Fatalf("user-agent manager: %+v", cm.ManagedFields)
	}
	// Apply over an Update-owned field conflicts with the updater, named
	// with its API version, as kube-apiserver names it.
	_, err = cms.Apply(ctx, corev1ac.ConfigMap("ssa", "default").WithData(map[string]string{"upd": "y"}), metav1.ApplyOptions{FieldManager: "a"})
	if !errors.As(err, &se) || !apierrors.IsConflict(err) || se.ErrStatus.Details.Causes[0].Message != `conflict with "updater" using v1` {
		t.Fatalf("conflict with an updater: %v", err)
	}

	// Dry run: nothing is stored, neither a create nor a change.
	_, err = cms.Apply(ctx, corev1ac.ConfigMap("ssa-dry", "default").WithData(map[string]string{"k": "v"}), metav1.ApplyOptions{FieldManager: "a", DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "ssa-dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("dry-run apply stored an object: %v", err)
	}
	before, _ := cms.Get(ctx, "ssa", metav1.GetOptions{})
	dry, err := cms.Apply(ctx, corev1ac.ConfigMap("ssa", "default").WithData(map[string]string{"upd": "y"}), metav1.ApplyOptions{FieldManager: "a", Force: true, DryRun: []string{metav1.DryRunAll}})
	if err != nil || dry.Data["upd"] != "y" {
		t.Fatalf("dry-run forced apply: %v %v", dry, err)
	}
	after, _ := cms.Get(ctx, "ssa", metav1.GetOptions{})
	if after.ResourceVersion != before.ResourceVersion || after.Data["upd"] != "x" {
		t.Fatalf("dry run changed the object: %v → %v", before.Data, after.Data)
	}

	// Secrets and namespaces (cluster-scoped, with a status) apply too.
	sec, err := e.client.CoreV1().Secrets("default").Apply(ctx, corev1ac.Secret("ssa", "default").WithStringData(map[string]string{"p": "v"}).WithType(corev1.SecretTypeOpaque), metav1.ApplyOptions{FieldManager: "a"})
	if err != nil || string(sec.Data["p"]) != "v" {
		t.Fatalf("secret apply: %+v %v", sec, err)
	}
	ns, err := e.client.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace("ssa-ns").WithLabels(map[string]string{"team": "x"}), metav1.ApplyOptions{FieldManager: "a"})
	if err != nil || ns.Labels["team"] != "x" || ns.Status.Phase != corev1.NamespaceActive {
		t.Fatalf("namespace apply: %+v %v", ns, err)
	}
	// A status write is recorded apart, with subresource "status"; the
	// status an apply through the main resource carries is not its to own.
	ns.Status.Conditions = append(ns.Status.Conditions, corev1.NamespaceCondition{Type: "Checked", Status: corev1.ConditionTrue})
	ns, err = e.client.CoreV1().Namespaces().UpdateStatus(ctx, ns, metav1.UpdateOptions{FieldManager: "checker"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range ns.ManagedFields {
		if en.Manager == "checker" {
			found = en.Subresource == "status" && en.Operation == metav1.ManagedFieldsOperationUpdate && strings.Contains(string(en.FieldsV1.Raw), "f:conditions")
		}
		if en.Manager == "a" && strings.Contains(string(en.FieldsV1.Raw), "f:status") {
			t.Errorf("the applier owns status: %s", en.FieldsV1.Raw)
		}
	}
	if !found {
		t.Fatalf("status entry: %+v", ns.ManagedFields)
	}
	ns, err = e.client.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace("ssa-ns").WithLabels(map[string]string{"team": "y"}).WithStatus(corev1ac.NamespaceStatus().WithPhase(corev1.NamespaceTerminating)), metav1.ApplyOptions{FieldManager: "a"})
	if err != nil || ns.Labels["team"] != "y" || ns.Status.Phase != corev1.NamespaceActive || len(ns.Status.Conditions) != 1 {
		t.Fatalf("apply with a status through the main resource: %+v %v", ns, err)
	}
}

// TestApplyRequestErrors checks the requests server-side apply refuses,
// and resetting managedFields with a JSON patch as the documentation shows.
func TestApplyRequestErrors(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc, err := rest.RESTClientFor(restConfigFor(e.config))
	if err != nil {
		t.Fatal(err)
	}
	apply := func(name, body string, params map[string]string) (*corev1.ConfigMap, error) {
		r := rc.Patch(types.ApplyYAMLPatchType).AbsPath("/api/v1/namespaces/default/configmaps", name).Body([]byte(body))
		for k, v := range params {
			r = r.Param(k, v)
		}
		out := &corev1.ConfigMap{}
		err := r.Do(ctx).Into(out)
		return out, err
	}
	code := func(err error) int32 {
		var se *apierrors.StatusError
		if errors.As(err, &se) {
			return se.ErrStatus.Code
		}
		return 0
	}
	body := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e\ndata:\n  k: v\n"

	if _, err := apply("e", body, nil); code(err) != 422 || !strings.Contains(err.Error(), "fieldManager: Required value") {
		t.Errorf("apply without fieldManager: %v", err)
	}
	if _, err := apply("e", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"e","managedFields":[{"manager":"x","operation":"Apply"}]}}`, map[string]string{"fieldManager": "m"}); code(err) != 400 || !strings.Contains(err.Error(), "metadata.managedFields must be nil") {
		t.Errorf("managedFields in an apply body: %v", err)
	}
	if _, err := apply("e", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"e"},"spec":{"x":1}}`, map[string]string{"fieldManager": "m"}); code(err) != 400 || !strings.Contains(err.Error(), "field not declared in schema") {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := apply("e", "data:\n  k: v\n  k: w\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e\n", map[string]string{"fieldManager": "m", "fieldValidation": "Strict"}); code(err) != 400 || !strings.Contains(err.Error(), "error strict decoding YAML") {
		t.Errorf("duplicate field, Strict: %v", err)
	}
	if _, err := apply("other", body, map[string]string{"fieldManager": "m"}); code(err) != 400 || !strings.Contains(err.Error(), "does not match the name on the URL") {
		t.Errorf("name mismatch: %v", err)
	}
	if _, err := apply("e", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"e"}}`, map[string]string{"fieldManager": "m"}); code(err) != 400 {
		t.Errorf("wrong kind: %v", err)
	}
	if _, err := apply("e", "- a\n- b\n", map[string]string{"fieldManager": "m"}); code(err) != 400 {
		t.Errorf("a list body: %v", err)
	}
	if _, err := e.client.CoreV1().ConfigMaps("default").Get(ctx, "e", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused apply stored an object: %v", err)
	}
	// force on a non-apply patch is refused, as by kube-apiserver.
	err = rc.Patch(types.MergePatchType).AbsPath("/api/v1/namespaces/default/configmaps", "e").Param("force", "true").Body([]byte(`{}`)).Do(ctx).Error()
	if code(err) != 422 {
		t.Errorf("force on a merge patch: %v", err)
	}

	// Created by apply (201), then updated by an ordinary patch.
	res := rc.Patch(types.ApplyYAMLPatchType).AbsPath("/api/v1/namespaces/default/configmaps", "e").Param("fieldManager", "m").Body([]byte(body)).Do(ctx)
	var status int
	res.StatusCode(&status)
	if res.Error() != nil || status != 201 {
		t.Fatalf("apply create: %d %v", status, res.Error())
	}
	cms := e.client.CoreV1().ConfigMaps("default")
	cm, err := cms.Patch(ctx, "e", types.MergePatchType, []byte(`{"data":{"u":"1"}}`), metav1.PatchOptions{FieldManager: "u"})
	if err != nil || len(cm.ManagedFields) != 2 {
		t.Fatalf("patch: %v %+v", err, cm.ManagedFields)
	}
	// A JSON patch replacing them with [{}] resets them, as the
	// documentation shows.
	cm, err = cms.Patch(ctx, "e", types.JSONPatchType, []byte(`[{"op":"replace","path":"/metadata/managedFields","value":[{}]}]`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.ManagedFields) != 0 {
		t.Fatalf("after the reset: %+v", cm.ManagedFields)
	}
	if got, _ := cms.Get(ctx, "e", metav1.GetOptions{}); len(got.ManagedFields) != 0 {
		t.Fatalf("stored after the reset: %+v", got.ManagedFields)
	}
	// With no entries left, the first apply finds the existing fields owned
	// by "before-first-apply", as in kube-apiserver: changing one needs force.
	if _, err = apply("e", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e\ndata:\n  u: changed\n", map[string]string{"fieldManager": "n"}); !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `"before-first-apply"`) {
		t.Fatalf("apply after the reset: %v", err)
	}
	cm, err = apply("e", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e\ndata:\n  u: changed\n", map[string]string{"fieldManager": "n", "force": "true"})
	if err != nil || cm.Data["u"] != "changed" {
		t.Fatalf("forced apply after the reset: %v %+v", err, cm)
	}
	// managedFields: [] resets them too. (The documentation says it does
	// not; kube-apiserver has reset on an empty list since 1.19, in the
	// same managedfields code used here, and meridian does what it does.)
	cm, err = cms.Patch(ctx, "e", types.MergePatchType, []byte(`{"metadata":{"managedFields":[]}}`), metav1.PatchOptions{FieldManager: "u"})
	if err != nil || len(cm.ManagedFields) != 0 {
		t.Fatalf("merge patch with managedFields []: %v %+v", err, cm.ManagedFields)
	}
	// A patch that leaves managedFields out keeps them.
	if _, err := apply("e", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e\ndata:\n  u: again\n", map[string]string{"fieldManager": "n", "force": "true"}); err != nil {
		t.Fatal(err)
	}
	cm, err = cms.Patch(ctx, "e", types.MergePatchType, []byte(`{"data":{"w":"1"}}`), metav1.PatchOptions{FieldManager: "u"})
	if _, ok := entry(cm, "n"); err != nil || !ok || len(cm.ManagedFields) != 3 {
		t.Fatalf("merge patch without managedFields: %v %+v", err, cm.ManagedFields)
	}
}

// restConfigFor is e's config for a raw REST client of the core group.
func restConfigFor(c *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(c)
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return cfg
}
