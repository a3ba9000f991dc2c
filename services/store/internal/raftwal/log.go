// Package raftwal keeps the raft log in its own append-only segment
// files, next to the pebble DB that holds the state machine.
//
// # Why its own files
//
// In the state machine's pebble DB, every append would be a pebble commit
// with a synced WAL write shared with the state machine's batches, and
// every entry would be written twice more (flushed into an sstable, then
// compacted) before raft deletes it. Here an append is one write inside a
// preallocated segment and one fdatasync, and a snapshot's truncation
// deletes whole files. docs/benchmarks-store.md (run C) has the figures.
//
// hashicorp/raft-wal, which works the same way, is not used: its v0.4.0
// (the newest the module proxy has) marks the tail segment sealed on a
// tail truncation without writing its index, and the member then cannot
// restart ("sealed segment has no index block", raft-wal issue #31).
//
// A data directory whose log is still in pebble (package raftstable's
// legacy log) has its entries moved here at start (Migrate).
//
// # Durability
//
// StoreLogs returns only after its entries are synced, except on a member
// that is a non-voter (Options.LocalID, below). The state machine commits
// to pebble without syncing: a crash may lose its last batches, and raft
// replays them from this log, as the FSM skips entries at or below the
// applied index it persisted (package fsm). Raft deletes entries only up to
// a snapshot's index, and the snapshot's Persist syncs the pebble DB first,
// so the state covering deleted entries is durable.
//
// A non-voter's log is part of no quorum: the leader counts its
// acknowledgements for nothing, and if a crash takes the tail of its log
// the leader sends those entries again (the member answers with its
// shorter log and the leader backs up). So while the latest configuration
// the log knows lists the local member as a non-voter among an odd number
// of voters, appends are written without fdatasync. That configuration is the newest of the
// configuration entries the log holds and the configuration of the newest
// snapshot (NoteSnapshotConfiguration), as raft itself determines it.
// Unknown (no LocalID, no configuration yet, the member absent from it, an
// entry that does not decode) counts as a voter. The rules that keep the
// voters' guarantees:
//
//   - A batch holding a configuration entry is synced, with everything
//     written unsynced before it: in hashicorp/raft a configuration takes
//     effect when it is appended, and the leader counts the member's
//     acknowledgement of the entry that makes it a voter (and of every
//     later one) in the new configuration.
//   - Only among an odd number of voters: one acknowledgement of entries
//     written unsynced can still reach the leader after it appended the
//     configuration that promotes the member (replication sends one
//     request at a time), and counts in the new configuration. From n odd
//     voters a quorum of n+1 less the member is a quorum of the n, which
//     had synced those entries; from n even it is not (4 to 5: two of the
//     old voters and the member, which a crash can empty). The member's
//     view may lag the leader's, but raft appends a configuration only
//     once the one before it committed, so entries before a configuration
//     the member has not seen are synced on a quorum of it already, and
//     every quorum of the next one meets that quorum.
//   - Every append while the member is a voter is synced; a change of the
//     known configuration that makes it one (a snapshot's, or a tail
//     truncation that removes the entry that made it a non-voter) first
//     syncs what was written unsynced.
//   - Unsynced data is only ever in the tail segment: before a new segment
//     is started, the one it follows is synced. A crash therefore leaves
//     every segment but the last whole, and the last one a prefix of its
//     records (a record the disk lost reads as zeros or does not verify,
//     and Open cuts the segment there and zeros what follows, whatever of
//     the later records did reach the disk).
//   - Sync syncs what was written unsynced; raftnode calls it before a
//     snapshot becomes durable, so the log never ends, after a crash,
//     before the newest snapshot's index (raft would then append after a
//     gap).
//
// The FSM's applied index may then be ahead of the log after a crash (the
// pebble DB and the log lose their unsynced tails independently); the
// entries between are committed ones the leader sends again, and the FSM
// skips them.
//
// A failed fsync is fatal (Options.Fatal): the kernel may have dropped the
// dirty pages, so a retried fsync could "succeed" without them (pebble,
// whose WAL lives next to this log, treats it the same way).
//
// # Concurrency
//
// raft appends from one goroutine and truncates the head from its
// snapshot goroutine; writeMu orders writers, and mu guards the segment
// list for readers, which never wait for an fsync.
package raftwal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-cp/meridian/lib/telemetry"

	"github.com/meridian-cp/meridian/services/store/internal/disk"
)

