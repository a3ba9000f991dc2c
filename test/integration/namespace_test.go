package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestCreateChecksNamespaceAsWritten: a create is checked against its
// namespace as the namespace is when the object is written, whatever the
// gateway saw before: a namespace that changed is read again (a label
// change still admits creates), one being deleted refuses them with 403,
// one gone with 404 on namespaces, and one created again admits them.
func TestCreateChecksNamespaceAsWritten(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nsc, cms := e.client.CoreV1().Namespaces(), e.client.CoreV1().ConfigMaps("guard")
	create := func(name string, finalizers ...string) error {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers}}, metav1.CreateOptions{})
		return err
	}
	if _, err := nsc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "guard"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := create("a"); err != nil {
		t.Fatal(err)
	}
	// The namespace changes after the gateway saw it.
	if _, err := nsc.Patch(ctx, "guard", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"x"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := create("b", "example.com/hold"); err != nil {
		t.Fatalf("create after the namespace changed: %v", err)
	}
	// Deleted, held by b's finalizer: Terminating.
	if err := nsc.Delete(ctx, "guard", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, dry := range [][]string{nil, {metav1.DryRunAll}} {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{DryRun: dry})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "being terminated") {
			t.Errorf("create (dry run %v) in a terminating namespace: %v, want 403 Forbidden", dry, err)
		}
	}
	if _, err := cms.Get(ctx, "late", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused create was stored: %v", err)
	}
	// Released, the namespace goes away.
	if _, err := cms.Patch(ctx, "b", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the namespace to go", func() bool {
		_, err := nsc.Get(ctx, "guard", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	err := create("gone")
	if se, ok := err.(apierrors.APIStatus); !apierrors.IsNotFound(err) || !ok || se.Status().Details == nil || se.Status().Details.Kind != "namespaces" {
		t.Errorf("create in a namespace that is gone: %v, want 404 on namespaces", err)
	}
	// Created again, it admits creates.
	if _, err := nsc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "guard"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := create("again"); err != nil {
		t.Fatalf("create in the namespace created again: %v", err)
	}
}

// TestNoObjectOutlivesItsNamespace: writers keep creating in a namespace
// while it is deleted. Every create is either stored before the namespace
// was marked for deletion (and then removed with it) or refused, so once
// the namespace is gone nothing of it is left in the store, and the same
// namespace created again starts empty.
func TestNoObjectOutlivesItsNamespace(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	nsc, cms := e.client.CoreV1().Namespaces(), e.client.CoreV1().ConfigMaps("race")
	if _, err := nsc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "race"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var created, refused atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w%d-%d", w, i)}}, metav1.CreateOptions{})
				switch {
				case err == nil:
					created.Add(1)
				case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
					refused.Add(1)
				default:
					errs <- err
					return
				}
			}
		}()
	}
	waitFor(t, "creates", func() bool { return created.Load() >= 50 })
	if err := nsc.Delete(ctx, "race", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the namespace to go", func() bool {
		_, err := nsc.Get(ctx, "race", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	// Writers go on a little after the namespace is gone.
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("create: %v, want success, 403 or 404", err)
	}
	if refused.Load() == 0 {
		t.Fatal("no create was refused: the writers did not overlap the deletion")
	}
	r, err := storev1.NewKVServiceClient(e.storeConn(gatewayCert)).Range(ctx, &storev1.RangeRequest{
		Key: []byte("/registry/configmaps/race/"), RangeEnd: []byte("/registry/configmaps/race0"), CountOnly: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != 0 {
		t.Errorf("%d configmaps outlived their namespace (%d created, %d refused)", r.Count, created.Load(), refused.Load())
	}
	if _, err := nsc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "race"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Only what every new namespace gets (its kube-root-ca.crt, which may
	// not be there yet).
	list, err := cms.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name!=" + rootCA})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("the namespace created again holds %d configmaps (%v)", len(list.Items), err)
	}
	t.Logf("%d created, %d refused", created.Load(), refused.Load())
}
