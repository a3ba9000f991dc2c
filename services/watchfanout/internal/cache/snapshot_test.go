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

// TestAscendStaysInPrefix: a namespace's snapshot visits exactly its own
// objects from the key asked for, in order, beside namespaces whose keys
// sort just before and after its prefix (a.b, a0, ab) and when it is the
// last or an empty namespace; a walk stopped early stops.
func TestAscendStaysInPrefix(t *testing.T) {
	r := testResource(t)
	var chs []change
	names := map[string][]string{}
	rev := int64(0)
	for _, ns := range []string{"a", "a.b", "a0", "ab", "b", "z"} {
		for j := range 5 {
			name := fmt.Sprintf("cm%d", j)
			rev++
			chs = append(chs, change{key: r.Registry().Key(ns, name), rev: rev, obj: storedOf(t, r, configMap(ns, name, nil))})
			names[ns] = append(names[ns], r.Registry().Key(ns, name))
		}
	}
	r.applyBatch(chs, rev, time.Now())
	keys := func(snap *Snapshot, from string, n int) []string {
		var out []string
		snap.Ascend(from, func(ev *Event) bool {
			out = append(out, ev.Key)
			return len(out) != n
		})
		return out
	}
	for _, ns := range []string{"a", "a.b", "a0", "ab", "b", "z", "c", "zz", "0"} {
		snap := r.Snapshot(ns)
		want := names[ns]
		if got := keys(snap, "", -1); !slices.Equal(got, want) {
			t.Errorf("namespace %q: %v, want %v", ns, got, want)
		}
		if len(want) == 0 {
			continue
		}
		if got := keys(snap, want[2], -1); !slices.Equal(got, want[2:]) {
			t.Errorf("namespace %q from %s: %v, want %v", ns, want[2], got, want[2:])
		}
		if got := keys(snap, want[4]+"\x00", -1); len(got) != 0 {
			t.Errorf("namespace %q past its last key: %v", ns, got)
		}
		if got := keys(snap, "", 2); !slices.Equal(got, want[:2]) {
			t.Errorf("namespace %q stopped after 2: %v", ns, got)
		}
	}
	if got := keys(r.Snapshot(""), "", -1); len(got) != int(rev) {
		t.Errorf("all namespaces: %d objects, want %d", len(got), rev)
	}
}
