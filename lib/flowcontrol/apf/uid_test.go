package apf

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestFormat: UIDs and grant IDs are in the canonical 8-4-4-4-12 form of
// lowercase hex, the bytes in order.
func TestFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		var u [16]byte
		for i := range u {
			u[i] = byte(rng.UintN(256))
		}
		want := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
		if got := format(u); got != want {
			t.Fatalf("format(%v) = %s, want %s", u, got, want)
		}
	}
}

// TestGrantIDs: grant IDs are version 4 UUIDs in canonical form, distinct
// within a source and between two sources (two Controllers, as a leader
// and the one before it whose grants it adopts).
func TestGrantIDs(t *testing.T) {
	a, err := newGrantIDs()
	if err != nil {
		t.Fatal(err)
	}
	b, err := newGrantIDs()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 20000 {
		for _, id := range []string{a.newID(), b.newID()} {
			if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[14] != '4' || id[18] != '-' || id[23] != '-' || !strings.ContainsAny(id[19:20], "89ab") {
				t.Fatalf("grant id %q is not a canonical version 4 UUID", id)
			}
			if seen[id] {
				t.Fatalf("grant id %q handed out twice", id)
			}
			seen[id] = true
		}
	}
	// Consecutive IDs of one source share no prefix a caller could
	// extrapolate from: their first 8 hex digits differ.
	if x, y := a.newID(), a.newID(); x[:8] == y[:8] {
		t.Errorf("consecutive ids %s and %s share their first 8 digits", x, y)
	}
}
