package cache

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/google/btree"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// The cache serves custom resources as it serves built-in ones. It follows
// the CustomResourceDefinitions in its own store watch (they are under
// /registry/ like everything else), so the set of custom resources it
// serves changes at a revision of that watch, in order with the objects'
// events:
//
//   - A CRD that becomes Established at revision R gets one Resource per
//     served version (registry.CustomResources), whose state is read
//     from the store at exactly R (loadCustom): every event of its
//     prefix after R comes later in the watch and is applied on top, and
//     those at or before R are skipped (Resource.born), so each change
//     reaches a watcher once and in revision order.
//   - A CRD whose serving changes (its spec, accepted names, UID or
//     Established condition: what kube-apiserver rebuilds a CRD's storage
//     for) has its Resources dropped and new ones built at that revision:
//     watch events and lists carry the schema's defaults as of the CRD
//     they were encoded for. A status-only change (conditions,
//     storedVersions) keeps them.
//   - A deleted CRD has its Resources dropped: their watches end (ErrGone;
//     the stream ends as kube-apiserver ends them, the client re-watches)
//     and requests for them get 404.
//
// At start and after a re-list the CRDs are read at the list's revision
// before the objects (list), so the list fills their states too.

// crdEntry is what the cache serves for one stored CRD.
type crdEntry struct {
	crd *apiextensionsv1.CustomResourceDefinition
	// res are the CRD's Resources: one per served version, storage
	// version first; none unless it is Established.
	res []*Resource
}

// sortedEntries returns the entries of crds by CRD name, so a set's order
// does not depend on map order.
func sortedEntries(crds map[string]*crdEntry) []*crdEntry {
	out := make([]*crdEntry, 0, len(crds))
	for _, e := range crds {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].crd.Name < out[j].crd.Name })
	return out
}

// sameServing reports whether a and b, two states of one stored CRD, are
// served alike: nothing the Resources are built from differs.
func sameServing(a, b *apiextensionsv1.CustomResourceDefinition) bool {
	return a.UID == b.UID && registry.IsCRDEstablished(a) == registry.IsCRDEstablished(b) &&
		apiequality.Semantic.DeepEqual(a.Spec, b.Spec) &&
		apiequality.Semantic.DeepEqual(a.Status.AcceptedNames, b.Status.AcceptedNames)
}

// decodeCRD decodes a stored CRD value.
func (c *Cache) decodeCRD(ctx context.Context, kv *storev1.KeyValue) (*apiextensionsv1.CustomResourceDefinition, error) {
	value, err := c.Plain(ctx, string(kv.GetKey()), kv.GetValue())
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.opts.Codec.DecodeStorage(value, kv.GetModRevision(), crd); err != nil {
		return nil, err
	}
	return crd, nil
}

// newCustom returns the Resources of crd, empty.
func (c *Cache) newCustom(crd *apiextensionsv1.CustomResourceDefinition) []*Resource {
	var out []*Resource
	for _, res := range registry.CustomResources(crd) {
		out = append(out, newResource(res, newEncoders(c.opts.Codec, res, nil), &c.opts, c.m.forResource(res.GVR.Group, res.GVR.Version, res.GVR.Resource)))
	}
	return out
}

// dropCustom ends the watches of a CRD's Resources, once they are no
// longer published. Called by the apply goroutine only.
func (c *Cache) dropCustom(e *crdEntry) {
	for _, r := range e.res {
		r.closeWatchers(ErrGone)
	}
	// The metrics of a GVR served no more are forgotten; one served
	// again shares its series with the Resource that replaced it.
	set := c.set.Load()
	for _, r := range e.res {
		if _, ok := set.byGVR[r.res.GVR]; !ok {
			c.m.forget(r.res.GVR)
		}
	}
}

// readCRDs reads the stored CRDs at revision at. Called by list, before
// the objects are read.
func (c *Cache) readCRDs(ctx context.Context, at int64) (map[string]*apiextensionsv1.CustomResourceDefinition, error) {
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	if c.crdPrefix == "" {
		return out, nil
	}
	_, err := c.scan(ctx, c.crdPrefix, at, func(kv *storev1.KeyValue) error {
		crd, err := c.decodeCRD(ctx, kv)
		if err != nil {
			c.logger.Error("skipping an undecodable CustomResourceDefinition", "key", string(kv.GetKey()), "err", err)
			return nil
		}
		out[string(kv.GetKey())] = crd
		return nil
	})
	return out, err
}

