package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	time.Sleep(5 * time.Second) // two collector rounds
	if _, err := cms.Get(ctx, "foreign-dep", metav1.GetOptions{}); err != nil {
		t.Errorf("a dependent of an unresolvable owner was collected: %v", err)
	}
}