// DefaultSegmentBytes is the size a segment is allocated at.
const DefaultSegmentBytes = 64 << 20

const segmentSuffix = ".seg"

// Options configure Open.
type Options struct {
	// Dir holds the segments; created if missing.
	Dir string
	// FS is the filesystem; nil is vfs.Default. It must give file
	// descriptors (Fd) for the files it creates.
	FS vfs.FS
	// SegmentBytes is the size a segment is allocated at; 0 is
	// DefaultSegmentBytes. A batch larger than that gets a segment of its
	// own, as large as it needs.
	SegmentBytes int64
	// ObserveSync, if set, receives the duration of every synced append
	// (write and fdatasync).
	ObserveSync func(time.Duration)
	// Fatal is called with the error of a failed fsync and must not
	// return; nil panics.
	Fatal func(error)
	// TracerProvider records a "store.wal.append" span (write and
	// fdatasync) for every appended entry whose Extensions hold a sampled
	// W3C traceparent (what raftnode puts there); nil: none.
	TracerProvider trace.TracerProvider
	// LocalID is the local member's raft server id: while the latest
	// configuration the log knows lists it as a non-voter, appends are
	// not synced (see "Durability"). Empty: every append is synced.
	LocalID string
}

// Log is a raft.LogStore and raft.MonotonicLogStore.
type Log struct {
	fs      vfs.FS
	dir     string
	size    int64
	observe func(time.Duration)
	fatal   func(error)
	tracer  trace.TracerProvider

	// writeMu is held by StoreLogs and DeleteRange, mu by whoever changes
	// the fields below (under writeMu) and, for reading, by GetLog.
	writeMu sync.Mutex
	mu      sync.RWMutex
	segs    []*segment // in index order; the last is appended to
	// first is the first index raft may read: after a head truncation it
	// can be past the first entry of segs[0], which stays until all of
	// its entries are truncated.
	first, last uint64
	closed      bool

	// StoreLogs' encoding buffer and record offsets, reused across
	// appends, under writeMu.
	buf  []byte
	offs []int64

	// The suffrage the appends follow (see "Durability"), under writeMu:
	// local is Options.LocalID; cfgs are the configuration entries the
	// log holds, in index order, and snapCfg is the newest snapshot's
	// configuration; dirty is the segment (the tail) holding appends not
	// yet synced, nil when there are none.
	local   raft.ServerID
	cfgs    []suffrage
	snapCfg suffrage
	dirty   *segment
}

// suffrage is the local member's suffrage in the configuration at index
// (0: none known).
type suffrage struct {
	index    uint64
	nonvoter bool
}

var (
	_ raft.LogStore          = (*Log)(nil)
	_ raft.MonotonicLogStore = (*Log)(nil)
)

// Open opens the log in o.Dir, creating it if needed, and reads every
// segment back.
func Open(o Options) (*Log, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.Fatal == nil {
		o.Fatal = func(err error) { panic(err) }
	}
	l := &Log{fs: o.FS, dir: o.Dir, size: o.SegmentBytes, observe: o.ObserveSync, fatal: o.Fatal, tracer: o.TracerProvider,
		local: raft.ServerID(o.LocalID)}
	if err := l.mkdir(); err != nil {
		return nil, err
	}
	if err := l.load(); err != nil {
		l.closeFiles()
		return nil, err
	}
	return l, nil
}

