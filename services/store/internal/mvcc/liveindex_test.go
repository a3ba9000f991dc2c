package mvcc

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// TestGuardedWritesMatchModel drives guarded writes as the gateway sends
// them (create if absent, update or delete if the mod revision is equal)
// through batches of several transactions, some closed without a commit,
// with compactions and a snapshot restore in between, over keys that
// contain 0x00 bytes. Every compare's outcome and every put's create
// revision and version must be what a model of the committed state says,
// and the writer's index of live keys must be the one loaded from the
// store after every commit.
func TestGuardedWritesMatchModel(t *testing.T) {
	s := newTestStore(t)
	type kv struct{ create, mod, version int64 }
	state := map[string]kv{}
	keys := []string{"a", "b", "c", "d", "e\x00", "e", "\x00f\x00\x00"}
	rng := rand.New(rand.NewPCG(3, 4))
	const (
		M  = storev1.Compare_TARGET_MOD
		C  = storev1.Compare_TARGET_CREATE
		V  = storev1.Compare_TARGET_VERSION
		EQ = storev1.Compare_RESULT_EQUAL
	)
	var snapshot []byte
	var snapState map[string]kv
	for round := range 600 {
		w := s.NewWriteBatch()
		next := map[string]kv{}
		for k, v := range state {
			next[k] = v
		}
		rev := w.Rev()
		for range 1 + rng.IntN(4) {
			k := keys[rng.IntN(len(keys))]
			cur, live := next[k]
			// Guess the mod revision right most of the time.
			guess := cur.mod
			if rng.IntN(4) == 0 {
				guess += int64(rng.IntN(3)) - 1
			}
			var req *storev1.TxnRequest
			var want bool
			switch op := rng.IntN(4); {
			case op == 0:
				req = &storev1.TxnRequest{Compare: []*storev1.Compare{cmp(k, C, EQ, int64(0))}, Success: []*storev1.RequestOp{putOp(k, "v")}}
				want = !live
			case op == 1 && live:
				req = &storev1.TxnRequest{Compare: []*storev1.Compare{cmp(k, M, EQ, guess)}, Success: []*storev1.RequestOp{delOp(k, "")}}
				want = guess == cur.mod
			case op == 2:
				req = &storev1.TxnRequest{Compare: []*storev1.Compare{cmp(k, V, EQ, cur.version)}, Success: []*storev1.RequestOp{putOp(k, "v")}}
				want = true
			default:
				req = &storev1.TxnRequest{Compare: []*storev1.Compare{cmp(k, M, EQ, guess)}, Success: []*storev1.RequestOp{putOp(k, "v")}}
				want = guess == cur.mod
			}
			resp, err := w.Txn(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Succeeded != want {
				t.Fatalf("round %d: %v on %q (model %+v live %v): succeeded %v, want %v", round, req.Compare[0], k, cur, live, resp.Succeeded, want)
			}
			if !want {
				continue
			}
			rev++
			if req.Success[0].GetRequestDeleteRange() != nil {
				delete(next, k)
				continue
			}
			v := kv{create: rev, mod: rev, version: 1}
			if live {
				v.create, v.version = cur.create, cur.version+1
			}
			next[k] = v
		}
		if rng.IntN(5) == 0 {
			w.Close() // discarded: the model keeps the committed state
			continue
		}
		s.applied++
		if _, err := w.Commit(s.applied, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		w.Close()
		state = next
		loaded, err := loadLiveIndex(s.db)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(loaded.m, s.live.m) || len(loaded.m) != len(state) {
			t.Fatalf("round %d: live index %v, loaded from the store %v, model %v", round, s.live.m, loaded.m, state)
		}
		for k, want := range state {
			got := s.get(k, 0)
			if got == nil || got.CreateRevision != want.create || got.ModRevision != want.mod || got.Version != want.version {
				t.Fatalf("round %d: %q = %v, want %+v", round, k, got, want)
			}
		}
		switch {
		case round%50 == 25 && s.Rev() > s.CompactRev():
			if err := s.compact(s.Rev()); err != nil {
				t.Fatal(err)
			}
		case round == 200:
			var buf bytes.Buffer
			snap := s.NewSnapshot()
			if _, err := snap.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			snap.Close()
			snapshot, snapState = buf.Bytes(), state
		case round == 400:
			// Back to round 200's state: the cache must not answer with
			// the versions written since.
			if err := s.Restore(bytes.NewReader(snapshot)); err != nil {
				t.Fatal(err)
			}
			state = snapState
		}
	}
	t.Logf("final revision %d, %d live keys", s.Rev(), len(state))
}
