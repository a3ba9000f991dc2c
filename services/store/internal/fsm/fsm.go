// Package fsm is the raft state machine: it applies committed raft entries
// to the MVCC store and announces their events to the watch hub.
//
// # Durability invariant
//
// FSM batches commit to pebble with pebble.NoSync; the raft log, in its own
// synced segments (package raftwal), is what makes an applied entry
// durable. A crash may lose the last applied batches, never the raft
// entries that produced them, and the meta key in each batch records the
// applied index, so on restart raft replays its log from its last snapshot
// and the FSM skips every entry at or below the durable applied index:
// nothing is lost and nothing is applied twice.
//
// On a non-voter the log is not synced (package raftwal, "Durability"): a
// crash may take the log's tail, even below the applied index the DB kept.
// Those entries are committed; the leader sends them again, and the FSM
// skips them as above.
//
// Raft deletes log entries only up to a snapshot's index; Persist syncs the
// DB first, so the state covering those entries is durable before they go.
// A restore from a snapshot (Restore) ends with a synced commit for the
// same reason: raft then drops the whole log.
package fsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-cp/meridian/lib/telemetry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// ErrFailed is returned for every entry after a storage error: the FSM
// stops applying (its durable state is intact; a restart re-applies).
var ErrFailed = errors.New("fsm: state machine failed on a storage error")

// Publisher receives committed events (the watch hub).
type Publisher interface {
	// Publish announces events up to rev, in revision order. Must not block.
	Publish(rev int64, events []*storev1.Event)
	// Reset announces that the state was replaced wholesale.
	Reset(rev int64, reason string)
}

// Options configure an FSM.
type Options struct {
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the FSM's metrics; nil registers none.
	Registerer prometheus.Registerer
	// OnFatal, if set, is called once with the storage error that stopped
	// the FSM.
	OnFatal func(error)
	// ReasonRestored is the cancel reason given to watchers after a
	// snapshot restore.
	ReasonRestored string
	// TracerProvider records a "store.apply" span, with a "store.commit"
	// child (the pebble batch commit), for every applied entry whose
	// Extensions hold a sampled traceparent (see raftnode), and gives the
	// entry's events the apply span's traceparent; nil: none.
	TracerProvider trace.TracerProvider
}

// FSM implements raft.BatchingFSM over an mvcc.Store.
//
// raft calls ApplyBatch, Snapshot and Restore from its single FSM
// goroutine, never concurrently; AppliedIndex and WaitApplied are safe from
// any goroutine.
type FSM struct {
	store   *mvcc.Store
	pub     Publisher
	opts    Options
	metrics *metrics

	mu sync.Mutex
	// advanced is closed and replaced whenever the applied index moves.
	advanced chan struct{}
	// fatal is the storage error that stopped the FSM.
	fatal error
}

var _ raft.BatchingFSM = (*FSM)(nil)

// New returns an FSM applying to store and publishing to pub.
func New(store *mvcc.Store, pub Publisher, opts Options) (*FSM, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &FSM{store: store, pub: pub, opts: opts, metrics: m, advanced: make(chan struct{})}, nil
}

// Apply applies one entry.
func (f *FSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies committed entries in one pebble batch (group commit).
// Each command's response is a *storev1.TxnResponse, a
// *storev1.CompactResponse or an error; other entries get nil. Entries at
// or below the persisted applied index are skipped.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	resps := make([]any, len(logs))
	if err := f.Err(); err != nil {
		for i := range resps {
			resps[i] = err
		}
		return resps
	}
	start := time.Now()
	applied := f.store.AppliedIndex()
	last := applied
	w := f.store.NewWriteBatch()
	defer w.Close()
	var traced []trace.Span
	for i, l := range logs {
		if l.Index <= applied {
			continue // durable already: applying again would double it
		}
		last = l.Index
		if l.Type != raft.LogCommand {
			continue
		}
		var span trace.Span
		if len(l.Extensions) > 0 {
			_, span = telemetry.StartRemoteSpan(context.Background(), f.opts.TracerProvider, string(l.Extensions), telemetry.ScopeStore, "store.apply",
				trace.WithTimestamp(start), trace.WithAttributes(attribute.Int64("raft.index", int64(l.Index)), attribute.Int("raft.batch_entries", len(logs))))
		}
		from := w.EventCount()
		resp, err := f.applyCommand(w, l.Data)
		if span != nil && span.IsRecording() {
			w.TraceEvents(from, telemetry.Traceparent(trace.ContextWithSpan(context.Background(), span)))
			traced = append(traced, span)
		}
		if err != nil && isStorageError(err) {
			return f.fail(resps, err)
		}
		if err != nil {
			resps[i] = err
		} else {
			resps[i] = resp
		}
	}
	if last == applied {
		return resps
	}
	commitStart := time.Now()
	events, err := w.Commit(last, pebble.NoSync) // see "Durability invariant"
	if err != nil {
		return f.fail(resps, err)
	}
	commitEnd := time.Now()
	f.metrics.commit.Observe(commitEnd.Sub(commitStart).Seconds())
	f.metrics.etcdCommit.Observe(commitEnd.Sub(commitStart).Seconds())
	f.pub.Publish(w.Rev(), events)
	f.notifyAdvanced()
	endSpans(traced, commitStart, commitEnd, w.Rev())
	f.metrics.apply.Observe(time.Since(start).Seconds())
	f.metrics.batch.Observe(float64(len(logs)))
	return resps
}