// mkdir creates the log's directory and the missing directories above it,
// and makes their entries durable: a crash must not take a directory, and
// the segments in it, away.
func (l *Log) mkdir() error {
	existing := l.dir
	for {
		if _, err := l.fs.Stat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		existing = parent
	}
	if err := l.fs.MkdirAll(l.dir, 0o700); err != nil {
		return fmt.Errorf("raftwal: %w", err)
	}
	for d := l.dir; d != existing; d = filepath.Dir(d) {
		if err := disk.SyncDir(l.fs, filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// load opens the segments in index order and checks that they follow each
// other. Only the last may end in a torn record; it is cut there.
func (l *Log) load() error {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return fmt.Errorf("raftwal: list %s: %w", l.dir, err)
	}
	type named struct {
		base uint64
		name string
	}
	var found []named
	for _, n := range names {
		if !strings.HasSuffix(n, segmentSuffix) {
			continue
		}
		base, err := strconv.ParseUint(strings.TrimSuffix(n, segmentSuffix), 16, 64)
		if err != nil {
			continue
		}
		found = append(found, named{base, n})
	}
	sort.Slice(found, func(i, j int) bool { return found[i].base < found[j].base })
	for i, fn := range found {
		lastSeg := i == len(found)-1
		path := filepath.Join(l.dir, fn.name)
		var f vfs.File
		if lastSeg {
			f, err = l.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
		} else {
			f, err = l.fs.Open(path)
		}
		if err != nil {
			return fmt.Errorf("raftwal: open %s: %w", path, err)
		}
		s := &segment{name: fn.name, f: f, rw: lastSeg, base: fn.base}
		l.segs = append(l.segs, s)
		torn, err := s.scan()
		if err != nil {
			return err
		}
		if !lastSeg && (torn || s.empty()) {
			return fmt.Errorf("%w: %s ends at entry %d (offset %d) but later segments follow", ErrCorrupt, fn.name, s.base+uint64(len(s.offsets)), s.end)
		}
		if i > 0 && l.segs[i-1].last()+1 != s.base {
			return fmt.Errorf("%w: %s starts at %d, the previous segment ends at %d", ErrCorrupt, fn.name, s.base, l.segs[i-1].last())
		}
		if lastSeg {
			// Zeros after the last record, whatever was there (see the
			// record framing in segment.go).
			if err := zeroFrom(f, s.end, l.size); err != nil {
				return fmt.Errorf("raftwal: %s: %w", fn.name, err)
			}
		}
	}
	if len(l.segs) > 0 {
		l.first = l.segs[0].base
		l.last = l.segs[len(l.segs)-1].last()
		if l.segs[len(l.segs)-1].empty() && len(l.segs) == 1 {
			l.first, l.last = 0, 0
		}
	}
	if l.local != "" {
		for _, s := range l.segs {
			for _, idx := range s.configs {
				body, err := s.recordAt(idx)
				if err != nil {
					return err
				}
				var e raft.Log
				if err := DecodeLog(body, &e); err != nil {
					return fmt.Errorf("raftwal: entry %d: %w", idx, err)
				}
				e.Index = idx
				l.cfgs = append(l.cfgs, l.suffrageIn(&e))
			}
		}
	}
	for _, s := range l.segs {
		s.configs = nil
	}
	return nil
}

// FirstIndex returns the first index, 0 for an empty log.
func (l *Log) FirstIndex() (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.first, nil
}

// LastIndex returns the last index, 0 for an empty log.
func (l *Log) LastIndex() (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.last, nil
}

// IsMonotonic reports that the log never holds gaps.
func (l *Log) IsMonotonic() bool { return true }

// GetLog reads entry index into out; raft.ErrLogNotFound if absent.
func (l *Log) GetLog(index uint64, out *raft.Log) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return errors.New("raftwal: closed")
	}
	if l.first == 0 || index < l.first || index > l.last {
		return raft.ErrLogNotFound
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > index }) - 1
	body, err := l.segs[i].recordAt(index)
	if err != nil {
		return err
	}
	if err := DecodeLog(body, out); err != nil {
		return fmt.Errorf("raftwal: entry %d: %w", index, err)
	}
	out.Index = index
	return nil
}

// StoreLog appends one entry.
func (l *Log) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

