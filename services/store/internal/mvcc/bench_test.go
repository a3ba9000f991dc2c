package mvcc

import (
	"context"
	"fmt"
	"testing"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// BenchmarkPointRange reads one key that has many versions (a key updated
// often, within the history kept) among others: the read of a single
// object, and the compare of every guarded write.
func BenchmarkPointRange(b *testing.B) {
	ts := newTestStore(b)
	for i := range 1000 {
		ts.put(fmt.Sprintf("/k/%04d", i), "v")
		ts.put("/k/0500", fmt.Sprintf("v%d", i))
	}
	ctx := context.Background()
	for b.Loop() {
		r, err := ts.Range(ctx, &storev1.RangeRequest{Key: []byte("/k/0500"), Serializable: true})
		if err != nil || len(r.Kvs) != 1 {
			b.Fatal(err, r)
		}
	}
}
