package raftwal

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// migrateBatch is how many entries Migrate copies per append.
const migrateBatch = 256

// Migrate moves the entries of another log (the legacy raft log in pebble,
// package raftstable) into l, then deletes them from old. It is
// idempotent and safe to interrupt: entries are deleted from old only
// after all of them are in l, and a second run copies only what l lacks.
// It does nothing when old is empty.
func Migrate(old raft.LogStore, l *Log) (int, error) {
	first, err := old.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("raftwal: migrate: %w", err)
	}
	last, err := old.LastIndex()
	if err != nil {
		return 0, fmt.Errorf("raftwal: migrate: %w", err)
	}
	if last == 0 {
		return 0, nil
	}
	have, _ := l.LastIndex()
	from := first
	if have != 0 {
		if have+1 < first {
			return 0, fmt.Errorf("raftwal: migrate: the log ends at %d and the old log starts at %d", have, first)
		}
		from = have + 1
	}
	n := 0
	for i := from; i <= last; {
		batch := make([]*raft.Log, 0, min(migrateBatch, last-i+1))
		for ; i <= last && len(batch) < migrateBatch; i++ {
			e := new(raft.Log)
			if err := old.GetLog(i, e); err != nil {
				if errors.Is(err, raft.ErrLogNotFound) {
					return n, fmt.Errorf("raftwal: migrate: old log has a gap at %d", i)
				}
				return n, fmt.Errorf("raftwal: migrate: %w", err)
			}
			batch = append(batch, e)
		}
		if err := l.StoreLogs(batch); err != nil {
			return n, fmt.Errorf("raftwal: migrate: %w", err)
		}
		n += len(batch)
	}
	if err := old.DeleteRange(first, last); err != nil {
		return n, fmt.Errorf("raftwal: migrate: delete old entries: %w", err)
	}
	return n, nil
}