// StoreLogs appends consecutive entries, the first following the last
// index (any index for an empty log), and syncs them unless the local
// member is a non-voter (see "Durability").
func (l *Log) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	start := time.Now()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.RLock()
	last, closed := l.last, l.closed
	var tail *segment
	if len(l.segs) > 0 {
		tail = l.segs[len(l.segs)-1]
	}
	l.mu.RUnlock()
	if closed {
		return errors.New("raftwal: closed")
	}
	if last != 0 && logs[0].Index != last+1 {
		return fmt.Errorf("raftwal: append of entry %d after %d would leave a gap", logs[0].Index, last)
	}
	buf, offs := l.buf[:0], l.offs[:0]
	configs := false
	for i, e := range logs {
		if e.Index != logs[0].Index+uint64(i) {
			return fmt.Errorf("raftwal: append: entry %d follows %d", e.Index, logs[0].Index+uint64(i)-1)
		}
		offs = append(offs, int64(len(buf)))
		buf = appendRecord(buf, e)
		configs = configs || e.Type == raft.LogConfiguration
	}
	l.buf, l.offs = buf[:0], offs[:0]
	sync := configs || !l.nonvoter()

	// A new segment when there is none, when the log was emptied (its
	// segment's base no longer fits), or when the batch does not fit.
	if tail == nil || (tail.empty() && tail.base != logs[0].Index) || (!tail.empty() && tail.end+int64(len(buf)) > l.size) {
		// Only the tail may hold unsynced appends.
		if err := l.syncDirty(); err != nil {
			return err
		}
		s, err := l.createSegment(logs[0].Index, max(l.size, int64(len(buf))))
		if err != nil {
			return err
		}
		tail = s
	}
	if _, err := tail.f.WriteAt(buf, tail.end); err != nil {
		// Nothing was acknowledged; leave zeros behind, as after a crash.
		if zerr := zeroFrom(tail.f, tail.end, l.size); zerr != nil {
			l.fatal(fmt.Errorf("raftwal: %s: failed append could not be undone: %w (after %w)", tail.name, zerr, err))
		}
		if l.dirty == tail {
			l.dirty = nil // zeroFrom synced it
		}
		return fmt.Errorf("raftwal: append to %s: %w", tail.name, err)
	}
	if sync {
		// The segment's earlier unsynced appends go with this one.
		if err := tail.f.SyncData(); err != nil {
			err = fmt.Errorf("raftwal: fsync of %s failed: %w", tail.name, err)
			l.fatal(err)
			return err
		}
		l.dirty = nil
	} else {
		l.dirty = tail
	}

	l.mu.Lock()
	if len(l.segs) == 0 || l.segs[len(l.segs)-1] != tail {
		l.segs = append(l.segs, tail)
	}
	for _, o := range offs {
		tail.offsets = append(tail.offsets, tail.end+o)
	}
	tail.end += int64(len(buf))
	if l.first == 0 {
		l.first = logs[0].Index
	}
	l.last = logs[len(logs)-1].Index
	l.mu.Unlock()
	if configs && l.local != "" {
		for _, e := range logs {
			if e.Type == raft.LogConfiguration {
				l.cfgs = append(l.cfgs, l.suffrageIn(e))
			}
		}
	}
	if sync && l.observe != nil {
		l.observe(time.Since(start))
	}
	l.traceAppend(logs, start, len(buf), sync)
	return nil
}

// nonvoter reports whether the latest configuration the log knows lists
// the local member as a non-voter. Called under writeMu.
func (l *Log) nonvoter() bool {
	if l.local == "" {
		return false
	}
	latest := l.snapCfg
	if n := len(l.cfgs); n > 0 && l.cfgs[n-1].index > latest.index {
		latest = l.cfgs[n-1]
	}
	return latest.index > 0 && latest.nonvoter
}

// suffrageIn returns the local member's suffrage in configuration entry
// e; one that does not decode counts as a voter.
func (l *Log) suffrageIn(e *raft.Log) suffrage {
	cfg, ok := decodeConfiguration(e.Data)
	return suffrage{index: e.Index, nonvoter: ok && l.isNonvoter(cfg)}
}

