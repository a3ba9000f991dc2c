package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// compactor compacts history older than a retention period, like
// kube-apiserver's periodic etcd compaction: every interval it records
// (now, current revision), and compacts to the newest recorded revision
// that is at least retention old. Only the leader proposes; the
// compaction goes through raft like any write.
type compactor struct {
	interval  time.Duration
	retention time.Duration
	log       *slog.Logger

	rev        func() int64
	compactRev func() int64
	isLeader   func() bool
	compact    func(ctx context.Context, rev int64) error

	samples []sample // oldest first
}

type sample struct {
	at  time.Time
	rev int64
}

func (c *compactor) run(ctx context.Context) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	c.tick(ctx, time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.tick(ctx, now)
		}
	}
}

// tick records a sample and compacts if a sample has aged past retention.
func (c *compactor) tick(ctx context.Context, now time.Time) {
	c.samples = append(c.samples, sample{at: now, rev: c.rev()})
	cutoff := now.Add(-c.retention)
	// Keep the newest sample at or before the cutoff and every later one.
	target := int64(0)
	i := 0
	for i < len(c.samples) && !c.samples[i].at.After(cutoff) {
		target = c.samples[i].rev
		i++
	}
	if i > 0 {
		c.samples = c.samples[i-1:]
	}
	if target <= c.compactRev() || !c.isLeader() {
		return
	}
	if err := c.compact(ctx, target); err != nil && !errors.Is(err, mvcc.ErrCompacted) && ctx.Err() == nil {
		c.log.Warn("automatic compaction failed", "revision", target, "error", err)
		return
	}
	c.log.Info("compacted history", "revision", target, "retention", c.retention)
}
