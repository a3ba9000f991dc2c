package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// reader is a consistent view: a pebble snapshot (committed state) or an
// indexed batch (committed state plus the writes being applied).
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// latestRev reads the newest version of every key.
const latestRev = math.MaxInt64

// version locates one version of a key in the key index.
type version struct {
	main int64
	sub  uint32
	tomb bool
}

func getRecord(r reader, main int64, sub uint32) (*record, error) {
	v, closer, err := r.Get(recordKey(main, sub))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("%w: index points at missing record %d.%d", ErrCorrupt, main, sub)
	}
	if err != nil {
		return nil, fmt.Errorf("mvcc: get record %d.%d: %w", main, sub, err)
	}
	defer closer.Close()
	return decodeRecord(main, sub, v)
}

// inKey reports whether it is positioned on an entry of the key with
// index prefix p.
func inKey(it *pebble.Iterator, p []byte) bool {
	return it.Valid() && len(it.Key()) == len(p)+8 && bytes.HasPrefix(it.Key(), p)
}

// seekVersion positions it on the newest entry of the key with index prefix
// p whose revision is <= rev, and reports it.
func seekVersion(it *pebble.Iterator, p []byte, rev int64) (version, bool, error) {
	seek := appendInvRev(append(make([]byte, 0, len(p)+8), p...), rev)
	if !it.SeekGE(seek) || !bytes.HasPrefix(it.Key(), p) || len(it.Key()) != len(p)+8 {
		return version{}, false, it.Error()
	}
	_, main, err := parseIdxKey(it.Key())
	if err != nil {
		return version{}, false, err
	}
	sub, tomb, err := parseIdxValue(it.Value())
	if err != nil {
		return version{}, false, err
	}
	return version{main: main, sub: sub, tomb: tomb}, true, nil
}

// versionAt returns the newest version of key at or below rev.
func versionAt(r reader, key []byte, rev int64) (version, bool, error) {
	p := idxKeyPrefix(key)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: idxNextKey(p)})
	if err != nil {
		return version{}, false, fmt.Errorf("mvcc: open iterator: %w", err)
	}
	defer it.Close()
	return seekVersion(it, p, rev)
}

// liveAt returns the record of key live at rev, or nil when the key does not
// exist at rev.
func liveAt(r reader, key []byte, rev int64) (*record, error) {
	v, ok, err := versionAt(r, key, rev)
	if err != nil || !ok || v.tomb {
		return nil, err
	}
	return getRecord(r, v.main, v.sub)
}

// scan calls fn, in key order, with the newest version at or below rev of
// every key in [key, end) that is live at rev. fn returns false to stop.
func scan(r reader, key, end []byte, rev int64, fn func(v version) (bool, error)) error {
	lo, hi := keyBounds(key, end)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("mvcc: open iterator: %w", err)
	}
	defer it.Close()
	var p []byte
	for ok := it.SeekGE(lo); ok; {
		kp, main, err := parseIdxKey(it.Key())
		if err != nil {
			return err
		}
		p = append(p[:0], kp...)
		var v version
		found := true
		if main <= rev {
			// The first entry of a key is its newest version.
			sub, tomb, err := parseIdxValue(it.Value())
			if err != nil {
				return err
			}
			v = version{main: main, sub: sub, tomb: tomb}
		} else if v, found, err = seekVersion(it, p, rev); err != nil {
			return err
		}
		if found && !v.tomb {
			more, err := fn(v)
			if err != nil || !more {
				return err
			}
		}
		if len(end) == 0 {
			// One key: its bounds hold no other key's entries, so the
			// steps below would only walk its older versions.
			break
		}
		// Most keys have one version (or a few): stepping is cheaper than
		// seeking, so seek past the key's older versions only when the
		// next entry is one of them. Only from an entry of this key: a
		// seekVersion that found nothing left the iterator on the next
		// key's newest entry, which must not be stepped over.
		if inKey(it, p) {
			if ok = it.Next(); ok && inKey(it, p) {
				ok = it.SeekGE(idxNextKey(p))
			}
		} else {
			ok = it.SeekGE(idxNextKey(p))
		}
	}
	return it.Error()
}

// rangeResult is the result of rangeAt.
type rangeResult struct {
	recs  []*record
	count int64
	more  bool
}

// rangeAt reads the keys in [key, end) live at rev. limit <= 0 means no
// limit; count is the number of live keys in the range, unless skipCount
// (with a limit) stops the scan at the first key past the limit and leaves
// it 0; countOnly fetches no records.
func rangeAt(r reader, key, end []byte, rev, limit int64, countOnly, skipCount bool) (rangeResult, error) {
	skipCount = skipCount && limit > 0 && !countOnly
	var res rangeResult
	// The first record is a point read; from the second on (a range),
	// records come through one iterator. A single-key read keeps the
	// cheaper Get.
	var recs *recordReader
	defer func() {
		if recs != nil {
			recs.close()
		}
	}()
	err := scan(r, key, end, rev, func(v version) (bool, error) {
		res.count++
		if countOnly {
			return true, nil
		}
		if limit > 0 && int64(len(res.recs)) >= limit {
			res.more = true
			return !skipCount, nil
		}
		var rec *record
		var err error
		switch {
		case len(res.recs) == 0:
			rec, err = getRecord(r, v.main, v.sub)
		case recs == nil:
			if recs, err = newRecordReader(r); err == nil {
				rec, err = recs.get(v.main, v.sub)
			}
		default:
			rec, err = recs.get(v.main, v.sub)
		}
		if err != nil {
			return false, err
		}
		res.recs = append(res.recs, rec)
		return true, nil
	})
	if skipCount {
		res.count = 0
	}
	return res, err
}

// recordReader reads many records through one iterator. A point Get sets
// up a new iterator over every level each time; a range reads records in
// near-ascending revision order (keys are mostly written in order), where
// a positioned iterator's SeekGE is a short step forward.
type recordReader struct {
	it  *pebble.Iterator
	key []byte
}

func newRecordReader(r reader) (*recordReader, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: recPrefix, UpperBound: recEnd})
	if err != nil {
		return nil, fmt.Errorf("mvcc: open record iterator: %w", err)
	}
	return &recordReader{it: it, key: make([]byte, 0, recKeyLen)}, nil
}

// get reads record main.sub; the result does not alias the iterator.
func (rr *recordReader) get(main int64, sub uint32) (*record, error) {
	rr.key = append(rr.key[:0], recPrefix...)
	rr.key = binary.BigEndian.AppendUint64(rr.key, uint64(main))
	rr.key = binary.BigEndian.AppendUint32(rr.key, sub)
	if !rr.it.SeekGE(rr.key) || !bytes.Equal(rr.it.Key(), rr.key) {
		if err := rr.it.Error(); err != nil {
			return nil, fmt.Errorf("mvcc: get record %d.%d: %w", main, sub, err)
		}
		return nil, fmt.Errorf("%w: index points at missing record %d.%d", ErrCorrupt, main, sub)
	}
	return decodeRecord(main, sub, rr.it.Value())
}

func (rr *recordReader) close() { _ = rr.it.Close() }