// isNonvoter reports whether cfg lists the local member as a non-voter
// among an odd number of voters: only then may its appends skip the sync
// (see "Durability": a promotion from an even number of voters would
// count an unsynced acknowledgement toward a quorum that needs it).
func (l *Log) isNonvoter(cfg raft.Configuration) bool {
	nonvoter, voters := false, 0
	for _, s := range cfg.Servers {
		switch {
		case s.ID == l.local:
			nonvoter = s.Suffrage == raft.Nonvoter
		case s.Suffrage == raft.Voter:
			voters++
		}
	}
	return nonvoter && voters%2 == 1
}

// decodeConfiguration decodes a configuration entry's data;
// raft.DecodeConfiguration panics on bad input.
func decodeConfiguration(b []byte) (cfg raft.Configuration, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return raft.DecodeConfiguration(b), true
}

// NoteSnapshotConfiguration records the configuration of a snapshot that
// became durable (index is its configuration's index); the log follows
// the newest one (see "Durability"). If the local member is then a voter,
// what was written unsynced is synced first.
func (l *Log) NoteSnapshotConfiguration(cfg raft.Configuration, index uint64) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.local == "" || index < l.snapCfg.index {
		return nil
	}
	l.snapCfg = suffrage{index: index, nonvoter: l.isNonvoter(cfg)}
	if !l.nonvoter() {
		return l.syncDirty()
	}
	return nil
}

// Sync syncs the appends written unsynced, if any.
func (l *Log) Sync() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.closed {
		return errors.New("raftwal: closed")
	}
	return l.syncDirty()
}

// syncDirty syncs the segment holding unsynced appends. Called under
// writeMu.
func (l *Log) syncDirty() error {
	if l.dirty == nil {
		return nil
	}
	start := time.Now()
	if err := l.dirty.f.SyncData(); err != nil {
		err = fmt.Errorf("raftwal: fsync of %s failed: %w", l.dirty.name, err)
		l.fatal(err)
		return err
	}
	l.dirty = nil
	if l.observe != nil {
		l.observe(time.Since(start))
	}
	return nil
}

// traceAppend records the append of the traced entries among logs, which
// began at start and wrote n bytes, synced or not.
func (l *Log) traceAppend(logs []*raft.Log, start time.Time, n int, synced bool) {
	if l.tracer == nil {
		return
	}
	var end time.Time
	for _, e := range logs {
		if len(e.Extensions) == 0 {
			continue
		}
		_, span := telemetry.StartRemoteSpan(context.Background(), l.tracer, string(e.Extensions), telemetry.ScopeStore, "store.wal.append", trace.WithTimestamp(start))
		if !span.IsRecording() {
			continue
		}
		if end.IsZero() {
			end = time.Now()
		}
		span.SetAttributes(attribute.Int64("raft.index", int64(e.Index)), attribute.Int("raft.batch_entries", len(logs)), attribute.Int("raft.batch_bytes", n), attribute.Bool("fsync", synced))
		span.End(trace.WithTimestamp(end))
	}
}

// createSegment creates and allocates the segment for entries from base,
// and makes it durable (its size and its directory entry), so that
// appends need only fdatasync. An empty tail segment is replaced. Called
// under writeMu.
func (l *Log) createSegment(base uint64, size int64) (*segment, error) {
	l.mu.Lock()
	if n := len(l.segs); n > 0 && l.segs[n-1].empty() {
		old := l.segs[n-1]
		l.segs = l.segs[:n-1]
		l.mu.Unlock()
		if err := l.removeSegment(old); err != nil {
			return nil, err
		}
	} else {
		l.mu.Unlock()
	}
	name := fmt.Sprintf("%016x%s", base, segmentSuffix)
	path := filepath.Join(l.dir, name)
	f, err := l.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("raftwal: create %s: %w", path, err)
	}
	fail := func(err error) (*segment, error) {
		_ = f.Close()
		_ = l.fs.Remove(path)
		return nil, fmt.Errorf("raftwal: create %s: %w", path, err)
	}
	if err := allocate(f, size); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := l.syncDir(); err != nil {
		return fail(err)
	}
	return &segment{name: name, f: f, rw: true, base: base}, nil
}

func (l *Log) removeSegment(s *segment) error {
	_ = s.f.Close()
	if err := l.fs.Remove(filepath.Join(l.dir, s.name)); err != nil {
		return fmt.Errorf("raftwal: remove %s: %w", s.name, err)
	}
	return l.syncDir()
}

