package resources

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// keyspace is a sorted set of keys read the way the store pages them; it
// counts the reads.
type keyspace struct {
	keys  []string
	reads int
}

func newKeyspace(n int) *keyspace {
	ks := &keyspace{}
	for i := range n {
		ks.keys = append(ks.keys, fmt.Sprintf("k%05d", i))
	}
	return ks
}

func (ks *keyspace) read(_ context.Context, o storage.ListOptions) (storage.ListResult, error) {
	ks.reads++
	i := sort.SearchStrings(ks.keys, o.Start)
	rest := ks.keys[i:]
	page := storage.ListResult{Revision: 7, Count: int64(len(rest))}
	if o.SkipCount {
		page.Count = 0
	}
	if o.Limit > 0 && int64(len(rest)) > o.Limit {
		rest, page.More = rest[:o.Limit], true
	}
	for _, k := range rest {
		page.KVs = append(page.KVs, storage.KV{Key: k})
	}
	return page, nil
}

// list runs scanKVs from start and returns the keys the filter selected.
func (ks *keyspace) list(t *testing.T, start string, limit, pageSize int64, selects func(string) bool) ([]string, scanResult) {
	t.Helper()
	var got []string
	at, err := scanKVs(t.Context(), false, storage.ListOptions{Start: start}, 0, limit, pageSize, ks.read, func(kv storage.KV) (bool, error) {
		if !selects(kv.Key) {
			return false, nil
		}
		got = append(got, kv.Key)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, at
}

// TestFilteredPagesGrow: a list with a limit and a filter that drops most
// keys reads the store in growing pages, not one key per read; it returns
// exactly the limit's worth, in order, and continuing from its token
// returns the rest, each selected key once — with and without a page size.
func TestFilteredPagesGrow(t *testing.T) {
	for _, pageSize := range []int64{0, 500} {
		t.Run(fmt.Sprintf("pageSize=%d", pageSize), func(t *testing.T) {
			// Nothing matches: a limit=1 list walks 10,000 keys.
			ks := newKeyspace(10000)
			got, at := ks.list(t, "", 1, pageSize, func(string) bool { return false })
			if len(got) != 0 || at.next != "" {
				t.Fatalf("got %v, continue %q; want nothing, no continue", got, at.next)
			}
			if ks.reads > 40 {
				t.Errorf("%d store reads for a limit=1 list of 10,000 keys none selected; want pages that grow (≤ 40)", ks.reads)
			}

			// Every 7th key matches: pages of 5 follow each other and
			// together hold each selected key once.
			ks = newKeyspace(1000)
			every7 := func(k string) bool { var n int; fmt.Sscanf(k, "k%d", &n); return n%7 == 0 }
			var want []string
			for _, k := range ks.keys {
				if every7(k) {
					want = append(want, k)
				}
			}
			var all []string
			start := ""
			for pages := 0; ; pages++ {
				if pages > len(want) {
					t.Fatal("the list does not end")
				}
				got, at := ks.list(t, start, 5, pageSize, every7)
				if len(got) > 5 {
					t.Fatalf("page %d holds %d keys, over the limit of 5", pages, len(got))
				}
				if len(got) < 5 && at.next != "" {
					t.Fatalf("page %d holds %d keys and continues", pages, len(got))
				}
				all = append(all, got...)
				if at.next == "" {
					break
				}
				start = at.next
			}
			if !slices.Equal(all, want) {
				t.Fatalf("pages hold %v\nwant %v", all, want)
			}
		})
	}
}