// setCRDs makes the served custom resources those of crds (by store
// key), as list found them: the Resources of a CRD served alike are
// kept (list resets their state), the others dropped or made. Called by
// the apply goroutine only.
func (c *Cache) setCRDs(crds map[string]*apiextensionsv1.CustomResourceDefinition) {
	var dropped []*crdEntry
	for key, e := range c.crds {
		if crd, ok := crds[key]; !ok || !sameServing(e.crd, crd) {
			dropped = append(dropped, e)
			delete(c.crds, key)
		}
	}
	for key, crd := range crds {
		if e, ok := c.crds[key]; ok {
			e.crd = crd
			continue
		}
		c.crds[key] = &crdEntry{crd: crd, res: c.newCustom(crd)}
	}
	c.set.Store(newResourceSet(c.builtin, c.crds))
	for _, e := range dropped {
		c.dropCustom(e)
	}
}

// applyCRD follows a change of a stored CRD seen in the store watch at
// revision rev (crd nil: deleted), after every earlier event has been
// applied. Called by the apply goroutine only.
func (c *Cache) applyCRD(ctx context.Context, key string, crd *apiextensionsv1.CustomResourceDefinition, rev int64) error {
	old := c.crds[key]
	if old != nil && crd != nil && sameServing(old.crd, crd) {
		old.crd = crd
		return nil
	}
	// The new Resources are loaded and published before the old ones'
	// watches end: a client that sees its watch end and reads again
	// finds the new state, never the old one.
	var e *crdEntry
	if crd != nil {
		e = &crdEntry{crd: crd, res: c.newCustom(crd)}
		if err := c.loadCustom(ctx, e.res, rev); err != nil {
			return err
		}
	}
	delete(c.crds, key)
	if e != nil {
		c.crds[key] = e
	}
	c.set.Store(newResourceSet(c.builtin, c.crds))
	if old != nil {
		c.dropCustom(old)
	}
	if old != nil || crd != nil {
		c.logger.Info("custom resources changed", "crd", key, "rev", rev, "served", len(c.crds[key].resources()))
	}
	return nil
}

func (e *crdEntry) resources() []*Resource {
	if e == nil {
		return nil
	}
	return e.res
}

// loadCustom reads the state of new Resources of one CRD (all stored
// under one prefix) from the store at exactly rev and starts their
// history there. A failed read is retried until ctx ends: the store
// watch cannot go on past rev without them; a compacted rev makes the
// cache re-list.
func (c *Cache) loadCustom(ctx context.Context, rs []*Resource, rev int64) error {
	if len(rs) == 0 {
		return nil
	}
	prefix := rs[0].res.KeyPrefix("")
	backoff := 50 * time.Millisecond
	for {
		trees := map[*Resource]*tree{}
		for _, r := range rs {
			trees[r] = btree.NewG(32, lessEvent)
		}
		_, err := c.scan(ctx, prefix, rev, func(kv *storev1.KeyValue) error {
			c.insert(ctx, rs, kv, trees)
			return nil
		})
		if err == nil {
			for _, r := range rs {
				r.born = rev
				r.reset(trees[r], rev)
			}
			return nil
		}
		if status.Code(err) == codes.OutOfRange {
			return &compactedErr{rev: rev}
		}
		c.logger.Warn("reading a new custom resource's objects failed; retrying", "prefix", prefix, "rev", rev, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// scan reads every key under prefix at revision at, page by page, and
// calls fn with each.
func (c *Cache) scan(ctx context.Context, prefix string, at int64, fn func(*storev1.KeyValue) error) (int, error) {
	start := []byte(prefix)
	end := storeclient.PrefixEnd(prefix)
	n := 0
	page := c.opts.ListPageSize
	for {
		// SkipCount: the count of the keys after each page is not needed,
		// and would make the store walk the rest of the range per page.
		resp, err := c.kv.Range(ctx, &storev1.RangeRequest{Key: start, RangeEnd: end, Revision: at, Limit: page, Serializable: true, SkipCount: true})
		if status.Code(err) == codes.ResourceExhausted && page > 1 {
			// A page of large objects over gRPC's message limit: read
			// it in smaller pages.
			page /= 2
			continue
		}
		if err != nil {
			return n, fmt.Errorf("cache: list %s at %d: %w", prefix, at, err)
		}
		kvs := resp.GetKvs()
		for _, kv := range kvs {
			if err := fn(kv); err != nil {
				return n, err
			}
			n++
		}
		if !resp.GetMore() || len(kvs) == 0 {
			return n, nil
		}
		start = append(append([]byte(nil), kvs[len(kvs)-1].GetKey()...), 0)
	}
}