func (l *Log) syncDir() error { return disk.SyncDir(l.fs, l.dir) }

// DeleteRange deletes entries lo..hi, inclusive. raft deletes a prefix
// (after a snapshot), a suffix (a follower's entries that conflict with
// the leader's) or everything (after installing a snapshot); a range
// strictly inside the log is refused.
func (l *Log) DeleteRange(lo, hi uint64) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	first, last := l.first, l.last
	l.mu.Unlock()
	switch {
	case first == 0 || hi < first || lo > last:
		return nil
	case lo <= first && hi >= last:
		return l.truncateHead(last + 1)
	case lo <= first:
		return l.truncateHead(hi + 1)
	case hi >= last:
		return l.truncateTail(lo)
	default:
		return fmt.Errorf("raftwal: delete of %d..%d inside the log %d..%d", lo, hi, first, last)
	}
}

// truncateHead makes newFirst the first index (past the last: the log is
// emptied), deleting the segments that hold only earlier entries.
func (l *Log) truncateHead(newFirst uint64) error {
	l.mu.Lock()
	var drop []*segment
	for len(l.segs) > 0 && (l.segs[0].empty() || l.segs[0].last() < newFirst) {
		drop = append(drop, l.segs[0])
		l.segs = l.segs[1:]
	}
	if len(l.segs) == 0 {
		l.first, l.last = 0, 0
		// raft empties the log after installing a snapshot, whose
		// configuration (NoteSnapshotConfiguration) is then the latest.
		l.cfgs = nil
	} else {
		l.first = newFirst
	}
	l.mu.Unlock()
	for _, s := range drop {
		if l.dirty == s {
			l.dirty = nil
		}
		if err := l.removeSegment(s); err != nil {
			return err
		}
	}
	return nil
}

// truncateTail deletes entries from idx on.
func (l *Log) truncateTail(idx uint64) error {
	l.mu.Lock()
	var drop []*segment
	for len(l.segs) > 0 && l.segs[len(l.segs)-1].base > idx {
		drop = append(drop, l.segs[len(l.segs)-1])
		l.segs = l.segs[:len(l.segs)-1]
	}
	s := l.segs[len(l.segs)-1] // holds idx: first < idx <= last
	off := s.offsets[idx-s.base]
	s.offsets = s.offsets[:idx-s.base]
	s.end = off
	l.last = idx - 1
	l.mu.Unlock()
	for len(l.cfgs) > 0 && l.cfgs[len(l.cfgs)-1].index >= idx {
		l.cfgs = l.cfgs[:len(l.cfgs)-1]
	}
	for _, d := range drop {
		if l.dirty == d {
			l.dirty = nil
		}
		if err := l.removeSegment(d); err != nil {
			return err
		}
	}
	if !s.rw {
		// A segment that was full when the log was opened becomes the
		// tail again.
		if err := l.reopenForWrite(s); err != nil {
			return err
		}
	}
	if err := zeroFrom(s.f, off, l.size); err != nil {
		err = fmt.Errorf("raftwal: truncate %s: %w", s.name, err)
		l.fatal(err)
		return err
	}
	if l.dirty == s {
		l.dirty = nil // zeroFrom synced it
	}
	return nil
}

func (l *Log) reopenForWrite(s *segment) error {
	f, err := l.fs.OpenReadWrite(filepath.Join(l.dir, s.name), vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("raftwal: reopen %s: %w", s.name, err)
	}
	l.mu.Lock()
	old := s.f
	s.f, s.rw = f, true
	l.mu.Unlock()
	return old.Close()
}

// Close syncs what was written unsynced and closes the segments. The log
// must not be used after.
func (l *Log) Close() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if !l.closed {
		if err := l.syncDirty(); err != nil {
			return err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.closeFiles()
}

func (l *Log) closeFiles() error {
	var errs []error
	for _, s := range l.segs {
		if s.f != nil {
			errs = append(errs, s.f.Close())
		}
	}
	return errors.Join(errs...)
}
