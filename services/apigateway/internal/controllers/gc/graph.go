package gc

import (
	"slices"

	"github.com/meridian-cp/meridian/lib/kube/protolist"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// node is one object the garbage collector follows.
type node struct {
	res  *registry.Resource
	key  string
	meta protolist.Meta
}

// graph holds the objects that take part in garbage collection and
// which of them need a look. Invariants, kept by put and remove:
//
//   - nodes holds exactly the objects that have owner references, are
//     named as owner (by uid) by a node, or are being deleted with the
//     orphan or foregroundDeletion finalizer; byUID indexes the same nodes.
//   - deps[u] holds the key of every node whose owner references name uid
//     u, whether or not an object with uid u exists.
//   - dirty holds every key whose object changed, or whose owners or
//     dependents changed, since it was last reconciled; failed the keys
//     whose reconciliation failed, for the next retry.
//
// It is not safe for concurrent use: the collector's goroutine owns it.
type graph struct {
	nodes  map[string]*node
	byUID  map[types.UID]*node
	deps   map[types.UID]map[string]bool
	dirty  map[string]bool
	failed map[string]bool
}

func newGraph() *graph {
	return &graph{
		nodes:  map[string]*node{},
		byUID:  map[types.UID]*node{},
		deps:   map[types.UID]map[string]bool{},
		dirty:  map[string]bool{},
		failed: map[string]bool{},
	}
}

// wanted reports whether the graph must follow an object with metadata m.
func (g *graph) wanted(m protolist.Meta) bool {
	return len(m.OwnerReferences) > 0 || len(g.deps[m.UID]) > 0 ||
		m.Deleting && (slices.Contains(m.Finalizers, metav1.FinalizerOrphanDependents) || slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents))
}

// put records the current state of the object at key.
func (g *graph) put(res *registry.Resource, key string, m protolist.Meta) {
	old := g.nodes[key]
	if old != nil && old.meta.UID != m.UID {
		g.remove(key) // deleted and created again between two looks
		old = nil
	}
	if !g.wanted(m) {
		if old != nil {
			delete(g.nodes, key)
			delete(g.byUID, old.meta.UID)
			g.unlink(old, nil)
		}
		return
	}
	n := &node{res: res, key: key, meta: m}
	g.nodes[key] = n
	g.byUID[m.UID] = n
	g.dirty[key] = true
	for _, ref := range m.OwnerReferences {
		set := g.deps[ref.UID]
		if set == nil {
			set = map[string]bool{}
			g.deps[ref.UID] = set
		}
		set[key] = true
		if o := g.byUID[ref.UID]; o != nil {
			g.dirty[o.key] = true // a foreground owner may be waiting on n
		}
	}
	// Unlinking after linking keeps an owner that n still names in the
	// graph: unlinking first could drop it, to be read again.
	if old != nil {
		g.unlink(old, m.OwnerReferences)
	}
}

// remove records that the object at key is gone: its dependents may have
// lost their last owner, its owners one dependent.
func (g *graph) remove(key string) {
	n := g.nodes[key]
	if n == nil {
		return
	}
	delete(g.nodes, key)
	delete(g.byUID, n.meta.UID)
	g.unlink(n, nil)
	for dep := range g.deps[n.meta.UID] {
		g.dirty[dep] = true
	}
}

// unlink takes n out of the dependent sets of its owners but those in keep,
// marks them for a look and stops following owners nothing names any more.
func (g *graph) unlink(n *node, keep []metav1.OwnerReference) {
	for _, ref := range n.meta.OwnerReferences {
		if slices.ContainsFunc(keep, func(k metav1.OwnerReference) bool { return k.UID == ref.UID }) {
			continue
		}
		set := g.deps[ref.UID]
		delete(set, n.key)
		if len(set) > 0 {
			if o := g.byUID[ref.UID]; o != nil {
				g.dirty[o.key] = true
			}
			continue
		}
		delete(g.deps, ref.UID)
		if o := g.byUID[ref.UID]; o != nil {
			if g.wanted(o.meta) {
				g.dirty[o.key] = true
			} else {
				delete(g.nodes, o.key)
				delete(g.byUID, o.meta.UID)
			}
		}
	}
}

// retryFailed marks the keys whose reconciliation failed for another look.
func (g *graph) retryFailed() {
	for key := range g.failed {
		g.dirty[key] = true
	}
	clear(g.failed)
}
