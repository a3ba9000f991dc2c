package mvcc

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// liveIndex maps every live key (one whose newest version is not a
// tombstone) to its newest version, in memory, for the writer: a guarded
// write's compares and its put need the key's current version, and a seek
// for it walks every level of the LSM (an index key carries the revision,
// so bloom filters cannot rule a level out); for a new key, the seek would
// have to prove the key absent. etcd keeps the same index (its treeIndex)
// for the same reason. It costs about 200 bytes per live key (a 40-byte
// key, with the map's growth) and one scan of the key index when the store
// opens or restores a snapshot (BenchmarkLoadLiveIndex; figures in
// docs/benchmarks-store.md, run D).
//
// Invariant: the map holds exactly the live keys of the committed state,
// each with its newest version. Only the writer touches it, under
// Store.wmu: a WriteBatch records its writes and moves them in when it
// commits (a batch closed without a commit leaves nothing), and Open and
// Restore rebuild it from the key index. Compaction never removes a live
// key's newest version, so it needs no update.
type liveIndex struct {
	m map[string]version
}

// loadLiveIndex scans the key index of r for the newest version of every
// key.
func loadLiveIndex(r reader) (*liveIndex, error) {
	li := &liveIndex{m: make(map[string]version)}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: idxPrefix, UpperBound: idxEnd})
	if err != nil {
		return nil, fmt.Errorf("mvcc: open iterator: %w", err)
	}
	defer it.Close()
	var p []byte
	for ok := it.First(); ok; {
		kp, main, err := parseIdxKey(it.Key())
		if err != nil {
			return nil, err
		}
		p = append(p[:0], kp...)
		// The first entry of a key is its newest version.
		sub, tomb, err := parseIdxValue(it.Value())
		if err != nil {
			return nil, err
		}
		if !tomb {
			key, err := userKey(p)
			if err != nil {
				return nil, err
			}
			li.m[string(key)] = version{main: main, sub: sub}
		}
		// Step over the key's older versions (most keys have none).
		if ok = it.Next(); ok && inKey(it, p) {
			ok = it.SeekGE(idxNextKey(p))
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("mvcc: load key index: %w", err)
	}
	return li, nil
}

// get returns key's newest version if key is live.
func (li *liveIndex) get(key []byte) (version, bool) {
	v, ok := li.m[string(key)]
	return v, ok
}

// set records key's new newest version: a tombstone removes it.
func (li *liveIndex) set(key string, v version) {
	if v.tomb {
		delete(li.m, key)
		return
	}
	li.m[key] = v
}

// userKey reverses idxKeyPrefix: p is "s/k/" | esc(key) | 0x00 0x01.
func userKey(p []byte) ([]byte, error) {
	if len(p) < len(idxPrefix)+2 || !bytes.HasSuffix(p, []byte{0, 1}) {
		return nil, fmt.Errorf("%w: index key prefix %q", ErrCorrupt, p)
	}
	esc := p[len(idxPrefix) : len(p)-2]
	key := make([]byte, 0, len(esc))
	for i := 0; i < len(esc); i++ {
		key = append(key, esc[i])
		if esc[i] == 0 {
			if i+1 >= len(esc) || esc[i+1] != 0xff {
				return nil, fmt.Errorf("%w: index key prefix %q", ErrCorrupt, p)
			}
			i++
		}
	}
	return key, nil
}
