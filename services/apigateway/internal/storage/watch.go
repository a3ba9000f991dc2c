package storage

import (
	"context"
	"errors"
	"fmt"
	"io"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
)

// EventType is the kind of a change.
type EventType int

// Event types.
const (
	// Put is a create or an update; KV.CreateRevision == KV.ModRevision for
	// a create.
	Put EventType = iota + 1
	// Delete is a delete; KV.ModRevision is the revision of the delete and
	// PrevKV the last state.
	Delete
)

// Event is one change.
type Event struct {
	// Type is the kind of change.
	Type EventType
	// KV is the key after the change.
	KV KV
	// PrevKV is the key before the change; empty when it did not exist.
	PrevKV KV
	// Err is set when KV's or PrevKV's value did not decrypt (the
	// Transformer's error); that value is nil then. The watch goes on:
	// the caller decides what the object it cannot read means.
	Err error
}

// WatchBatch is what one Recv returns: events in revision order, or a
// progress notification (no events; every event up to Revision was sent).
type WatchBatch struct {
	// Events are the changes.
	Events []Event
	// Revision is the revision of the last event, or of the progress point.
	Revision int64
	// Progress marks a progress notification.
	Progress bool
}

// Watcher is an open watch. Recv is not safe for concurrent use.
type Watcher struct {
	store  *Store
	stream storev1.WatchService_WatchClient
	cancel context.CancelFunc
	start  int64
}

// Watch opens a watch on every key under prefix from startRevision (0 for
// changes after now), with previous values. progress asks the store for
// periodic progress notifications. Close the watcher, or cancel ctx, to
// end it.
func (s *Store) Watch(ctx context.Context, prefix string, startRevision int64, progress bool) (*Watcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := s.watch.Watch(ctx)
	if err != nil {
		cancel()
		return nil, convert(err, startRevision)
	}
	err = stream.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: &storev1.WatchCreateRequest{
		Key: []byte(prefix), RangeEnd: storeclient.PrefixEnd(prefix), StartRevision: startRevision, PrevKv: true, ProgressNotify: progress,
	}}})
	if err != nil {
		cancel()
		return nil, convert(err, startRevision)
	}
	return &Watcher{store: s, stream: stream, cancel: cancel, start: startRevision}, nil
}

// Recv returns the next batch. It returns *CompactedError when the start
// revision was compacted, io.EOF when the store ended the watch cleanly.
func (w *Watcher) Recv() (WatchBatch, error) {
	for {
		resp, err := w.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return WatchBatch{}, io.EOF
			}
			return WatchBatch{}, convert(err, w.start)
		}
		if resp.Canceled {
			if resp.CompactRevision > 0 {
				return WatchBatch{}, &CompactedError{CompactRevision: resp.CompactRevision, Requested: w.start}
			}
			return WatchBatch{}, fmt.Errorf("storage: watch canceled by the store: %s", resp.CancelReason)
		}
		if resp.Created && len(resp.Events) == 0 && !resp.ProgressNotify {
			continue
		}
		b := WatchBatch{Revision: resp.GetHeader().GetRevision(), Progress: len(resp.Events) == 0}
		for _, ev := range resp.Events {
			e := w.event(ev)
			switch ev.Type {
			case storev1.Event_TYPE_PUT:
				e.Type = Put
			case storev1.Event_TYPE_DELETE:
				e.Type = Delete
			default:
				return WatchBatch{}, fmt.Errorf("storage: unknown event type %v", ev.Type)
			}
			b.Events = append(b.Events, e)
		}
		return b, nil
	}
}

// event is ev with its values decrypted; a value that does not decrypt
// leaves its KV without a value and sets Err.
func (w *Watcher) event(ev *storev1.Event) Event {
	ctx := w.stream.Context()
	kv, err := w.store.fromProto(ctx, ev.Kv)
	if err != nil {
		kv = withoutValue(ev.Kv)
	}
	prev, prevErr := w.store.fromProto(ctx, ev.PrevKv)
	if prevErr != nil {
		prev = withoutValue(ev.PrevKv)
	}
	return Event{KV: kv, PrevKV: prev, Err: errors.Join(err, prevErr)}
}

// withoutValue is kv's key and revisions.
func withoutValue(kv *storev1.KeyValue) KV {
	return KV{Key: string(kv.GetKey()), ModRevision: kv.GetModRevision(), CreateRevision: kv.GetCreateRevision()}
}

// Close ends the watch. It is safe to call more than once.
func (w *Watcher) Close() { w.cancel() }
