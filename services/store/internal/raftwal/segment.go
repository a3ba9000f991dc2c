package raftwal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
)

// Record framing inside a segment:
//
//	+--------------+---------------------+-------------+----------------------------+
//	| len uint32LE | crc32c uint32LE     | index u64LE | EncodeLog(entry)           |
//	+--------------+---------------------+-------------+----------------------------+
//	  len counts index and entry; the CRC covers them.
//
// A segment is allocated at its full size when it is created, so the bytes
// after its last record are zeros and a zero len ends it. Whatever follows
// a record that does not verify (a torn write at a crash) is cut off when
// the segment is opened, and so is whatever follows a tail truncation:
// the space after the last record is always zeros, so a later, shorter
// record can never be followed by an old one that would verify.
const headerLen = 16

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is returned by Open for a log it cannot read back in order:
// a record that does not verify before the last segment's end, or
// segments whose indexes do not follow each other.
var ErrCorrupt = errors.New("raftwal: corrupt log")

// segment is one file of consecutive entries, base..base+len(offsets)-1.
type segment struct {
	name string
	f    vfs.File
	// rw is whether f is open for writing: the tail is; a segment that
	// was already full when the log was opened is opened read-only.
	rw   bool
	base uint64
	// offsets[i] is where entry base+i's record starts; end is where the
	// next record will be written.
	offsets []int64
	end     int64
	// configs lists the indexes of the configuration entries scan found,
	// for Open.
	configs []uint64
}

func (s *segment) last() uint64 { return s.base + uint64(len(s.offsets)) - 1 }

func (s *segment) empty() bool { return len(s.offsets) == 0 }

// recordAt reads the record of entry idx, which the segment holds.
func (s *segment) recordAt(idx uint64) ([]byte, error) {
	i := idx - s.base
	off := s.offsets[i]
	next := s.end
	if int(i)+1 < len(s.offsets) {
		next = s.offsets[i+1]
	}
	buf := make([]byte, next-off)
	if _, err := s.f.ReadAt(buf, off); err != nil {
		return nil, fmt.Errorf("raftwal: read %s at %d: %w", s.name, off, err)
	}
	// verify checks that the record's length is all of buf.
	body, index, ok := verify(buf)
	if !ok || index != idx {
		return nil, fmt.Errorf("%w: %s: entry %d at offset %d does not verify", ErrCorrupt, s.name, idx, off)
	}
	return body, nil
}

// appendRecord frames entry e onto buf, encoding it in place.
func appendRecord(buf []byte, e *raft.Log) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, headerLen)...)
	binary.LittleEndian.PutUint64(buf[start+8:], e.Index)
	buf = EncodeLog(buf, e)
	rec := buf[start:]
	binary.LittleEndian.PutUint32(rec[0:], uint32(len(rec)-8))
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:], crcTable))
	return buf
}

// verify checks a whole record; body is its entry.
func verify(rec []byte) (body []byte, index uint64, ok bool) {
	if len(rec) < headerLen {
		return nil, 0, false
	}
	n := binary.LittleEndian.Uint32(rec[0:])
	if n < 8 || int(n) != len(rec)-8 {
		return nil, 0, false
	}
	if crc32.Checksum(rec[8:], crcTable) != binary.LittleEndian.Uint32(rec[4:]) {
		return nil, 0, false
	}
	return rec[headerLen:], binary.LittleEndian.Uint64(rec[8:]), true
}

// scan reads the records of s from the start, filling offsets and end. It
// stops at a zero length (clean end), at the end of the file, or at the
// first record that does not verify or does not carry the next index;
// torn reports the last case.
func (s *segment) scan() (torn bool, err error) {
	st, err := s.f.Stat()
	if err != nil {
		return false, fmt.Errorf("raftwal: stat %s: %w", s.name, err)
	}
	size := st.Size()
	var hdr [8]byte // len and crc
	var buf []byte
	off := int64(0)
	s.offsets = s.offsets[:0]
	s.configs = s.configs[:0]
	for {
		s.end = off
		if off+8 > size {
			return off < size, nil
		}
		if _, err := s.f.ReadAt(hdr[:], off); err != nil {
			return false, fmt.Errorf("raftwal: read %s: %w", s.name, err)
		}
		n := int64(binary.LittleEndian.Uint32(hdr[0:]))
		if n == 0 && binary.LittleEndian.Uint32(hdr[4:]) == 0 {
			return false, nil
		}
		if n < 8 || off+8+n > size {
			return true, nil
		}
		if int64(cap(buf)) < 8+n {
			buf = make([]byte, 8+n)
		}
		buf = buf[:8+n]
		if _, err := s.f.ReadAt(buf, off); err != nil {
			return false, fmt.Errorf("raftwal: read %s: %w", s.name, err)
		}
		body, index, ok := verify(buf)
		if !ok || index != s.base+uint64(len(s.offsets)) {
			return true, nil
		}
		if isConfiguration(body) {
			s.configs = append(s.configs, index)
		}
		s.offsets = append(s.offsets, off)
		off += 8 + n
	}
}

// zeroFrom makes everything in f after off read as zeros and syncs it. On
// a file with a descriptor it cuts the file at off and allocates it back
// to size (at least): metadata operations, no data written. Otherwise (an
// in-memory filesystem in tests) it writes the zeros.
func zeroFrom(f vfs.File, off, size int64) error {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("raftwal: stat: %w", err)
		}
		zeros := make([]byte, 64<<10)
		for o := off; o < st.Size(); o += int64(len(zeros)) {
			if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), st.Size()-o)], o); err != nil {
				return fmt.Errorf("raftwal: zero: %w", err)
			}
		}
		return f.SyncData()
	}
	if err := unix.Ftruncate(int(fd), off); err != nil {
		return fmt.Errorf("raftwal: truncate: %w", err)
	}
	if err := allocate(f, max(off, size)); err != nil {
		return err
	}
	return f.SyncData()
}

// allocate gives f size bytes, setting the file's size too (fallocate mode
// 0, not pebble's Preallocate, which keeps the size): appends then write
// inside the file, and fdatasync has no size change to commit with each
// record, only its data (docs/benchmarks-store.md, run C).
// The vfs call comes first: it charges the space, and fails with ENOSPC, on
// filesystems that model a disk.
func allocate(f vfs.File, size int64) error {
	if err := f.Preallocate(0, size); err != nil {
		return fmt.Errorf("raftwal: allocate: %w", err)
	}
	if fd := f.Fd(); fd != vfs.InvalidFd {
		if err := unix.Fallocate(int(fd), 0, 0, size); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("raftwal: allocate: %w", err)
		}
	}
	return nil
}
