package raftnode

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft"

	"github.com/meridian-cp/meridian/services/store/internal/raftwal"
)

// snapshotStore is raft's file snapshot store with the two duties the
// raft log's unsynced appends on a non-voter need (package raftwal,
// "Durability"): before a snapshot becomes durable, the log is synced, so
// that it never ends before the snapshot's index after a crash; and the
// log learns each durable snapshot's configuration, the latest one after
// raft installs a snapshot from the leader and empties the log.
type snapshotStore struct {
	raft.SnapshotStore
	wal *raftwal.Log
}

// newSnapshotStore wraps files and tells wal the configuration of the
// newest snapshot there is.
func newSnapshotStore(files raft.SnapshotStore, wal *raftwal.Log) (*snapshotStore, error) {
	metas, err := files.List()
	if err != nil {
		return nil, fmt.Errorf("raftnode: list snapshots: %w", err)
	}
	if len(metas) > 0 { // newest first
		if err := wal.NoteSnapshotConfiguration(metas[0].Configuration, metas[0].ConfigurationIndex); err != nil {
			return nil, err
		}
	}
	return &snapshotStore{SnapshotStore: files, wal: wal}, nil
}

// Create starts a snapshot whose Close syncs the log first and then
// records the snapshot's configuration in it.
func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &snapshotSink{SnapshotSink: sink, wal: s.wal, cfg: configuration, cfgIndex: configurationIndex}, nil
}

type snapshotSink struct {
	raft.SnapshotSink
	wal      *raftwal.Log
	cfg      raft.Configuration
	cfgIndex uint64
}

// Close makes the snapshot durable, after the log.
func (s *snapshotSink) Close() error {
	if err := s.wal.Sync(); err != nil {
		_ = s.SnapshotSink.Cancel()
		return fmt.Errorf("raftnode: sync the log before a snapshot: %w", err)
	}
	if err := s.SnapshotSink.Close(); err != nil {
		return err
	}
	return s.wal.NoteSnapshotConfiguration(s.cfg, s.cfgIndex)
}

var _ io.WriteCloser = (*snapshotSink)(nil)
