package cache

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestAscendNamed: within one namespace, a name visits that object only
// (by lookup); across namespaces it falls back to the whole scan, and the
// caller's filter decides.
func TestAscendNamed(t *testing.T) {
	r := testResource(t)
	var chs []change
	for i, ns := range []string{"a", "b"} {
		for j := range 50 {
			name := fmt.Sprintf("cm%02d", j)
			key := r.Registry().Key(ns, name)
			chs = append(chs, change{key: key, rev: int64(i*50 + j + 1), obj: storedOf(t, r, configMap(ns, name, nil))})
		}
	}
	r.applyBatch(chs, 100, time.Now())
	keys := func(snap *Snapshot, from, name string) []string {
		var out []string
		snap.AscendNamed(from, name, func(ev *Event) bool {
			out = append(out, ev.Key)
			return true
		})
		return out
	}
	one := r.Snapshot("b")
	want := r.Registry().Key("b", "cm07")
	if got := keys(one, "", "cm07"); !slices.Equal(got, []string{want}) {
		t.Fatalf("one namespace: %v, want only %s", got, want)
	}
	if got := keys(one, "", "missing"); len(got) != 0 {
		t.Fatalf("a missing name visited %v", got)
	}
	if got := keys(one, want+"\x00", "cm07"); len(got) != 0 {
		t.Fatalf("continuing past the object visited %v", got)
	}
	if got := keys(one, want, "cm07"); !slices.Equal(got, []string{want}) {
		t.Fatalf("continuing at the object: %v", got)
	}
	all := r.Snapshot("")
	if got := keys(all, "", "cm07"); len(got) != 100 {
		t.Fatalf("all namespaces visited %d objects, want the whole scan of 100", len(got))
	}
}

// TestSnapshotsShareUntilChange: snapshots of the same state, revision
// and namespace are one; a change (or another namespace) makes a new
// one, the old ones keep their state, and the shared clone is let go so
// that it pins no replaced event.
func TestSnapshotsShareUntilChange(t *testing.T) {
	r := testResource(t)
	key := func(name string) string { return r.Registry().Key("a", name) }
	r.applyBatch([]change{{key: key("x"), rev: 1, obj: storedOf(t, r, configMap("a", "x", nil))}}, 1, time.Now())
	s1, s2 := r.Snapshot("a"), r.Snapshot("a")
	if s1 != s2 {
		t.Fatal("two snapshots of one state and namespace differ")
	}
	if other := r.Snapshot("b"); other == s1 || other.tree != s1.tree {
		t.Fatal("another namespace: want its own snapshot over the same clone")
	}
	// Only the revision advances: a new snapshot, the same clone.
	r.advance(2, time.Now())
	s3 := r.Snapshot("a")
	if s3 == s1 || s3.Rev != 2 || s3.tree != s1.tree {
		t.Fatalf("after advance: snapshot %p rev %d tree shared %t", s3, s3.Rev, s3.tree == s1.tree)
	}
	r.applyBatch([]change{{key: key("y"), rev: 3, obj: storedOf(t, r, configMap("a", "y", nil))}}, 3, time.Now())
	r.mu.RLock()
	pinned := r.mu.clone != nil || r.mu.snap != nil
	r.mu.RUnlock()
	if pinned {
		t.Fatal("the shared clone outlived a change of the state")
	}
	s4 := r.Snapshot("a")
	count := func(s *Snapshot) int {
		n := 0
		s.Ascend("", func(*Event) bool { n++; return true })
		return n
	}
	if s4 == s3 || s4.tree == s3.tree || count(s4) != 2 || count(s3) != 1 || count(s1) != 1 {
		t.Fatalf("after a change: new snapshot %t, objects %d (old %d, %d)", s4 != s3, count(s4), count(s3), count(s1))
	}
	if k, ok := r.Kept("a", 3); !ok || k.tree != s4.tree {
		t.Fatal("Kept at the current revision does not share the clone")
	}
}
