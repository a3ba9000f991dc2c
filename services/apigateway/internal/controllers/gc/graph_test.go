package gc

import (
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/protolist"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestGCGraphFollowsOnlyWhatCollectionNeeds walks the graph through the
// changes the collector sees and checks its invariants after each.
func TestGCGraphFollowsOnlyWhatCollectionNeeds(t *testing.T) {
	res := &registry.Resource{Namespaced: true}
	g := newGraph()
	ref := func(uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: string(uid), UID: uid}}
	}
	check := func(step string, nodes ...string) {
		t.Helper()
		if len(g.nodes) != len(nodes) || len(g.byUID) != len(nodes) {
			t.Fatalf("%s: following %v (by uid %d), want %v", step, keys(g.nodes), len(g.byUID), nodes)
		}
		for _, k := range nodes {
			if g.nodes[k] == nil || g.byUID[g.nodes[k].meta.UID] != g.nodes[k] {
				t.Fatalf("%s: %s not followed consistently", step, k)
			}
		}
		clear(g.dirty)
	}
	dirty := func(step string, want ...string) {
		t.Helper()
		for _, k := range want {
			if !g.dirty[k] {
				t.Fatalf("%s: %s not marked for a look (dirty %v)", step, k, g.dirty)
			}
		}
	}

	g.put(res, "plain", protolist.Meta{Name: "plain", UID: "u-plain"})
	check("an object without owners")
	g.put(res, "owner", protolist.Meta{Name: "owner", UID: "u-owner"})
	g.put(res, "dep", protolist.Meta{Name: "dep", UID: "u-dep", OwnerReferences: ref("u-owner")})
	check("a dependent", "dep") // the owner, seen before, is read again when needed
	g.put(res, "owner", protolist.Meta{Name: "owner", UID: "u-owner"})
	dirty("the named owner changes", "owner")
	check("a named owner", "dep", "owner")
	g.put(res, "dep", protolist.Meta{Name: "dep", UID: "u-dep", OwnerReferences: ref("u-owner")})
	dirty("the dependent changes", "dep", "owner")
	check("the dependent again", "dep", "owner")
	g.remove("owner")
	dirty("the owner goes", "dep")
	check("owner gone", "dep")
	if len(g.deps["u-owner"]) != 1 {
		t.Fatalf("the dependent no longer names the gone owner: %v", g.deps)
	}
	g.put(res, "dep", protolist.Meta{Name: "dep", UID: "u-dep"})
	check("the dependent drops its reference")
	if len(g.deps) != 0 {
		t.Fatalf("deps left: %v", g.deps)
	}
	g.put(res, "fg", protolist.Meta{Name: "fg", UID: "u-fg", Deleting: true, Finalizers: []string{metav1.FinalizerDeleteDependents}})
	g.put(res, "d1", protolist.Meta{Name: "d1", UID: "u-d1", OwnerReferences: ref("u-fg")})
	check("a foreground owner and its dependent", "fg", "d1")
	g.remove("d1")
	dirty("its dependent goes", "fg")
	check("the foreground owner waits no more", "fg")
	g.put(res, "fg", protolist.Meta{Name: "fg", UID: "u-fg2"})
	check("recreated under the same name without a finalizer")
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