func (f *FSM) applyCommand(w *mvcc.WriteBatch, data []byte) (any, error) {
	cmd, err := decode(data)
	if err != nil {
		return nil, err
	}
	switch cmd.kind {
	case KindTxn:
		return w.Txn(cmd.txn)
	case KindCompact:
		return w.Compact(cmd.compact.GetRevision())
	case KindMember:
		return nil, w.SetMember(cmd.member.GetId(), cmd.member.GetClientAddress())
	case KindLeaseGrant:
		if err := w.LeaseGrant(cmd.grant.GetId(), cmd.grant.GetTtl().AsDuration().Milliseconds()); err != nil {
			return nil, err
		}
		return &storev1.LeaseGrantResponse{Id: cmd.grant.GetId(), Ttl: cmd.grant.GetTtl()}, nil
	case KindLeaseRevoke:
		r, err := w.LeaseRevoke(cmd.revoke.GetId())
		if err != nil {
			return nil, err
		}
		return &storev1.LeaseRevokeResponse{Header: r.GetHeader()}, nil
	}
	return nil, ErrBadCommand
}

// isStorageError reports whether err is not a deterministic request error.
func isStorageError(err error) bool {
	for _, e := range []error{mvcc.ErrInvalidArgument, mvcc.ErrCompacted, mvcc.ErrFutureRev, mvcc.ErrLeaseNotFound, mvcc.ErrLeaseExists, ErrBadCommand} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

func (f *FSM) fail(resps []any, err error) []any {
	err = fmt.Errorf("%w: %w", ErrFailed, err)
	f.mu.Lock()
	first := f.fatal == nil
	if first {
		f.fatal = err
	}
	f.mu.Unlock()
	if first {
		f.opts.Logger.Error("state machine stopped", "error", err)
		if f.opts.OnFatal != nil {
			f.opts.OnFatal(err)
		}
	}
	for i := range resps {
		resps[i] = err
	}
	return resps
}

// Err returns the storage error that stopped the FSM, or nil.
func (f *FSM) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal
}

func (f *FSM) notifyAdvanced() {
	f.mu.Lock()
	close(f.advanced)
	f.advanced = make(chan struct{})
	f.mu.Unlock()
}

// Leases returns every lease with its granted TTL in milliseconds.
func (f *FSM) Leases() (map[int64]int64, error) { return f.store.Leases() }

// LeaseKeys returns the keys attached to a lease.
func (f *FSM) LeaseKeys(id int64) ([][]byte, error) { return f.store.LeaseKeys(id) }

// AppliedIndex returns the index of the last entry the FSM applied (not
// raft's AppliedIndex, which moves when entries are handed to the FSM).
func (f *FSM) AppliedIndex() uint64 { return f.store.AppliedIndex() }

// WaitApplied blocks until the FSM applied index reaches index, ctx ends or
// the FSM fails.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		f.mu.Lock()
		ch, fatal := f.advanced, f.fatal
		f.mu.Unlock()
		if fatal != nil {
			return fatal
		}
		if f.store.AppliedIndex() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Snapshot pins the current state; raft calls it on the FSM goroutine, so
// every applied batch is committed.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &snapshot{store: f.store, snap: f.store.NewSnapshot(), metrics: f.metrics}, nil
}

// Restore replaces the state with a snapshot stream and resets the watch
// hub (watchers must start over).
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.store.Restore(rc); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	f.pub.Reset(f.store.Rev(), f.opts.ReasonRestored)
	f.notifyAdvanced()
	f.opts.Logger.Info("state restored from snapshot", "revision", f.store.Rev(), "applied_index", f.store.AppliedIndex())
	return nil
}

type snapshot struct {
	store   *mvcc.Store
	snap    *mvcc.Snapshot
	metrics *metrics
}

// Persist syncs the DB (so the state covering every entry raft may now
// delete is durable), then streams the pinned state into sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	if err := s.store.Sync(); err != nil {
		_ = sink.Cancel()
		return err
	}
	if _, err := s.snap.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("fsm: close snapshot: %w", err)
	}
	s.metrics.snapshot.Observe(time.Since(start).Seconds())
	return nil
}

// Release unpins the state.
func (s *snapshot) Release() { s.snap.Close() }

// endSpans ends the apply spans of a batch's traced entries, each with a
// "store.commit" child for the batch's commit, from commitStart to
// commitEnd (one commit serves every entry of the batch; pebble.NoSync:
// durability is the raft log's fsync, "store.wal.append"), at revision
// rev.
func endSpans(spans []trace.Span, commitStart, commitEnd time.Time, rev int64) {
	for _, s := range spans {
		_, c := s.TracerProvider().Tracer(telemetry.ScopeStore).Start(trace.ContextWithSpan(context.Background(), s), "store.commit",
			trace.WithTimestamp(commitStart), trace.WithAttributes(attribute.Int64("store.revision", rev)))
		c.End(trace.WithTimestamp(commitEnd))
		s.SetAttributes(attribute.Int64("store.revision", rev))
		s.End()
	}
}
