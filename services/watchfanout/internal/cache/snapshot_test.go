package cache

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestAscendNamed: within one namespace, a name visits that object only
// (by lookup); across namespaces it falls back to the whole scan, and the
// caller's filter decides, as before.
func TestAscendNamed(t *testing.T) {
	r := testResource(t)
	var chs []change
	for i, ns := range []string{"a", "b"} {
		for j := range 50 {
			name := fmt.Sprintf("cm%02d", j)
			key := r.Registry().Key(ns, name)
			chs = append(chs, change{key: key, rev: int64(i*50 + j + 1), obj: configMap(ns, name, nil)})
		}
	}
	if err := r.applyBatch(chs, 100, time.Now()); err != nil {
		t.Fatal(err)
	}
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
