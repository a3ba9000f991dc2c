package cache

import "sync"

// maxKeyCounts bounds the counts one state remembers: a count is one
// per page handed out with a continue token, and a state is kept at most
// Options.SnapshotTTL after its last use.
const maxKeyCounts = 4096

// keyCounts memoizes, for one immutable state of a resource, how many of
// its objects under a key prefix have a key at or after a given key. A
// chunked list reports remainingItemCount on every page, the objects
// after the page; without the count of the page before, each page would
// walk the rest of the collection to count it, so that a list of n
// objects in pages of l cost O(n²/l). The count a page leaves for the key
// it stops at is the next page's start: that page counts only itself.
// It is safe for concurrent use.
type keyCounts struct {
	mu sync.Mutex
	m  map[keyCount]int64
}

// keyCount names a count: the objects under prefix with keys >= from.
type keyCount struct{ prefix, from string }

func newKeyCounts() *keyCounts { return &keyCounts{m: map[keyCount]int64{}} }

func (c *keyCounts) get(k keyCount) (int64, bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.m[k]
	return n, ok
}

// put records a count; once maxKeyCounts are held, it records nothing
// (the pages after recount).
func (c *keyCounts) put(k keyCount, n int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) < maxKeyCounts {
		c.m[k] = n
	}
}

// CountFrom returns how many objects under the snapshot's prefix have a
// key >= from, if a list of the same state recorded it (NoteCountFrom).
func (s *Snapshot) CountFrom(from string) (int64, bool) {
	return s.counts.get(keyCount{s.prefix, max(from, s.prefix)})
}

// NoteCountFrom records that n objects under the snapshot's prefix have a
// key >= from, for the snapshots of the same state (CountFrom).
func (s *Snapshot) NoteCountFrom(from string, n int64) {
	s.counts.put(keyCount{s.prefix, max(from, s.prefix)}, n)
}
