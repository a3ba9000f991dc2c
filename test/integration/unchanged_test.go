package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// TestUnchangedWritesStoreNothing: an update, patch or apply whose result is
// what is stored writes nothing, as in kube-apiserver: the response is the
// stored object with its resourceVersion, the store's key keeps its mod
// revision and version, and watchers get no event (the first event after
// them is a later real change).
func TestUnchangedWritesStoreNothing(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "same", Labels: map[string]string{"a": "b"}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{FieldManager: "creator"}); err != nil {
		t.Fatal(err)
	}
	// A second manager, so managedFields has two entries.
	if _, err := cms.Patch(ctx, "same", types.MergePatchType, []byte(`{"data":{"e":"1"}}`), metav1.PatchOptions{FieldManager: "editor"}); err != nil {
		t.Fatal(err)
	}
	cur, err := cms.Get(ctx, "same", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.ManagedFields) != 2 {
		t.Fatalf("managedFields %+v, want two entries", cur.ManagedFields)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: cur.ResourceVersion, FieldSelector: "metadata.name=same"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	kv := storev1.NewKVServiceClient(e.storeConn(gatewayCert))
	stored := func() *storev1.KeyValue {
		t.Helper()
		r, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte("/registry/configmaps/default/same")})
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("the configmap in the store: %v %v", err, r)
		}
		return r.Kvs[0]
	}
	// unchanged runs a write that must store nothing and answer with the
	// stored object.
	unchanged := func(name string, write func() (*corev1.ConfigMap, error)) {
		t.Helper()
		before := stored()
		got, err := write()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		after := stored()
		if got.ResourceVersion != cur.ResourceVersion || after.ModRevision != before.ModRevision || after.Version != before.Version {
			t.Errorf("%s wrote: resourceVersion %s → %s, store mod revision %d → %d, version %d → %d",
				name, cur.ResourceVersion, got.ResourceVersion, before.ModRevision, after.ModRevision, before.Version, after.Version)
		}
		if got.Data["k"] != "v" || len(got.ManagedFields) != len(cur.ManagedFields) {
			t.Errorf("%s answered %+v, want the stored object", name, got)
		}
	}

	unchanged("PUT of the stored object", func() (*corev1.ConfigMap, error) {
		return cms.Update(ctx, cur.DeepCopy(), metav1.UpdateOptions{})
	})
	unchanged("PUT without resourceVersion", func() (*corev1.ConfigMap, error) {
		cm := cur.DeepCopy()
		cm.ResourceVersion = ""
		return cms.Update(ctx, cm, metav1.UpdateOptions{})
	})
	unchanged("PUT by a new manager", func() (*corev1.ConfigMap, error) {
		return cms.Update(ctx, cur.DeepCopy(), metav1.UpdateOptions{FieldManager: "newcomer"})
	})
	unchanged("PUT with managedFields in another order", func() (*corev1.ConfigMap, error) {
		cm := cur.DeepCopy()
		slices.Reverse(cm.ManagedFields)
		return cms.Update(ctx, cm, metav1.UpdateOptions{})
	})
	unchanged("PUT without managedFields", func() (*corev1.ConfigMap, error) {
		cm := cur.DeepCopy()
		cm.ManagedFields = nil
		return cms.Update(ctx, cm, metav1.UpdateOptions{})
	})
	for _, p := range []struct {
		typ  types.PatchType
		body string
	}{
		{types.MergePatchType, `{}`},
		{types.MergePatchType, `{"data":{"k":"v"}}`},
		{types.StrategicMergePatchType, `{}`},
		{types.StrategicMergePatchType, `{"metadata":{"labels":{"a":"b"}}}`},
		{types.JSONPatchType, `[{"op":"test","path":"/data/k","value":"v"}]`},
		{types.JSONPatchType, `[{"op":"replace","path":"/data/k","value":"v"}]`},
	} {
		unchanged(fmt.Sprintf("%s patch %s", p.typ, p.body), func() (*corev1.ConfigMap, error) {
			return cms.Patch(ctx, "same", p.typ, []byte(p.body), metav1.PatchOptions{})
		})
	}
	// A stale resourceVersion is a precondition that fails, not a change.
	stale := cur.DeepCopy()
	stale.ResourceVersion = "1"
	if _, err := cms.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("PUT with a stale resourceVersion: %v, want 409 Conflict", err)
	}

	// A first apply takes ownership (a new managedFields entry): it writes.
	// The same apply again changes nothing.
	applied := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"same"},"data":{"k":"v"}}`)
	first, err := cms.Patch(ctx, "same", types.ApplyPatchType, applied, metav1.PatchOptions{FieldManager: "applier"})
	if err != nil {
		t.Fatal(err)
	}
	if first.ResourceVersion == cur.ResourceVersion {
		t.Fatalf("the first apply did not record its manager: %+v", first.ManagedFields)
	}
	cur = first
	unchanged("the same apply again", func() (*corev1.ConfigMap, error) {
		return cms.Patch(ctx, "same", types.ApplyPatchType, applied, metav1.PatchOptions{FieldManager: "applier"})
	})

	// A real change writes, and is the next event watchers get after the
	// apply's.
	marker := cur.DeepCopy()
	marker.Data["k"] = "changed"
	marker, err = cms.Update(ctx, marker, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			t.Fatalf("watch error: %v", apierrors.FromObject(ev.Object))
		}
		cm := ev.Object.(*corev1.ConfigMap)
		events = append(events, string(ev.Type)+" "+cm.ResourceVersion)
		if cm.ResourceVersion == marker.ResourceVersion {
			break
		}
	}
	want := []string{"MODIFIED " + first.ResourceVersion, "MODIFIED " + marker.ResourceVersion}
	if !slices.Equal(events, want) {
		t.Errorf("watch events %v, want %v (nothing for the writes that changed nothing)", events, want)
	}
}
