package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestKubectlDeletion: finalizers hold a deleted object until they are
// removed (a watcher sees MODIFIED, then DELETED); deleting a namespace
// empties it and then removes it; what may not be deleted or created is
// refused with 403; deletecollection honours selectors; dry runs store
// nothing.
func TestKubectlDeletion(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.kubectl("create", "namespace", "del")
	cp.kubectl("-n", "del", "create", "configmap", "held", "--from-literal=a=b")
	cp.kubectl("-n", "del", "patch", "configmap", "held", "--type=merge", "-p", `{"metadata":{"finalizers":["example.com/hold"]}}`)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	events := cp.kubectlWatch(ctx, "-n", "del", "get", "configmap", "held", "--watch-only")
	time.Sleep(500 * time.Millisecond) // let the watch start

	cp.kubectl("-n", "del", "delete", "configmap", "held", "--wait=false")
	ts := cp.kubectl("-n", "del", "get", "configmap", "held", "-o", "jsonpath={.metadata.deletionTimestamp}")
	if ts == "" {
		t.Fatal("an object with a finalizer was removed at once, or has no deletionTimestamp")
	}
	// The namespace goes Terminating but stays while the object is held;
	// nothing new may be created in it.
	cp.kubectl("delete", "namespace", "del", "--wait=false")
	if phase := cp.kubectl("get", "namespace", "del", "-o", "jsonpath={.status.phase}"); phase != "Terminating" {
		t.Errorf("namespace phase %q, want Terminating", phase)
	}
	if _, errOut, err := cp.kubectlErr("-n", "del", "create", "configmap", "late"); err == nil || !strings.Contains(errOut, "is forbidden") || !strings.Contains(errOut, "being terminated") {
		t.Errorf("create in a terminating namespace: %v %s", err, errOut)
	}
	cp.kubectl("-n", "del", "patch", "configmap", "held", "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`)
	for _, want := range []string{"MODIFIED", "DELETED"} {
		select {
		case got := <-events:
			if got.Type != want {
				t.Errorf("watch event %s, want %s", got.Type, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s event", want)
		}
	}
	// Once empty, the namespace is gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, errOut, err := cp.kubectlErr("get", "namespace", "del")
		if err != nil && strings.Contains(errOut, "NotFound") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace still there: %s", cp.kubectl("get", "namespace", "del", "-o", "yaml"))
		}
		time.Sleep(200 * time.Millisecond)
	}

	if _, errOut, err := cp.kubectlErr("delete", "namespace", "default"); err == nil || !strings.Contains(errOut, "Forbidden") {
		t.Errorf("delete namespace default: %v %s", err, errOut)
	}

	// deletecollection with a label selector.
	cp.createNamespace("coll")
	for _, n := range []string{"a", "b", "c"} {
		cp.kubectl("-n", "coll", "create", "configmap", n)
	}
	cp.kubectl("-n", "coll", "label", "configmap", "a", "b", "tier=web")
	cp.kubectl("-n", "coll", "delete", "configmaps", "-l", "tier=web")
	// kube-root-ca.crt, which every namespace has, stays.
	if out := cp.kubectl("-n", "coll", "get", "configmaps", "-o", "name"); strings.TrimSpace(out) != "configmap/c\nconfigmap/kube-root-ca.crt" {
		t.Errorf("after deleting tier=web: %q", out)
	}

	// Server-side dry runs store nothing.
	cp.kubectl("-n", "coll", "create", "configmap", "dry", "--from-literal=x=y", "--dry-run=server")
	cp.kubectl("-n", "coll", "delete", "configmap", "c", "--dry-run=server")
	if out := cp.kubectl("-n", "coll", "get", "configmaps", "-o", "name"); strings.TrimSpace(out) != "configmap/c\nconfigmap/kube-root-ca.crt" {
		t.Errorf("after dry runs: %q", out)
	}
}
