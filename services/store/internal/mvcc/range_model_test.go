package mvcc

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// TestRangeMatchesModelAtEveryRevision: random puts and deletes over keys
// that share prefixes, many versions each; a range over the whole prefix,
// and one with a limit, at every revision returns exactly the model's
// live keys then, with their values and revisions; with skip_count the
// same keys and more, without the count.
func TestRangeMatchesModelAtEveryRevision(t *testing.T) {
	s := newTestStore(t)
	type kv struct {
		val                  string
		create, mod, version int64
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// Two phases: first only keys that sort last, then only keys that sort
	// before them, joining one by one. A range at a revision of the second
	// phase then meets keys with no version yet right before keys whose
	// versions are all older than the read.
	early := []string{"p/c", "p/cc", "p/d"}
	late := []string{"p/b", "p/ab", "p/a\x01", "p/a\x00b", "p/a\x00", "p/a"}
	state := map[string]kv{}
	history := []map[string]kv{{}} // history[rev] is the state at rev
	for i := range 400 {
		var k string
		if i < 150 {
			k = early[rng.IntN(len(early))]
		} else {
			k = late[rng.IntN(1+(i-150)*len(late)/250)]
		}
		var rev int64
		if _, live := state[k]; live && rng.IntN(4) == 0 {
			rev = s.del(k, "")
			delete(state, k)
		} else {
			rev = s.put(k, fmt.Sprintf("v%d", i))
			old, live := state[k]
			next := kv{val: fmt.Sprintf("v%d", i), create: rev, mod: rev, version: 1}
			if live {
				next.create, next.version = old.create, old.version+1
			}
			state[k] = next
		}
		if int(rev) != len(history) {
			t.Fatalf("revision %d after %d changes", rev, len(history)-1)
		}
		history = append(history, maps.Clone(state))
	}
	for rev := 1; rev < len(history); rev++ {
		want := slices.Sorted(maps.Keys(history[rev]))
		for _, q := range []struct {
			limit     int64
			skipCount bool
		}{{0, false}, {3, false}, {3, true}, {0, true}} {
			limit := q.limit
			resp := s.rng(&storev1.RangeRequest{Key: []byte("p/"), RangeEnd: []byte("p0"), Revision: int64(rev), Limit: limit, SkipCount: q.skipCount})
			exp := want
			if limit > 0 && int64(len(exp)) > limit {
				exp = exp[:limit]
			}
			// skip_count leaves the count out of a read with a limit only.
			wantCount := int64(len(want))
			if q.skipCount && limit > 0 {
				wantCount = 0
			}
			if len(resp.Kvs) != len(exp) || resp.Count != wantCount || resp.More != (limit > 0 && int64(len(want)) > limit) {
				t.Fatalf("rev %d limit %d skip_count %v: %d keys (count %d, more %v), want %d of %d (count %d)", rev, limit, q.skipCount, len(resp.Kvs), resp.Count, resp.More, len(exp), len(want), wantCount)
			}
			for i, got := range resp.Kvs {
				m := history[rev][exp[i]]
				if string(got.Key) != exp[i] || string(got.Value) != m.val || got.CreateRevision != m.create || got.ModRevision != m.mod || got.Version != m.version {
					t.Fatalf("rev %d: key %d is %q=%q (%d,%d,%d), want %q=%q (%d,%d,%d)", rev, i, got.Key, got.Value,
						got.CreateRevision, got.ModRevision, got.Version, exp[i], m.val, m.create, m.mod, m.version)
				}
			}
		}
	}
}
