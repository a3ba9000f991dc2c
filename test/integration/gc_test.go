package integration

import (
	"context"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/allinone"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestGarbageCollection: dependents follow their owner per the deletion's
// propagation policy — Background deletes them after the owner, Foreground
// before it (the owner waits), Orphan keeps them without the reference —
// and an owner of a kind not served here never gets a dependent collected.
func TestGarbageCollection(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	owned := func(name string, owner *corev1.ConfigMap) {
		t.Helper()
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	gone := func(name string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := cms.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("%s was not collected", name)
		}
	}
	owner := func(name string) *corev1.ConfigMap {
		t.Helper()
		o, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	bg := owner("bg-owner")
	owned("bg-dep", bg)
	if err := cms.Delete(ctx, "bg-owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("bg-dep")

	fg := owner("fg-owner")
	owned("fg-dep", fg)
	fgPolicy := metav1.DeletePropagationForeground
	if err := cms.Delete(ctx, "fg-owner", metav1.DeleteOptions{PropagationPolicy: &fgPolicy}); err != nil {
		t.Fatal(err)
	}
	if o, err := cms.Get(ctx, "fg-owner", metav1.GetOptions{}); err == nil && (o.DeletionTimestamp == nil || len(o.Finalizers) == 0) {
		t.Errorf("foreground owner right after delete: %+v", o.ObjectMeta)
	}
	gone("fg-dep")
	gone("fg-owner")

	or := owner("or-owner")
	owned("or-dep", or)
	orphan := metav1.DeletePropagationOrphan
	if err := cms.Delete(ctx, "or-owner", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	gone("or-owner")
	dep, err := cms.Get(ctx, "or-dep", metav1.GetOptions{})
	if err != nil || len(dep.OwnerReferences) != 0 {
		t.Errorf("orphaned dependent: %v %+v", err, dep)
	}

	// An owner of a kind meridian does not serve: never collected.
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "foreign-dep", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "no-such-uid",
	}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The collector handles changes in order: once an orphan created
	// after it is gone, foreign-dep has had its look.
	owned("sentinel", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "never", UID: "never-existed"}})
	gone("sentinel")
	if _, err := cms.Get(ctx, "foreign-dep", metav1.GetOptions{}); err != nil {
		t.Errorf("a dependent of an unresolvable owner was collected: %v", err)
	}
}

// TestGarbageCollectionOwnerResolution: how the collector resolves owner
// references, as kube-controller-manager's does. A namespaced owner counts
// only in its dependent's namespace and by uid; a cluster-scoped owner
// (a Namespace) owns namespaced dependents; a cluster-scoped dependent
// naming a namespaced kind cannot be resolved and is never collected.
func TestGarbageCollectionOwnerResolution(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	mkNS := func(name string, refs ...metav1.OwnerReference) *corev1.Namespace {
		t.Helper()
		ns, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: refs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	mkCM := func(ns, name string, refs ...metav1.OwnerReference) *corev1.ConfigMap {
		t.Helper()
		cm, err := e.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: refs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	refTo := func(kind, name string, uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: kind, Name: name, UID: uid}
	}
	exists := func(ns, name string) bool {
		_, err := e.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	gone := func(ns, name string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return !exists(ns, name), nil })
		if err != nil {
			t.Fatalf("%s/%s was not collected", ns, name)
		}
	}

	mkNS("gc-other")
	owner := mkCM("default", "owner")
	// Same name, other uid: the owner it names is gone.
	mkCM("default", "wrong-uid", refTo("ConfigMap", "owner", "not-the-owners-uid"))
	// The owner's uid, but the owner is in another namespace.
	mkCM("gc-other", "other-ns", refTo("ConfigMap", "owner", owner.UID))
	// Two owners, one alive: kept.
	mkCM("default", "one-alive", refTo("ConfigMap", "nobody", "gone-uid"), refTo("ConfigMap", "owner", owner.UID))
	// A namespace owns a namespaced object.
	parent := mkNS("gc-parent")
	mkCM("default", "ns-owned", refTo("Namespace", "gc-parent", parent.UID))
	// A cluster-scoped dependent of a namespaced kind: unresolvable.
	mkNS("gc-unresolvable", refTo("ConfigMap", "owner", "no-such-uid"))

	gone("default", "wrong-uid")
	gone("gc-other", "other-ns")
	// Changes are handled in order: the ones above have had their look.
	if !exists("default", "one-alive") || !exists("default", "ns-owned") {
		t.Fatal("a dependent with a live owner was collected")
	}
	if _, err := e.client.CoreV1().Namespaces().Get(ctx, "gc-unresolvable", metav1.GetOptions{}); err != nil {
		t.Fatalf("a cluster-scoped dependent of a namespaced kind was collected: %v", err)
	}

	// Deleting the namespace (through its lifecycle) collects what it owns.
	if err := e.client.CoreV1().Namespaces().Delete(ctx, "gc-parent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("default", "ns-owned")
	// And the last live owner going takes its dependent with it.
	if err := e.client.CoreV1().ConfigMaps("default").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("default", "one-alive")
}

// TestGarbageCollectionAfterRestart: dependents and owners stored before
// the control plane (re)starts are collected: the collector builds its
// view from the store, not only from the changes it saw.
func TestGarbageCollectionAfterRestart(t *testing.T) {
	first := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cms := first.client.CoreV1().ConfigMaps("default")
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dep-1", "dep-2"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID,
		}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.cp.Close(); err != nil {
		t.Fatal(err)
	}

	second := newEnv(t, func(c *allinone.Config) { c.DataDir = first.dataDir })
	cms = second.client.CoreV1().ConfigMaps("default")
	orphan := metav1.DeletePropagationOrphan
	if _, err := cms.Patch(ctx, "dep-2", types.MergePatchType, []byte(`{"metadata":{"labels":{"kept":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Orphan first: the owner waits until dep-1 and dep-2 lose their
	// reference, then goes; then nothing is collected.
	if err := cms.Delete(ctx, "owner", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cms.Get(ctx, "owner", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatal("the orphaning owner was not removed after a restart")
	}
	for _, name := range []string{"dep-1", "dep-2"} {
		d, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(d.OwnerReferences) != 0 {
			t.Errorf("%s after orphaning: %v %+v", name, err, d)
		}
	}
}
