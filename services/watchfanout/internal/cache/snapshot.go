package cache

import (
	"strings"
	"time"
)

// Snapshot returns the current state of namespace ns ("" for all) at the
// current revision. It is O(1): the tree is cloned copy-on-write.
func (r *Resource) Snapshot(ns string) *Snapshot {
	if !r.res.Namespaced {
		ns = ""
	}
	r.mu.Lock() // Clone writes the tree's copy-on-write context.
	defer r.mu.Unlock()
	return r.snapshotLocked(ns)
}

// snapshotLocked is Snapshot with r.mu held for writing. Snapshots of
// the same state, revision and namespace are one (a Snapshot is
// immutable).
func (r *Resource) snapshotLocked(ns string) *Snapshot {
	prefix := r.res.KeyPrefix(ns)
	if s := r.mu.snap; s != nil && s.Rev == r.mu.rev && s.prefix == prefix {
		return s
	}
	t, counts := r.cloneLocked()
	s := &Snapshot{Rev: r.mu.rev, tree: t, prefix: prefix, named: ns != "" || !r.res.Namespaced, counts: counts}
	r.mu.snap = s
	return s
}

// cloneLocked returns a clone of the state and the counts lists learn of
// it, shared until the state changes. r.mu must be held for writing
// (Clone writes the tree's copy-on-write context).
func (r *Resource) cloneLocked() (*tree, *keyCounts) {
	if r.mu.clone == nil {
		r.mu.clone, r.mu.counts = r.mu.state.Clone(), newKeyCounts()
	}
	return r.mu.clone, r.mu.counts
}

// Keep retains snap (its whole resource) so a continued list can read the
// same state; it expires after Options.SnapshotTTL without use, and at
// most Options.MaxSnapshots are kept per resource.
func (r *Resource) Keep(snap *Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if k, ok := r.mu.snapshots[snap.Rev]; ok {
		k.used = now
		return
	}
	if len(r.mu.snapshots) >= r.opts.MaxSnapshots {
		var oldest int64 = -1
		for rv, k := range r.mu.snapshots {
			if oldest < 0 || k.used.Before(r.mu.snapshots[oldest].used) {
				oldest = rv
			}
		}
		delete(r.mu.snapshots, oldest)
	}
	r.mu.snapshots[snap.Rev] = &keptSnapshot{snap: &Snapshot{Rev: snap.Rev, tree: snap.tree, prefix: r.res.KeyPrefix(""), counts: snap.counts}, used: now}
}

// Kept returns the state of namespace ns at rev if a snapshot at rev is
// kept, or if rev is the current revision.
func (r *Resource) Kept(ns string, rev int64) (*Snapshot, bool) {
	if !r.res.Namespaced {
		ns = ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, ok := r.mu.snapshots[rev]; ok {
		k.used = time.Now()
		return &Snapshot{Rev: rev, tree: k.snap.tree, prefix: r.res.KeyPrefix(ns), counts: k.snap.counts}, true
	}
	if rev == r.mu.rev {
		t, counts := r.cloneLocked()
		return &Snapshot{Rev: rev, tree: t, prefix: r.res.KeyPrefix(ns), counts: counts}, true
	}
	return nil, false
}

// Snapshot is an immutable state of a resource (one namespace or all) at
// one revision. It is safe for concurrent use.
type Snapshot struct {
	// Rev is the revision of the state.
	Rev    int64
	tree   *tree
	prefix string
	// named is true when an object's key is prefix + its name: the
	// snapshot covers one namespace, or a cluster-scoped resource.
	named bool
	// counts are shared by the snapshots of the same state (keyCounts).
	counts *keyCounts
}

// Prefix returns the key prefix the snapshot covers.
func (s *Snapshot) Prefix() string { return s.prefix }

// Ascend calls fn for each object with key >= from (from "" is the start)
// under the snapshot's prefix, in key order, until fn returns false.
//
// The walk is bounded by the last object under the prefix, found once: every
// key between the prefix and that object's key has the prefix, so the walk
// stops on reaching that object (one pointer compare per object) rather
// than comparing each key with the prefix.
func (s *Snapshot) Ascend(from string, fn func(*Event) bool) {
	if from < s.prefix {
		from = s.prefix
	}
	last := s.last()
	if last == nil || from > last.Key {
		return
	}
	s.tree.AscendGreaterOrEqual(&Event{Key: from}, func(ev *Event) bool {
		return fn(ev) && ev != last
	})
}

// last returns the object with the greatest key under the snapshot's
// prefix, or nil when there is none.
func (s *Snapshot) last() *Event {
	var last *Event
	end, ok := prefixEnd(s.prefix)
	if !ok {
		last, _ = s.tree.Max()
	} else {
		// The greatest key < end: the first item of the descent other
		// than one whose key is end itself.
		s.tree.DescendLessOrEqual(&Event{Key: end}, func(ev *Event) bool {
			if ev.Key == end {
				return true
			}
			last = ev
			return false
		})
	}
	if last == nil || !strings.HasPrefix(last.Key, s.prefix) {
		return nil
	}
	return last
}

// prefixEnd returns the least key greater than every key with prefix p,
// and false when there is none (p is empty or all 0xff bytes).
func prefixEnd(p string) (string, bool) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] < 0xff {
			return p[:i] + string([]byte{p[i] + 1}), true
		}
	}
	return "", false
}

// AscendNamed is Ascend over the objects called name only. Where the
// snapshot covers one namespace (or a cluster-scoped resource) that is one
// lookup, not a scan: a watch or list of one object by
// fieldSelector=metadata.name (client-go's informer for one object,
// kubectl get -w NAME) costs the same in a namespace of 10,000 objects as
// in an empty one.
func (s *Snapshot) AscendNamed(from, name string, fn func(*Event) bool) {
	if !s.named {
		s.Ascend(from, fn)
		return
	}
	key := s.prefix + name
	if from > key {
		return
	}
	if ev, ok := s.tree.Get(&Event{Key: key}); ok {
		fn(ev)
	}
}
