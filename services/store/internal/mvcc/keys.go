package mvcc

import (
	"encoding/binary"
	"fmt"
)

// Key prefixes; see the package documentation for the layout.
var (
	// KeyspaceStart and KeyspaceEnd bound every key this package writes.
	KeyspaceStart = []byte("s/")
	KeyspaceEnd   = []byte("s0")

	recPrefix = []byte("s/e/")
	recEnd    = []byte("s/e0")
	idxPrefix = []byte("s/k/")
	idxEnd    = []byte("s/k0")
	metaKey   = []byte("s/m")
	// restoreKey is present while a snapshot restore is in progress. It is
	// outside the keyspace so that restores do not copy or delete it.
	restoreKey = []byte("x/mvcc-restoring")
)

const (
	recKeyLen = 4 + 8 + 4
	flagTomb  = 1
)

// recordKey returns "s/e/" | main | sub.
func recordKey(main int64, sub uint32) []byte {
	k := make([]byte, 0, recKeyLen)
	k = append(k, recPrefix...)
	k = binary.BigEndian.AppendUint64(k, uint64(main))
	return binary.BigEndian.AppendUint32(k, sub)
}

func parseRecordKey(k []byte) (main int64, sub uint32, err error) {
	if len(k) != recKeyLen {
		return 0, 0, fmt.Errorf("%w: record key of %d bytes", ErrCorrupt, len(k))
	}
	return int64(binary.BigEndian.Uint64(k[4:12])), binary.BigEndian.Uint32(k[12:]), nil
}

// idxKeyPrefix returns "s/k/" | esc(key) | 0x00 0x01: the common prefix of
// every index entry of key, and of no other key's entries.
func idxKeyPrefix(key []byte) []byte {
	p := make([]byte, 0, len(idxPrefix)+len(key)+2+8)
	p = append(p, idxPrefix...)
	for _, c := range key {
		if c == 0 {
			p = append(p, 0, 0xff)
		} else {
			p = append(p, c)
		}
	}
	return append(p, 0, 1)
}

// idxKey returns the index entry key of key's version at main.
func idxKey(key []byte, main int64) []byte {
	return appendInvRev(idxKeyPrefix(key), main)
}

func appendInvRev(p []byte, main int64) []byte {
	return binary.BigEndian.AppendUint64(p, ^uint64(main))
}

// idxNextKey returns the smallest index key after every entry of the user
// key whose entry prefix is p (p ends in 0x00 0x01).
func idxNextKey(p []byte) []byte {
	n := append([]byte(nil), p...)
	n[len(n)-1] = 2
	return n
}

// parseIdxKey splits an index key into its per-key prefix and main revision.
func parseIdxKey(k []byte) (prefix []byte, main int64, err error) {
	if len(k) < len(idxPrefix)+2+8 {
		return nil, 0, fmt.Errorf("%w: index key of %d bytes", ErrCorrupt, len(k))
	}
	return k[:len(k)-8], int64(^binary.BigEndian.Uint64(k[len(k)-8:])), nil
}

func idxValue(sub uint32, tomb bool) []byte {
	v := binary.BigEndian.AppendUint32(make([]byte, 0, 5), sub)
	if tomb {
		return append(v, flagTomb)
	}
	return append(v, 0)
}

func parseIdxValue(v []byte) (sub uint32, tomb bool, err error) {
	if len(v) != 5 {
		return 0, false, fmt.Errorf("%w: index value of %d bytes", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint32(v), v[4]&flagTomb != 0, nil
}

// keyBounds returns index-key bounds [lo, hi) for the user range
// [key, end) with the RangeRequest conventions: empty end is the single key,
// "\x00" is every key >= key.
func keyBounds(key, end []byte) (lo, hi []byte) {
	lo = idxKeyPrefix(key)
	switch {
	case len(end) == 0:
		hi = idxNextKey(lo)
	case len(end) == 1 && end[0] == 0:
		hi = idxEnd
	default:
		hi = idxKeyPrefix(end)
	}
	return lo, hi
}

// inRange reports whether k is in the user range [key, end) with the
// RangeRequest conventions.
func inRange(k, key, end []byte) bool {
	switch {
	case len(end) == 0:
		return string(k) == string(key)
	case len(end) == 1 && end[0] == 0:
		return string(k) >= string(key)
	default:
		return string(k) >= string(key) && string(k) < string(end)
	}
}

// InRange reports whether key k is in [key, end) with the conventions of
// RangeRequest and WatchCreateRequest.
func InRange(k, key, end []byte) bool { return inRange(k, key, end) }
