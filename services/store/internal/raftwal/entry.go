package raftwal

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// Entry encoding, version 1, without the index (a segment's record header
// carries it; the legacy pebble log of package raftstable keys by it):
//
//	+------+-----------+------+---------------------+----------+------+-----------+------------+
//	| 0x01 | term uvar | type | appended-at ns svar | len uvar | data | len uvar  | extensions |
//	+------+-----------+------+---------------------+----------+------+-----------+------------+
const logFormatV1 = 1

var errCorruptEntry = errors.New("raftwal: corrupt log entry")

// EncodeLog appends the encoding of l, without its index, to buf. Segment
// records frame it (segment.go); the legacy pebble log of package
// raftstable stores it as its values.
func EncodeLog(buf []byte, l *raft.Log) []byte {
	buf = append(buf, logFormatV1)
	buf = binary.AppendUvarint(buf, l.Term)
	buf = append(buf, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	buf = binary.AppendVarint(buf, at)
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	return append(buf, l.Extensions...)
}

// DecodeLog fills out from b, except for its index; out's slices are
// copies (b is the caller's buffer).
func DecodeLog(b []byte, out *raft.Log) error {
	if len(b) < 1 || b[0] != logFormatV1 {
		return errCorruptEntry
	}
	b = b[1:]
	term, n := binary.Uvarint(b)
	if n <= 0 || len(b) < n+1 {
		return errCorruptEntry
	}
	b = b[n:]
	typ := raft.LogType(b[0])
	b = b[1:]
	at, n := binary.Varint(b)
	if n <= 0 {
		return errCorruptEntry
	}
	b = b[n:]
	data, b, ok := readBytes(b)
	if !ok {
		return errCorruptEntry
	}
	ext, b, ok := readBytes(b)
	if !ok || len(b) != 0 {
		return errCorruptEntry
	}
	*out = raft.Log{Term: term, Type: typ, Data: data, Extensions: ext}
	if at != 0 {
		out.AppendedAt = time.Unix(0, at)
	}
	return nil
}

// isConfiguration reports whether encoded entry b is a configuration
// entry, reading only its header.
func isConfiguration(b []byte) bool {
	if len(b) < 1 || b[0] != logFormatV1 {
		return false
	}
	_, n := binary.Uvarint(b[1:])
	return n > 0 && len(b) > 1+n && raft.LogType(b[1+n]) == raft.LogConfiguration
}

func readBytes(b []byte) (v, rest []byte, ok bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return nil, nil, false
	}
	b = b[n:]
	if l == 0 {
		return nil, b[l:], true
	}
	return append([]byte(nil), b[:l]...), b[l:], true
}
