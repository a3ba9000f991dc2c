package mvcc

import (
	"encoding/binary"
	"fmt"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

const recordFormatV1 = 1

// record is one version of a key as stored in the record keyspace.
type record struct {
	key     []byte
	value   []byte
	create  int64
	mod     int64 // from the record key
	sub     uint32
	version int64
	lease   int64
	tomb    bool
}

func encodeRecord(r *record) []byte {
	b := make([]byte, 0, 2+3*binary.MaxVarintLen64+binary.MaxVarintLen32+len(r.key)+len(r.value))
	var flags byte
	if r.tomb {
		flags |= flagTomb
	}
	b = append(b, recordFormatV1, flags)
	b = binary.AppendVarint(b, r.create)
	b = binary.AppendVarint(b, r.version)
	b = binary.AppendVarint(b, r.lease)
	b = binary.AppendUvarint(b, uint64(len(r.key)))
	b = append(b, r.key...)
	return append(b, r.value...)
}

// decodeRecord decodes v (owned by pebble) into a record that owns its bytes.
func decodeRecord(main int64, sub uint32, v []byte) (*record, error) {
	if len(v) < 2 || v[0] != recordFormatV1 {
		return nil, fmt.Errorf("%w: record %d.%d", ErrCorrupt, main, sub)
	}
	r := &record{mod: main, sub: sub, tomb: v[1]&flagTomb != 0}
	v = v[2:]
	for _, dst := range []*int64{&r.create, &r.version, &r.lease} {
		x, n := binary.Varint(v)
		if n <= 0 {
			return nil, fmt.Errorf("%w: record %d.%d", ErrCorrupt, main, sub)
		}
		*dst, v = x, v[n:]
	}
	kl, n := binary.Uvarint(v)
	if n <= 0 || uint64(len(v)-n) < kl {
		return nil, fmt.Errorf("%w: record %d.%d", ErrCorrupt, main, sub)
	}
	v = v[n:]
	r.key = append([]byte(nil), v[:kl]...)
	if rest := v[kl:]; len(rest) > 0 {
		r.value = append([]byte(nil), rest...)
	}
	return r, nil
}

// kv converts a live record to its API form; keysOnly leaves the value out.
func (r *record) kv(keysOnly bool) *storev1.KeyValue {
	kv := &storev1.KeyValue{Key: r.key, CreateRevision: r.create, ModRevision: r.mod, Version: r.version, Lease: r.lease}
	if !keysOnly {
		kv.Value = r.value
	}
	return kv
}

// event converts a record to a watch event (prev attached by the caller).
func (r *record) event() *storev1.Event {
	if r.tomb {
		return &storev1.Event{Type: storev1.Event_TYPE_DELETE, Kv: &storev1.KeyValue{Key: r.key, ModRevision: r.mod}}
	}
	return &storev1.Event{Type: storev1.Event_TYPE_PUT, Kv: r.kv(false)}
}

// decodeRecordKey decodes only the user key and tombstone flag of a record.
func decodeRecordKey(v []byte) (key []byte, tomb bool, err error) {
	if len(v) < 2 || v[0] != recordFormatV1 {
		return nil, false, ErrCorrupt
	}
	tomb = v[1]&flagTomb != 0
	v = v[2:]
	for range 3 {
		_, n := binary.Varint(v)
		if n <= 0 {
			return nil, false, ErrCorrupt
		}
		v = v[n:]
	}
	kl, n := binary.Uvarint(v)
	if n <= 0 || uint64(len(v)-n) < kl {
		return nil, false, ErrCorrupt
	}
	return append([]byte(nil), v[n:n+int(kl)]...), tomb, nil
}
