package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

// TestChunkedListCounts: a list read in chunks through the List API
// reports on every chunk the items after it, and every chunk holds the
// state of the first one's revision, while objects are created and
// deleted between chunks; a second list of the same state (its chunks
// count from what the first recorded) gets the same chunks and counts.
// Counts are what kube-apiserver reports: remainingItemCount on every
// chunk but the last.
func TestChunkedListCounts(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{})
	var want []string
	for i := range 7 {
		name := fmt.Sprintf("cm%d", i)
		e.put("cc", name, nil)
		want = append(want, name)
	}
	e.put("other", "cm", nil)
	rev := e.put("cc", "cm7", nil)
	want = append(want, "cm7")
	eventually(t, "the cache reaches the last write", func() bool { return e.cache.Rev() >= rev })

	type chunk struct {
		names     []string
		remaining *int64
		rv        string
	}
	// list reads the namespace in chunks of 3, running between(i) after
	// chunk i.
	list := func(between func(i int)) []chunk {
		var out []chunk
		cont := ""
		for i := 0; ; i++ {
			resp, err := e.client.List(t.Context(), &watchv1.ListRequest{
				Resource: &watchv1.Resource{Version: "v1", Resource: "configmaps"}, Namespace: "cc",
				Limit: 3, ContinueToken: cont, Encoding: watchv1.Encoding_ENCODING_JSON,
			})
			if err != nil {
				t.Fatalf("chunk %d: %v", i, err)
			}
			var l struct {
				Items []struct {
					Metadata struct{ Name string } `json:"metadata"`
				} `json:"items"`
			}
			if err := json.Unmarshal(resp.GetData(), &l); err != nil {
				t.Fatalf("chunk %d: %v", i, err)
			}
			c := chunk{remaining: resp.RemainingItemCount, rv: resp.GetResourceVersion()}
			for _, it := range l.Items {
				c.names = append(c.names, it.Metadata.Name)
			}
			out = append(out, c)
			if cont = resp.GetContinueToken(); cont == "" {
				return out
			}
			if between != nil {
				between(i)
			}
		}
	}
	check := func(what string, got []chunk) {
		t.Helper()
		wantCounts := []int64{5, 2}
		var names []string
		for i, c := range got {
			names = append(names, c.names...)
			if c.rv != got[0].rv {
				t.Errorf("%s: chunk %d at resourceVersion %s, the first at %s", what, i, c.rv, got[0].rv)
			}
			switch {
			case i < len(wantCounts) && c.remaining == nil:
				t.Errorf("%s: chunk %d has no remainingItemCount, want %d", what, i, wantCounts[i])
			case i < len(wantCounts) && *c.remaining != wantCounts[i]:
				t.Errorf("%s: chunk %d remainingItemCount %d, want %d", what, i, *c.remaining, wantCounts[i])
			case i >= len(wantCounts) && c.remaining != nil:
				t.Errorf("%s: last chunk %d remainingItemCount %d, want none", what, i, *c.remaining)
			}
		}
		if !slices.Equal(names, want) || len(got) != 3 {
			t.Errorf("%s: %d chunks of %v, want 3 of %v", what, len(got), names, want)
		}
	}
	check("first list", list(nil))
	check("the same state again", list(nil))
	check("with writes between chunks", list(func(i int) {
		e.put("cc", fmt.Sprintf("new%d", i), nil)
		e.del("cc", fmt.Sprintf("cm%d", 6-i))
	}))
}
